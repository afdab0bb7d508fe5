#!/usr/bin/env bash
# tools/bench/llama_cpp_side_by_side.sh — dev only, not in CI: tandem's CPU forward pass beside
# llama.cpp's on the same checkpoint (issue #12 item 6).
#
# llama.cpp comes from the llama-cpp-python 0.3.36 sdist on PyPI (its vendored llama.cpp has the
# deepseek4 architecture): the sdist is downloaded with pip (no wheel), llama-bench is built from
# it with CMake, and its own convert_hf_to_gguf.py turns the tandem checkpoint into GGUF in a
# private venv (torch, from the vendored requirements). That converter reads DeepSeek's upstream
# config.json (compress_ratios, rope_scaling), so the script writes one beside symlinks to the
# checkpoint's files; and it always repacks the routed experts to MXFP4 from FP4 + E8M0 scales, so
# the checkpoint must store its experts like the real one (flash-shape, tiny-fp8, flash-slice; not
# small, whose experts are BF16). Its FP8 dense weights become F32 or BF16 (--outtype), the
# experts stay FP4 (MXFP4); tandem runs the checkpoint as stored (FP8 + FP4). Then ROUNDS
# interleaved rounds of
#     llama-bench -m F32.gguf -p 512 -n 64 -t T -r 1,   llama-bench -m BF16.gguf …,
#     bench_model_cpu --model DIR --prompt 512 --decode 64 --batch 1 --rounds 1 --threads T
# and the best of each figure, with tandem ÷ llama.cpp (goals: decode ≥ 1.5, prefill ≥ 1).
# Everything downloaded or built lives in WORK (default /tmp/tandem-llama-side-by-side, reused by
# later runs); nothing is installed system-wide.
#
#   tools/bench/llama_cpp_side_by_side.sh [--model models/flash-shape] [--rounds 3] [--threads 2]
#                                         [--work DIR] [--tandem-bench build/bench/model/bench_model_cpu]
# Needs: cmake, a C++ compiler, python3 -m venv, network access to PyPI; ~5 GB in WORK (torch);
# the llama.cpp build took ~30 minutes on the shared 2-core VM.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
model=models/flash-shape rounds=3 threads=2 work=/tmp/tandem-llama-side-by-side
tandem_bench=$root/build/bench/model/bench_model_cpu
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
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
[[ -f $model/config.json ]] || { echo "no checkpoint at $model (tandem make-model --preset flash-shape --out $model ...)" >&2; exit 2; }
grep -q '"expert_dtype": *"fp4"' "$model/config.json" ||
    { echo "$model does not store FP4 experts, which llama.cpp's DeepSeek-V4 converter requires (try flash-shape)" >&2; exit 2; }
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
# The converter's view of the checkpoint: the same files, config.json in DeepSeek's upstream form.
upstream=$work/$name-upstream
rm -rf "$upstream" && mkdir -p "$upstream"
for f in "$model"/*; do [[ $(basename "$f") == config.json ]] || ln -s "$f" "$upstream/"; done
python3 - "$model/config.json" "$upstream/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
rate = {"sliding_attention": 0, **c.get("compress_rates", {})}
u = {k: v for k, v in c.items()
     if k not in ("layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "partial_rotary_factor")}
u["compress_ratios"] = [rate[t] for t in c["layer_types"]] + [0] * c.get("num_nextn_predict_layers", 0)
comp = c.get("rope_parameters", {}).get("compress", {})
if comp.get("rope_type") == "yarn":
    u["rope_scaling"] = {"type": "yarn", **{k: comp[k] for k in ("factor", "original_max_position_embeddings",
                                                                  "beta_fast", "beta_slow")}}
u["torch_dtype"] = c.get("dtype", "bfloat16")
json.dump(u, open(sys.argv[2], "w"), indent=1)
EOF
for t in f32 bf16; do
    gguf=$work/$name-$t.gguf
    [[ -f $gguf ]] || "$work/convert-venv/bin/python" "$src/convert_hf_to_gguf.py" "$upstream" --outtype "$t" \
        --outfile "$gguf" >"$work/convert-$t.log" 2>&1 || { tail -20 "$work/convert-$t.log" >&2; exit 1; }
done

# llama-bench CSV: avg_ts of the pp512 and tg64 rows. bench_model_cpu: its prefill and decode lines.
# Its CPU weight repacking (--repack 1, the default) aborts on this model on some CPUs (on the Xeon 6
# VM with AMX, 4 December: GGML_ASSERT(*cur_backend_id != -1) in ggml-backend.cpp): then every
# round runs with --repack 0, and the script says so.
llama_args=()
if ! "$bench" -m "$work/$name-bf16.gguf" -p 16 -n 4 -t "$threads" -r 1 >/dev/null 2>&1; then
    echo "llama-bench aborts with its default weight repacking here: running it with --repack 0"
    llama_args=(--repack 0)
fi
llama_round() {  # file → "prefill decode"
    "$bench" -m "$1" -p 512 -n 64 -t "$threads" -r 1 "${llama_args[@]}" -o csv 2>/dev/null | python3 -c '
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
    echo "round $r: tandem (as stored): prefill $pp tok/s, decode $tg tok/s"
done
echo "load after: $(uptime)"
python3 - "${best[f32_pp]}" "${best[f32_tg]}" "${best[bf16_pp]}" "${best[bf16_tg]}" "${best[tandem_pp]}" "${best[tandem_tg]}" "$rounds" "$threads" <<'EOF'
import sys
f32_pp, f32_tg, bf16_pp, bf16_tg, t_pp, t_tg = map(float, sys.argv[1:7])
print(f"best of {sys.argv[7]} interleaved rounds, {sys.argv[8]} threads, prompt 512, 64 generated:")
print(f"{'':<24}{'prefill tok/s':>14}{'decode tok/s':>14}{'tandem ÷ (prefill)':>20}{'tandem ÷ (decode)':>19}")
print(f"{'tandem (FP8 + FP4)':<24}{t_pp:>14.1f}{t_tg:>14.1f}")
for name, pp, tg in (("llama.cpp F32 + MXFP4", f32_pp, f32_tg), ("llama.cpp BF16 + MXFP4", bf16_pp, bf16_tg)):
    print(f"{name:<24}{pp:>14.1f}{tg:>14.1f}{t_pp / pp:>20.2f}{t_tg / tg:>19.2f}")
EOF
