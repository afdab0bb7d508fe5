#!/usr/bin/env bash
# tools/bench/ab_decode.sh — decode steps of two builds measured in one process (dev only).
#
#   tools/bench/ab_decode.sh BUILD_A BUILD_B [--model DIR] [--batch N] [--chunks N] [--steps N]
#                            [--context N] [--unfilled] [--cpu-matmul exact|amx] [--cpu-matmul-b exact|amx]
#
# BUILD_A / BUILD_B: meson build directories inside their source trees (<tree>/build, e.g. a
# `git worktree add /tmp/before <rev>` set up like this one), each already built. For each, the
# build's libtandem_impl.a (a thin archive) is made whole and linked with entry.cpp, against that
# tree's headers, into a shared object; driver.cpp loads both (RTLD_LOCAL, -Bsymbolic: each keeps
# its own symbols, model, thread pool and page pool) and alternates chunks of decode steps.
# Runs twice, A loaded first then B first, and prints each run and their combination: the
# instance loaded second ran 2-7% faster or slower than the first in some runs of identical builds
# at batch 1 (placement, L3 sharing), so one order alone can mislead. With r1 = A ÷ B (A first) and
# r2 = A ÷ B (B first), A ÷ B = sqrt(r1 · r2) cancels a bias of either order. --cpu-matmul-b gives
# side B its own backend.cpu_matmul (`amx` against `exact` with BUILD_A = BUILD_B). --context N: the
# tokens each sequence holds before its steps (default 64); --unfilled: no prefill, the steps start
# at position N over the cache rows as allocated (the work a step does depends on its position, not
# on the rows' values: a way to time contexts too long to prefill here; the logits mean nothing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 2 ]] || { sed -n 2,19p "$0"; exit 2; }
a=$(cd "$1" && pwd); b=$(cd "$2" && pwd); shift 2
model=models/small batch=16 chunks=40 steps=5 context=64 prefill=1 mm=amx mm_b=
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) model=$2; shift 2 ;; --batch) batch=$2; shift 2 ;; --chunks) chunks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;; --context) context=$2; shift 2 ;; --unfilled) prefill=0; shift ;; --cpu-matmul) mm=$2; shift 2 ;; --cpu-matmul-b) mm_b=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs="-lmimalloc -pthread -lsimdjson -ltomlplusplus -lxxhash -lpcre2-8 -lfmt -luv"
[[ -f /usr/local/lib/libxgrammar.a ]] && libs="$libs /usr/local/lib/libxgrammar.a"
for side in a b; do
  build=${!side}; tree=$(dirname "$build")
  [[ -f $build/libtandem_impl.a ]] || { echo "$build: no libtandem_impl.a (build it first)" >&2; exit 1; }
  (cd "$build" && ar rcs "$work/$side.a" $(ar t libtandem_impl.a))
  c++ -std=c++20 -O2 -fPIC -shared -Wl,-Bsymbolic -I"$tree/src" -I"$build" -I"$tree" "$here/ab_decode/entry.cpp" \
      -o "$work/$side.so" "$work/$side.a" $libs
done
c++ -std=c++20 -O2 "$here/ab_decode/driver.cpp" -o "$work/driver" -ldl
# run FIRST.so SECOND.so MATMUL_FIRST MATMUL_SECOND
run() { MM=$3 MM_B=$4 "$work/driver" "$1" "$2" "$model" "$batch" "$chunks" "$steps" "$context" "$prefill" 2>&1 | grep -v " INFO "; }
echo "A loaded first:"; r1=$(run "$work/a.so" "$work/b.so" "$mm" "${mm_b:-$mm}" | tee /dev/stderr | sed -n 's/.*total \([0-9.]*\),.*/\1/p')
echo "B loaded first:"; r2=$(run "$work/b.so" "$work/a.so" "${mm_b:-$mm}" "$mm" | tee /dev/stderr | sed -n 's/.*total \([0-9.]*\),.*/\1/p')
python3 -c "import math; r1=$r1; r2=1/$r2; print(f'A / B = {math.sqrt(r1*r2):.3f} (A first {r1:.3f}, B first {r2:.3f}; above 1: B is faster)')"
