#!/usr/bin/env bash
# tools/fuzz.sh — builds the libFuzzer harnesses (fuzz/) with clang, ASan and UBSan in build-fuzz/
# and runs each for a bounded time from its seed corpus (fuzz/corpus/<target>/), with a fixed
# seed. Fails on any crash, sanitizer report, leak, timeout or out-of-memory; the input that did
# it is kept under build-fuzz/artifacts/ (add it as a regression test, then to the corpus).
#
#   tools/fuzz.sh                      every target, 20 s each
#   tools/fuzz.sh --runs 300000        a fixed number of inputs each: what etc/setup.sh test runs, so
#                                      CI's verdict does not depend on how fast the machine is
#   tools/fuzz.sh --seconds 600 pd_frame chat_body
#   tools/fuzz.sh --minutes 60         the long run (README "Fuzzing")
#   tools/fuzz.sh --build-only
# New inputs found are kept in build-fuzz/corpus/<target>/ (never written into the repo); a
# later run starts from them too. Run `nice -n 19 tools/fuzz.sh ...` beside other work.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

all_targets=(http_request chat_body completions_body generate_body messages_body text_bodies
             pd_frame pd_handshake dsml_output safetensors_header)
seconds=20
runs=0
build_only=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "tools/fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "tools/fuzz.sh: no target '$t' (fuzz/corpus/$t missing)" >&2; exit 2; }
done

command -v clang++-16 >/dev/null || { echo "tools/fuzz.sh: clang++-16 not found (apt-get install clang-16 libclang-rt-16-dev; etc/setup.sh does)" >&2; exit 1; }
if [ ! -f build-fuzz/build.ninja ]; then
  echo "==> configuring build-fuzz/ (clang 16, -Dfuzz=true, ASan + UBSan)" >&2
  CC=clang-16 CXX=clang++-16 meson setup build-fuzz --buildtype=debugoptimized -Dfuzz=true -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
echo "==> building ${#targets[@]} fuzz target(s)" >&2
if ! ninja -C build-fuzz -j"$(nproc)" "${targets[@]/#/fuzz/fuzz_}" >build-fuzz/ninja.log 2>&1; then
  cat build-fuzz/ninja.log >&2
  echo "tools/fuzz.sh: the fuzz build failed" >&2
  exit 1
fi
((build_only)) && exit 0

# UBSan reports are errors here, not warnings; leaks are checked at the end of every run.
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
mkdir -p build-fuzz/artifacts
failed=()
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  log=build-fuzz/fuzz_$t.log
  # -seed fixes the mutation sequence; -timeout fails an input that takes over 10 s (a hang);
  # -rss_limit_mb fails runaway memory; -max_len bounds inputs to a few KiB (bodies, frames).
  # A fixed number of runs from a fresh work corpus with a fixed seed is the same search on any
  # machine; a time budget searches further on a faster one.
  if ((runs > 0)); then bound=(-runs="$runs"); rm -rf "$work"; mkdir -p "$work"
  else bound=(-max_total_time="$seconds"); fi
  if build-fuzz/fuzz/fuzz_$t -seed=1 "${bound[@]}" -timeout=10 -rss_limit_mb=2048 \
       -max_len=8192 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t-" \
       "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    stats=$(grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)' "$log" |
            sed 's/stat:://' | tr '\n' ' ')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    printf '    %-20s ok   %s %s\n' "$t" "$cov" "$stats"
  else
    printf '    %-20s FAIL (log: %s)\n' "$t" "$log"
    grep -E 'ERROR|fuzz check failed|SUMMARY|Test unit written' "$log" | head -8 | sed 's/^/        /'
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "tools/fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
if ((runs > 0)); then each="$runs inputs"; else each="${seconds} s"; fi
echo "tools/fuzz.sh: ${#targets[@]} target(s) ran ${each} each, no failure" >&2
