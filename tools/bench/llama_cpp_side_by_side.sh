#!/usr/bin/env bash
# tools/bench/llama_cpp_side_by_side.sh — dev only, not in CI: tandem's CPU forward pass beside
# llama.cpp's on the same checkpoint (issue #12 item 6).
#
# llama.cpp comes from the llama-cpp-python 0.3.36 sdist on PyPI (its vendored llama.cpp has the
# deepseek4 architecture): the sdist is downloaded with pip (no wheel), llama-bench is built from
# it with CMake, and its own convert_hf_to_gguf.py turns the tandem checkpoint into GGUF (F32 and
# BF16) in a private venv (torch CPU, from the vendored requirements). Then ROUNDS interleaved
# rounds of
#     llama-bench -m F32.gguf -p 512 -n 64 -t T -r 1,   llama-bench -m BF16.gguf …,
#     bench_model_cpu --model DIR --prompt 512 --decode 64 --batch 1 --rounds 1 --threads T
# and the best of each figure, with tandem ÷ llama.cpp (goals: decode ≥ 1.5 at the checkpoint's
# own precision, prefill ≥ 1). Everything downloaded or built lives in WORK (default
# /tmp/tandem-llama-side-by-side, reused by later runs); nothing is installed system-wide.
#
#   tools/bench/llama_cpp_side_by_side.sh [--model models/small] [--rounds 3] [--threads 2]
#                                         [--work DIR] [--tandem-bench build/bench/model/bench_model_cpu]
# Needs: cmake, a C++ compiler, python3 -m venv, network access to PyPI and download.pytorch.org.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
model=models/small rounds=3 threads=2 work=/tmp/tandem-llama-side-by-side
tandem_bench=$root/build/bench/model/bench_model_cpu
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --model) model=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --tandem-bench) tandem_bench=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ -f $model/config.json ]] || { echo "no checkpoint at $model (tandem make-model --preset small --out $model ...)" >&2; exit 2; }
[[ -x $tandem_bench ]] || { echo "no $tandem_bench: build tandem first (ninja -C build)" >&2; exit 2; }
model=$(cd "$model" && pwd)
mkdir -p "$work"
cd "$work"

version=0.3.36
src=$work/llama_cpp_python-$version/vendor/llama.cpp
if [[ ! -d $src ]]; then
    python3 -m venv "$work/pipdl"
    "$work/pipdl/bin/pip" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
    tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi
bench=$work/llama-build/bin/llama-bench
if [[ ! -x $bench ]]; then
    cmake -S "$src" -B "$work/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
    cmake --build "$work/llama-build" --target llama-bench -j "$(nproc)" >/dev/null
fi
if [[ ! -x $work/convert-venv/bin/python ]]; then
    python3 -m venv "$work/convert-venv"
    # The vendored pins; their extra index (download.pytorch.org, CPU torch) may be unreachable,
    # and pip then takes the same pins from PyPI (a bigger torch build, same conversion).
    (cd "$src" && "$work/convert-venv/bin/pip" install --quiet --retries 1 --timeout 10 \
        -r requirements/requirements-convert_hf_to_gguf.txt)
fi
name=$(basename "$model")
for t in f32 bf16; do
    gguf=$work/$name-$t.gguf
    [[ -f $gguf ]] || "$work/convert-venv/bin/python" "$src/convert_hf_to_gguf.py" "$model" --outtype "$t" \
        --outfile "$gguf" >"$work/convert-$t.log" 2>&1 || { tail -20 "$work/convert-$t.log" >&2; exit 1; }
done

# llama-bench CSV: avg_ts of the pp512 and tg64 rows. bench_model_cpu: its prefill and decode lines.
llama_round() {  # file → "prefill decode"
    "$bench" -m "$1" -p 512 -n 64 -t "$threads" -r 1 -o csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
pp = [float(r["avg_ts"]) for r in rows if int(r["n_prompt"]) > 0]
tg = [float(r["avg_ts"]) for r in rows if int(r["n_gen"]) > 0]
print(pp[0], tg[0])'
}
tandem_round() {
    "$tandem_bench" --model "$model" --prompt 512 --decode 64 --context 512 --batch 1 --rounds 1 \
        --threads "$threads" | python3 -c '
import re, sys
out = sys.stdin.read()
pre = re.search(r"^prefill: \d+ tokens: ([\d.]+) tok/s", out, re.M).group(1)
dec = re.search(r"^decode batch 1 \(context \d+\): ([\d.]+) tok/s", out, re.M).group(1)
print(pre, dec)'
}
max() { python3 -c "import sys; print(max(float(a) for a in sys.argv[1:]))" "$@"; }

echo "load before: $(uptime)"
declare -A best=([f32_pp]=0 [f32_tg]=0 [bf16_pp]=0 [bf16_tg]=0 [tandem_pp]=0 [tandem_tg]=0)
for ((r = 1; r <= rounds; r++)); do
    for t in f32 bf16; do
        read -r pp tg < <(llama_round "$work/$name-$t.gguf")
        best[${t}_pp]=$(max "${best[${t}_pp]}" "$pp"); best[${t}_tg]=$(max "${best[${t}_tg]}" "$tg")
        echo "round $r: llama.cpp $t: prefill $pp tok/s, decode $tg tok/s"
    done
    read -r pp tg < <(tandem_round)
    best[tandem_pp]=$(max "${best[tandem_pp]}" "$pp"); best[tandem_tg]=$(max "${best[tandem_tg]}" "$tg")
    echo "round $r: tandem ($(python3 -c "import json;print(json.load(open('$model/config.json')).get('torch_dtype','?'))") as stored): prefill $pp tok/s, decode $tg tok/s"
done
echo "load after: $(uptime)"
python3 - "${best[f32_pp]}" "${best[f32_tg]}" "${best[bf16_pp]}" "${best[bf16_tg]}" "${best[tandem_pp]}" "${best[tandem_tg]}" "$rounds" "$threads" <<'EOF'
import sys
f32_pp, f32_tg, bf16_pp, bf16_tg, t_pp, t_tg = map(float, sys.argv[1:7])
print(f"best of {sys.argv[7]} interleaved rounds, {sys.argv[8]} threads, prompt 512, 64 generated:")
print(f"{'':<22}{'prefill tok/s':>14}{'decode tok/s':>14}{'tandem ÷ (prefill)':>20}{'tandem ÷ (decode)':>19}")
print(f"{'tandem (stored form)':<22}{t_pp:>14.1f}{t_tg:>14.1f}")
for name, pp, tg in (("llama.cpp F32", f32_pp, f32_tg), ("llama.cpp BF16", bf16_pp, bf16_tg)):
    print(f"{name:<22}{pp:>14.1f}{tg:>14.1f}{t_pp / pp:>20.2f}{t_tg / tg:>19.2f}")
EOF
