#!/usr/bin/env bash
# tools/sanitize.sh — builds the server and the unit tests under a sanitizer and runs the unit
# suite and a pd e2e subset against that binary. Any sanitizer report fails it.
#
#   tools/sanitize.sh tsan        ThreadSanitizer (build-tsan/, -Db_sanitize=thread)
#   tools/sanitize.sh asan        AddressSanitizer + UBSan (build-asan/, -Db_sanitize=address,undefined)
#   tools/sanitize.sh tsan --unit-only
#   tools/sanitize.sh tsan --e2e-only              (skips the unit suite)
#   tools/sanitize.sh tsan --unit-only -- -sf='*unit/engine/*'   (arguments after -- go to the
#                                                  unit tests with --unit-only: a shard)
#   tools/sanitize.sh tsan -- -k "test_sigstop"     (arguments after -- go to pytest)
#   tools/sanitize.sh tsan --no-build --run engine --unit-only -- -sf='*unit/engine/*'
#                       (--run NAME: reports and logs of their own, sanitizer-reports-NAME/ and
#                       sanitize-*-NAME.log, so shards can run side by side; --no-build: use the
#                       binaries as built, as a run beside another must)
# The e2e subset: test_pd.py, test_pd_liveness.py and test_lifecycle.py (every thread that
# matters: HTTP loop, scheduler, tcp transport and heartbeats, prefill and decode engines).
# Reports are written per process under build-<san>/sanitizer-reports/ (servers started by the e2e
# tests included) and summarized at the end. Not part of CI: on 2 cores the TSan unit suite alone
# takes about 15 minutes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

san=${1:-}
case "$san" in
  tsan) dir=build-tsan; sanitize=thread ;;
  asan) dir=build-asan; sanitize=address,undefined ;;
  *) echo "usage: tools/sanitize.sh tsan|asan [--unit-only] [-- pytest args]" >&2; exit 2 ;;
esac
shift
unit_only=0
e2e_only=0
build=1
run=
pytest_args=()
while (($#)); do
  case "$1" in
    --unit-only) unit_only=1; shift ;;
    --e2e-only) e2e_only=1; shift ;;
    --no-build) build=0; shift ;;
    --run) run=-${2:?--run needs a name}; shift 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "tools/sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ((build)) && [ ! -f "$dir/build.ninja" ]; then
  echo "==> configuring $dir/ (-Db_sanitize=$sanitize)" >&2
  meson setup "$dir" --buildtype=debugoptimized -Db_sanitize="$sanitize" -Dcuda=disabled >/dev/null
fi
if ((build)); then
  echo "==> building $dir/tandem and the unit tests" >&2
  ninja -C "$dir" -j"$(nproc)" tandem test/unit_tests >"$dir/sanitize-build.log" 2>&1 ||
    { tail -40 "$dir/sanitize-build.log" >&2; exit 1; }
fi

reports=$root/$dir/sanitizer-reports$run
rm -rf "$reports"
mkdir -p "$reports"
# Reports go to files (a server's stderr may belong to a test); suppressions only for third-party
# code, each with its reason (etc/tsan.supp).
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$reports/tsan suppressions=$root/etc/tsan.supp"
export ASAN_OPTIONS="log_path=$reports/asan detect_leaks=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan print_stacktrace=1"

status=0
if ((!e2e_only)); then
  echo "==> unit suite under $san" >&2
  unit_args=()
  ((unit_only)) && unit_args=("${pytest_args[@]}")
  "$dir/test/unit_tests" --no-intro=true "${unit_args[@]}" >"$dir/sanitize-unit$run.log" 2>&1 || status=$?
  grep -a 'test cases\|Status' "$dir/sanitize-unit$run.log" >&2 || true
fi
if ((!unit_only)); then
  echo "==> e2e pd subset against $dir/tandem" >&2
  ((${#pytest_args[@]})) || pytest_args=(test/e2e/test_pd.py test/e2e/test_pd_liveness.py test/e2e/test_lifecycle.py)
  TANDEM_BIN=$root/$dir/tandem TANDEM_SOURCE_ROOT=$root \
    .venv/bin/python -m pytest -q -p no:cacheprovider "${pytest_args[@]}" >"$dir/sanitize-e2e$run.log" 2>&1 || status=$?
  tail -3 "$dir/sanitize-e2e$run.log" >&2
fi

found=$(grep -lE 'WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error' "$reports"/* 2>/dev/null || true)
if [ -n "$found" ]; then
  echo "tools/sanitize.sh: sanitizer reports in:" >&2
  for f in $found; do
    echo "  $f" >&2
    grep -aE '^(WARNING|ERROR|SUMMARY)|runtime error' "$f" | head -3 | sed 's/^/    /' >&2
  done
  exit 1
fi
if ((status)); then echo "tools/sanitize.sh: tests failed (logs: $dir/sanitize-*.log)" >&2; exit "$status"; fi
echo "tools/sanitize.sh: $san clean ($( ((e2e_only)) || echo 'unit')$( ((unit_only || e2e_only)) || echo ' + ')$( ((unit_only)) || echo 'e2e'))" >&2
