#!/usr/bin/env bash
# tools/gpu_check.sh — the one prepared GPU check of the CUDA backend (spec §5.6.7).
#
#   tools/gpu_check.sh pack   (here, on the CPU machine) builds build/ and copies the check
#                             binaries and the shared libraries the GPU image lacks into
#                             gpu_bundle/ (ignored by git; ~7 MiB) — carry it to the GPU machine.
#   tools/gpu_check.sh        (there) runs, each under its own timeout, from gpu_bundle/ (or from
#                             build/ when it was built there):
#                               cuda_self_test                 one kernel vs the CPU
#                               cuda_parity                    tiers 1, 2, 4 (spec §5.6)
#                               cuda_e2e                       phase-0 upload + checksum, tier 5
#                                                              (device executor vs CPU: tiny, tiny-fp8,
#                                                              flash-shape)
#                               cuda_e2e --preset flash-layer  tier 5 on one full-width V4-Flash layer
#                                                              (generates the 3.6 GB checkpoint, kept
#                                                              for the next step, removed at the end)
#                               bench_cuda_decode              decode step time, batch 1 / 16 on
#                                                              flash-layer ÷ a same-run roofline
#                               bench_cuda_bandwidth           linear GB/s ÷ measured copy GB/s
#                             and writes gpu_check.json (verdict per step) + gpu_check.log, plus
#                             each step's own JSON, under $OUT (or ./gpu_check_out). 7 files.
# Budget: nothing is compiled there. Expected (not yet observed: no GPU has run this) ~2 min for the
# first three steps and ~3-4 min for the flash-layer steps, most of it generating 3.6 GB (108 CPU-s
# on the loaded 2-core build VM, single-threaded) and the CPU reference's 168 tokens. A hard cap
# keeps the whole call under 8 minutes whatever happens: each step's timeout is cut to what is left
# of 470 s, and a step with under 10 s left is not started (verdict not-run-budget, a failure).
# Verdicts per step: pass, fail, timeout, not-run-budget, or skipped (the binary exited 77: it
# found no GPU). Overall (gpu_check.json "verdict", and the exit code): pass (0) only when every
# step passed; fail (1) when any step failed; incomplete (1) when none failed but a step skipped
# although nvidia-smi lists a GPU here — every step is required on a GPU machine, so that is never
# green; skipped (77) when steps skipped on a machine without a GPU. A step that cannot load is a
# failure, never a skip.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/gpu_bundle"
bins=(test/cuda_self_test test/cuda_parity test/cuda_e2e bench/cuda/bench_cuda_bandwidth bench/cuda/bench_cuda_decode)

if [ "${1:-}" = "pack" ]; then
  build="${BUILD_DIR:-$root/build}"
  [ -d "$build" ] || { echo "no $build: run etc/setup.sh (or meson setup build) first" >&2; exit 2; }
  ninja -C "$build" -j2 "${bins[@]}" || exit 1
  rm -rf "$bundle"; mkdir -p "$bundle/lib"
  for b in "${bins[@]}"; do
    [ -x "$build/$b" ] || { echo "missing $build/$b" >&2; exit 1; }
    strip -o "$bundle/$(basename "$b")" "$build/$b"
  done
  # Libraries of Debian packages the CUDA image does not have (fmt, mimalloc, xxhash), and cudart
  # (0.7 MiB, redistributable): the image's toolkit has one, but whether its directory is on the
  # loader's path there is not known, and the one the binaries were built against is certain to
  # match them. glibc and libstdc++ are found there (newer than Debian 12's), NCCL in the image's
  # nvidia-nccl-cu13 wheel (200+ MiB, too big to carry; located at run time below).
  for lib in $(ldd "$build/test/cuda_parity" "$build/test/cuda_e2e" | awk '/=> \//{print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread*|librt*|libdl*|libgcc_s*|libstdc++*|libnccl*) ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  echo "$(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD || echo '+uncommitted')" > "$bundle/COMMIT"
  du -sh "$bundle"
  echo "carry gpu_bundle (and run tools/gpu_check.sh there)"
  exit 0
fi

out="${OUT:-$root/gpu_check_out}"
mkdir -p "$out"
log="$out/gpu_check.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }

if [ -d "$bundle" ]; then dir="$bundle"; export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ -d "$root/build" ]; then dir="$root/build"
else say "FAIL: neither gpu_bundle/ nor build/ (run tools/gpu_check.sh pack on the build machine and carry gpu_bundle)"; exit 1
fi
# NCCL (and cudart, should the bundle lack it): the toolkit's directories, else the wheels the CUDA
# image carries. Appended after the bundle, so the bundle's own copies win.
wheel_lib() { python3 -c "import $1, os; print(os.path.join(list($1.__path__)[0], 'lib'))" 2>/dev/null; }
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$(wheel_lib nvidia.nccl)" "$(wheel_lib nvidia.cuda_runtime)"; do
  [ -n "$d" ] && { [ -e "$d/libnccl.so.2" ] || [ -e "$d/libcudart.so.13" ]; } && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done

say "gpu_check: $(date -u +%FT%TZ) from $dir (commit $(cat "$bundle/COMMIT" 2>/dev/null || git -C "$root" rev-parse HEAD 2>/dev/null))"
gpu_present=0
nvidia-smi -L 2>&1 | tee -a "$log" | grep -q '^GPU ' && gpu_present=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$log"

steps_json=""
failed=0
skipped=0
budget_end=$(( $(date +%s) + 470 ))
# run NAME LIMIT_S BINARY ARGS...: one step, its exit code and wall time into the summary.
run() {
  local name="$1" limit="$2" bin="$3"; shift 3
  local exe="$dir/$bin"; [ -x "$exe" ] || exe="$dir/$(basename "$bin")"
  say ""; say "== $name"
  local left=$(( budget_end - $(date +%s) ))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then say "NOT RUN: the check's 470 s budget is spent"; rc=125; secs=0.000
  elif ! [ -x "$exe" ]; then say "FAIL: $exe missing"; rc=127; secs=0.000
  else
    local missing; missing="$(ldd "$exe" 2>&1 | grep 'not found')"
    [ -n "$missing" ] && say "does not load here: $missing"
    local t0; t0=$(date +%s.%N)
    timeout "$limit" "$exe" "$@" 2>&1 | tee -a "$log"; rc=${PIPESTATUS[0]}
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
  fi
  local verdict=pass
  if [ "$rc" -eq 77 ]; then verdict=skipped; skipped=1
  elif [ "$rc" -ne 0 ]; then verdict=fail; failed=1
    [ "$rc" -eq 124 ] && verdict=timeout
    [ "$rc" -eq 125 ] && verdict="not-run-budget"
  fi
  say "-- $name: $verdict (exit $rc, ${secs}s)"
  steps_json="${steps_json:+$steps_json,}{\"step\":\"$name\",\"verdict\":\"$verdict\",\"exit\":$rc,\"seconds\":$secs}"
}

models="${TMPDIR:-/tmp}/gpu_check_models"  # flash-layer, generated once for tier 5 and the decode bench
run self_test 30 test/cuda_self_test
run parity 120 test/cuda_parity --json "$out/parity.json"
run e2e 120 test/cuda_e2e --json "$out/e2e.json"
run e2e_flash_layer 240 test/cuda_e2e --preset flash-layer --keep-models "$models" --json "$out/e2e_flash_layer.json"
run decode 120 bench/cuda/bench_cuda_decode --keep-models "$models" --json "$out/decode.json"
run bandwidth 60 bench/cuda/bench_cuda_bandwidth --json "$out/bandwidth.json"
rm -rf "$models"

verdict=pass; code=0
if [ $failed -ne 0 ]; then verdict=fail; code=1
elif [ $skipped -ne 0 ] && [ $gpu_present -eq 1 ]; then verdict=incomplete; code=1  # a required step skipped on a GPU machine
elif [ $skipped -ne 0 ]; then verdict=skipped; code=77
fi
echo "{\"commit\":\"$(cat "$bundle/COMMIT" 2>/dev/null)\",\"verdict\":\"$verdict\",\"gpu_present\":$([ $gpu_present -eq 1 ] && echo true || echo false),\"all_passed\":$([ $code -eq 0 ] && echo true || echo false),\"steps\":[$steps_json]}" > "$out/gpu_check.json"
say ""; say "verdict: $verdict"; say "summary: $out/gpu_check.json"; cat "$out/gpu_check.json" | tee -a "$log"
exit $code
