#!/usr/bin/env python3
"""HF transformers beside tandem on the same checkpoint: prefill and batch-1 decode tok/s (dev only).

Issue #12 item 6 asks for tandem measured beside HF transformers' DeepseekV4ForCausalLM (the
golden reference) on the same checkpoint. Needs the golden path's own venv (torch + transformers,
tools/model/requirements.txt; CI never builds it):

    python3 -m venv tools/model/.venv
    tools/model/.venv/bin/pip install -r tools/model/requirements.txt
    tools/model/.venv/bin/python tools/bench/hf_side_by_side.py --model models/small

Per round (rounds interleave the three sides, best of each kept, since the dev machines are shared):
HF in the checkpoint's own dtype (bf16 for `small`) and in fp32 — a prefill of --prompt tokens (one
forward, no cache) and --decode tokens decoded one by one after a --context-token prompt with
HF's DynamicCache — then `bench_model_cpu` on the same directory with the same prompt, context
and decode lengths, batch 1. Both sides run --threads threads. Prints tok/s per side and tandem ÷
HF. HF's time includes its Python dispatch per op: that is what a user of transformers pays.
"""
import argparse
import re
import subprocess
import sys
import time

import torch
from transformers import DeepseekV4ForCausalLM, DynamicCache


def hf_figures(model, vocab, prompt, context, decode):
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(2, vocab, (1, max(prompt, context + decode)), generator=gen)
    with torch.no_grad():
        t0 = time.perf_counter()
        model(tokens[:, :prompt], use_cache=False)
        prefill = prompt / (time.perf_counter() - t0)
        cache = DynamicCache(config=model.config)
        model(tokens[:, :context], cache=cache, use_cache=True)
        t0 = time.perf_counter()
        for i in range(decode):
            model(tokens[:, context + i:context + i + 1], cache=cache, use_cache=True)
        decode_tps = decode / (time.perf_counter() - t0)
    return prefill, decode_tps


def tandem_figures(bench, model_dir, threads, prompt, context, decode):
    out = subprocess.run([bench, "--model", model_dir, "--threads", str(threads), "--prompt", str(prompt),
                          "--context", str(context), "--decode", str(decode), "--batch", "1", "--rounds", "1"],
                         check=True, capture_output=True, text=True).stdout
    prefill = float(re.search(r"^prefill: \d+ tokens: ([\d.]+) tok/s", out, re.M).group(1))
    decode_tps = float(re.search(r"^decode batch 1 \(context \d+\): ([\d.]+) tok/s", out, re.M).group(1))
    return prefill, decode_tps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/small")
    ap.add_argument("--bench", default="build/bench/model/bench_model_cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        m = DeepseekV4ForCausalLM.from_pretrained(args.model, dtype=dtype)
        models[name] = m.eval()
    vocab = models["fp32"].config.vocab_size
    for m in models.values():  # untimed warm-up: first-call allocations and lazy inits
        hf_figures(m, vocab, 8, 8, 2)
    best = {}
    for r in range(args.rounds):
        rows = {f"HF transformers {k}": hf_figures(m, vocab, args.prompt, args.context, args.decode)
                for k, m in models.items()}
        rows["tandem (as stored)"] = tandem_figures(args.bench, args.model, args.threads, args.prompt, args.context,
                                                    args.decode)
        for k, (p, d) in rows.items():
            bp, bd = best.get(k, (0.0, 0.0))
            best[k] = (max(bp, p), max(bd, d))
        print(f"round {r + 1}: " + "; ".join(f"{k} {p:.1f} / {d:.1f}" for k, (p, d) in rows.items()), flush=True)
    tp, td = best["tandem (as stored)"]
    print(f"\n{args.model}, {args.threads} threads, torch {torch.__version__}, best of {args.rounds} rounds: "
          f"prefill {args.prompt} tokens, decode {args.decode} tokens at context {args.context}")
    print(f"{'':28s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'tandem ÷ prefill':>17s} {'tandem ÷ decode':>16s}")
    for k, (p, d) in best.items():
        ratio = "" if k.startswith("tandem") else f"{tp / p:17.2f} {td / d:16.2f}"
        print(f"{k:28s} {p:14.1f} {d:13.1f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
