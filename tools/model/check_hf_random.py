#!/usr/bin/env python3
"""Compare tandem's forward pass with HF transformers on random checkpoints written by
transformers itself (save_pretrained), over several shapes and layer patterns.

Dev-only check of generality (the stored goldens cover make-model's tiny preset; this covers
configs tandem never generated: hc_mult 2, few Sinkhorn iterations, tiny rope dims, HCA first,
no MTP, default or yarn compress rope, both MoE kinds, transformers' own tensor naming).

    tools/model/.venv/bin/python tools/model/check_hf_random.py --tool build/bench/model/model_logits

Every parameter is randomized (transformers' init zeroes sinks, position biases and HC bases,
which would hide bugs). Pass: max |diff| <= 1e-4 * max|logit| and equal argmax at every position.
The reference is HF's token-by-token decode (--reference decode, default) or its full-sequence
prefill (--reference prefill); they differ only when exactly tied lightning-indexer scores straddle
the top-k boundary, where tandem follows decode (the choice that does not depend on chunking).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM, DynamicCache

CASES = [
    dict(name="hf-tester", hidden_size=64, num_attention_heads=4, head_dim=32, qk_rope_head_dim=8, q_lora_rank=32,
         o_groups=2, o_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
         layer_types=["heavily_compressed_attention", "compressed_sparse_attention"], mlp_layer_types=["moe", "moe"],
         sliding_window=8, hc_mult=2, hc_sinkhorn_iters=3, index_n_heads=8, index_head_dim=16, index_topk=2,
         compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}),
    dict(name="mixed-yarn", hidden_size=48, num_attention_heads=2, head_dim=64, qk_rope_head_dim=16, q_lora_rank=24,
         o_groups=4, o_lora_rank=8, n_routed_experts=6, num_experts_per_tok=3, moe_intermediate_size=24,
         layer_types=["sliding_attention", "compressed_sparse_attention", "sliding_attention",
                      "heavily_compressed_attention", "compressed_sparse_attention"],
         mlp_layer_types=["hash_moe", "hash_moe", "hash_moe", "moe", "moe"], sliding_window=6, hc_mult=3,
         hc_sinkhorn_iters=7, index_n_heads=12, index_head_dim=32, index_topk=3,
         compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 12},
         rope_parameters={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                          "beta_fast": 32, "beta_slow": 1}),
    dict(name="o-groups-gt-heads", hidden_size=32, num_attention_heads=2, head_dim=32, qk_rope_head_dim=8,
         q_lora_rank=16, o_groups=4, o_lora_rank=8, n_routed_experts=4, num_experts_per_tok=1,
         moe_intermediate_size=16, layer_types=["compressed_sparse_attention"] * 2, mlp_layer_types=["moe", "hash_moe"],
         sliding_window=5, hc_mult=4, hc_sinkhorn_iters=20, index_n_heads=16, index_head_dim=16, index_topk=5,
         compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4}),
]


def build(case, seed, vocab):
    kw = {k: v for k, v in case.items() if k != "name"}
    cfg = DeepseekV4Config(vocab_size=vocab, num_hidden_layers=len(kw["layer_types"]), num_nextn_predict_layers=0, **kw)
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "_layernorm.weight")):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(("scale", "hc_scale")):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.dim() >= 2:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
            else:
                p.copy_(0.5 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
                b.copy_(torch.stack([torch.randperm(E)[:k] for _ in range(b.shape[0])]))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return model


def save_golden(out_dir, length):
    """test/golden/model/hf_tester: a save_pretrained checkpoint (transformers' own naming,
    hc_mult 2, HCA first, no MTP) with its full-sequence logits, for the CI unit test."""
    model = build(CASES[0], 0, 512)
    tokens = np.random.default_rng(0).integers(0, 512, size=length)
    with torch.no_grad():
        ref = model(torch.from_numpy(tokens).unsqueeze(0), use_cache=False).logits[0].numpy()
    model.save_pretrained(out_dir)
    tokens.astype(np.int32).tofile(os.path.join(out_dir, "tokens.i32"))
    ref.astype(np.float32).tofile(os.path.join(out_dir, "logits.f32"))
    print(f"wrote {out_dir}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default="build/bench/model/model_logits")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--len", type=int, default=120)
    ap.add_argument("--chunk", type=int, default=0, help="also feed tandem in chunks of N (0: one call)")
    ap.add_argument("--reference", choices=["decode", "prefill"], default="decode")
    ap.add_argument("--index-heads", type=int, default=0, help="override index_n_heads (2 makes ties common)")
    ap.add_argument("--save-golden", default="",
                    help="write the first case (seed 0) as a stored golden: checkpoint + tokens + logits")
    args = ap.parse_args()
    if args.save_golden:
        save_golden(args.save_golden, args.len)
        return 0
    vocab = 512
    failures = 0
    for case in CASES:
        if args.index_heads:
            case = dict(case, index_n_heads=args.index_heads)
        for seed in range(args.seeds):
            model = build(case, seed, vocab)
            tokens = np.random.default_rng(seed).integers(0, vocab, size=args.len)
            with torch.no_grad():
                if args.reference == "prefill":
                    ref = model(torch.from_numpy(tokens).unsqueeze(0), use_cache=False).logits[0].numpy()
                else:
                    cache = DynamicCache(config=model.config)
                    ref = np.stack([model(torch.tensor([[int(t)]]), cache=cache, use_cache=True).logits[0, -1].numpy()
                                    for t in tokens])
            with tempfile.TemporaryDirectory() as tmp:
                model.save_pretrained(tmp)
                out = os.path.join(tmp, "logits.f32")
                cmd = [args.tool, "--model", tmp, "--tokens", ",".join(map(str, tokens)), "--out", out]
                if args.chunk:
                    cmd += ["--chunk", str(args.chunk)]
                subprocess.run(cmd, check=True)
                got = np.fromfile(out, dtype=np.float32).reshape(ref.shape)
            scale = np.abs(ref).max(-1)
            ratio = float((np.abs(got - ref).max(-1) / scale).max())
            flips = int((got.argmax(-1) != ref.argmax(-1)).sum())
            ok = ratio <= 1e-4 and flips == 0
            failures += not ok
            print(f"{case['name']:>18} seed {seed}: worst |diff|/max|logit| {ratio:.2e}, argmax flips {flips}"
                  f" {'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
