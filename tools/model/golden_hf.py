#!/usr/bin/env python3
"""Golden logits from HF transformers' DeepseekV4ForCausalLM for tandem's generated checkpoints.

Dev-only (CI never runs it). Needs its own venv with the pinned packages of
tools/model/requirements.txt:

    python3 -m venv tools/model/.venv
    tools/model/.venv/bin/pip install -r tools/model/requirements.txt
    tools/model/.venv/bin/python tools/model/golden_hf.py --tandem build/tandem --seed 1

It runs `tandem make-model --preset tiny --seed S` into a temp dir (the unit test regenerates the
same checkpoint bit for bit, so no weights are stored), loads it with from_pretrained in fp32,
checks that every tensor landed where tandem's upstream naming says it belongs, runs fixed
token-id prompts (several many times longer than the sliding window and the compress rates, so
top-k sparse selection matters) through one full-sequence forward each, and writes

    test/golden/model/<preset>_seed<S>.json   prompts, sampled vocab ids, layout of the .bin
    test/golden/model/<preset>_seed<S>.bin    little-endian float32 / int32 arrays

Per prompt and position it stores the argmax, max|logit|, the gap between the two largest logits
and the logits of `--vocab-sample` fixed vocab ids; for the last position of the long prompts it also
stores the full logits row.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import DeepseekV4ForCausalLM, DynamicCache


def hf_name(up: str) -> str | None:
    """tandem's upstream tensor name -> the transformers module path (None: fused experts / MTP)."""
    if up.startswith("mtp."):
        return None
    top = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
           "norm.weight": "model.norm.weight", "hc_head_fn": "model.hc_head.hc_fn",
           "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale"}
    if up in top:
        return top[up]
    m = re.match(r"layers\.(\d+)\.(.*)", up)
    i, rest = m.group(1), m.group(2)
    if re.match(r"ffn\.experts\.\d+\.", rest):
        return None
    subs = [
        (r"^hc_(attn|ffn)_(fn|base|scale)$", lambda g: f"{g[1]}_hc.{g[2]}"),
        (r"^attn_norm\.weight$", lambda g: "input_layernorm.weight"),
        (r"^ffn_norm\.weight$", lambda g: "post_attention_layernorm.weight"),
        (r"^attn\.attn_sink$", lambda g: "self_attn.sinks"),
        (r"^attn\.indexer\.compressor\.(wkv|wgate|ape|norm)(.*)$",
         lambda g: "self_attn.compressor.indexer." + {"wkv": "kv_proj", "wgate": "gate_proj",
                                                      "ape": "position_bias", "norm": "kv_norm"}[g[1]] + g[2]),
        (r"^attn\.indexer\.wq_b\.weight$", lambda g: "self_attn.compressor.indexer.q_b_proj.weight"),
        (r"^attn\.indexer\.weights_proj\.weight$",
         lambda g: "self_attn.compressor.indexer.scorer.weights_proj.weight"),
        (r"^attn\.compressor\.(wkv|wgate|ape|norm)(.*)$",
         lambda g: "self_attn.compressor." + {"wkv": "kv_proj", "wgate": "gate_proj",
                                              "ape": "position_bias", "norm": "kv_norm"}[g[1]] + g[2]),
        (r"^attn\.(wq_a|q_norm|wq_b|wkv|kv_norm|wo_a|wo_b)\.weight$",
         lambda g: "self_attn." + {"wq_a": "q_a_proj", "q_norm": "q_a_norm", "wq_b": "q_b_proj",
                                   "wkv": "kv_proj", "kv_norm": "kv_norm", "wo_a": "o_a_proj",
                                   "wo_b": "o_b_proj"}[g[1]] + ".weight"),
        (r"^ffn\.gate\.weight$", lambda g: "mlp.gate.weight"),
        (r"^ffn\.gate\.bias$", lambda g: "mlp.gate.e_score_correction_bias"),
        (r"^ffn\.gate\.tid2eid$", lambda g: "mlp.gate.tid2eid"),
        (r"^ffn\.shared_experts\.w([123])\.weight$",
         lambda g: "mlp.shared_experts." + {"1": "gate_proj", "2": "down_proj", "3": "up_proj"}[g[1]] + ".weight"),
    ]
    for pat, fn in subs:
        mm = re.match(pat, rest)
        if mm:
            return f"model.layers.{i}." + fn(mm)
    raise SystemExit(f"no HF mapping for {up}")


def check_weights(model, path):
    """Every tensor of the file must equal the parameter HF put it in (catches silent renames)."""
    sd = model.state_dict()
    tensors = load_file(os.path.join(path, "model.safetensors"))
    cfg = model.config
    inter = cfg.moe_intermediate_size
    for name, arr in tensors.items():
        target = hf_name(name)
        if target is None:
            m = re.match(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.w([123])\.weight", name)
            if not m:
                continue  # MTP: HF ignores it by design
            layer, e, which = m.group(1), int(m.group(2)), m.group(3)
            if which == "2":
                got = sd[f"model.layers.{layer}.mlp.experts.down_proj"][e]
            else:
                got = sd[f"model.layers.{layer}.mlp.experts.gate_up_proj"][e]
                got = got[:inter] if which == "1" else got[inter:]
        else:
            got = sd[target]
        if not np.array_equal(got.numpy().astype(arr.dtype), arr):
            raise SystemExit(f"HF loaded {name} differently from the file")


def check_decode_agrees(model, tokens, logits):
    """HF's token-by-token decode must give the prefill logits. They differ only when exactly
    tied lightning-indexer scores straddle the top-k boundary (HF's prefill also ranks not yet
    visible rows); tandem follows decode there, so such data would not be a fair golden."""
    cache = DynamicCache(config=model.config)
    worst = 0.0
    with torch.no_grad():
        for t, tok in enumerate(tokens):
            row = model(torch.tensor([[int(tok)]]), cache=cache, use_cache=True).logits[0, -1].float().numpy()
            worst = max(worst, float(np.abs(row - logits[t]).max() / np.abs(logits[t]).max()))
    if worst > 1e-5:
        raise SystemExit(f"HF decode and prefill disagree ({worst:.2e}) on a {len(tokens)}-token prompt: "
                         "exact indexer ties; pick another seed")


def prompts_for(vocab: int, seed: int):
    rng = np.random.default_rng(1000 + seed)
    lengths = [1, 9, 37, 150, 420]
    return [rng.integers(2, vocab, size=n).astype(np.int64) for n in lengths]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="test/golden/model")
    ap.add_argument("--vocab-sample", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.tandem, "make-model", "--preset", args.preset, "--seed", str(args.seed),
                        "--out", tmp], check=True)
        model, info = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"loading problems: {bad}")
        check_weights(model, tmp)
        model.eval()
        vocab = model.config.vocab_size
        rng = np.random.default_rng(7)
        vocab_ids = np.sort(rng.choice(vocab, size=args.vocab_sample, replace=False)).astype(np.int32)
        blobs, index = [], []
        offset = 0

        def put(arr):
            nonlocal offset
            b = arr.tobytes()
            blobs.append(b)
            entry = {"offset": offset, "count": int(arr.size)}
            offset += len(b)
            return entry

        vocab_entry = put(vocab_ids)
        for tokens in prompts_for(vocab, args.seed):
            with torch.no_grad():
                logits = model(torch.from_numpy(tokens).unsqueeze(0), use_cache=False).logits[0].float().numpy()
            check_decode_agrees(model, tokens, logits)
            top2 = np.sort(logits, axis=-1)[:, -2:]
            index.append({
                "tokens": tokens.tolist(),
                "argmax": put(logits.argmax(-1).astype(np.int32)),
                "max_abs": put(np.abs(logits).max(-1).astype(np.float32)),
                "top2_gap": put((top2[:, 1] - top2[:, 0]).astype(np.float32)),
                "sampled": put(logits[:, vocab_ids].astype(np.float32)),
            })
            if len(tokens) >= 100:  # full rows only where they matter most (keeps the data small)
                index[-1]["last_row"] = put(logits[-1].astype(np.float32))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{args.preset}_seed{args.seed}")
    with open(stem + ".bin", "wb") as f:
        for b in blobs:
            f.write(b)
    meta = {"preset": args.preset, "seed": args.seed, "vocab_size": vocab,
            "vocab_ids": vocab_entry, "prompts": index,
            "generator": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}"}
    with open(stem + ".json", "w") as f:
        json.dump(meta, f)
    print(f"wrote {stem}.json/.bin ({offset} bytes)")


if __name__ == "__main__":
    sys.exit(main())
