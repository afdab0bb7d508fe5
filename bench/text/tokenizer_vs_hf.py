#!/usr/bin/env python3
"""Tokenizer throughput: tandem vs HF `tokenizers` on the same texts, in the same run.

Writes 1 MiB texts (mixed multilingual/code corpus, English prose-like text, CJK, code,
whitespace runs, digits), times HF `Tokenizer.encode` (single call, one thread: HF only
parallelizes batches) and the C++ bench binary on the same files, checks that the ids are
identical (count and hash), and prints the speed ratio. Exit status 1 if any ids differ.

    .venv/bin/python bench/text/tokenizer_vs_hf.py build/bench/text/bench_text_tokenizer [tokenizer.json]
"""
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def chunks(data, n):
    """Consecutive pieces of at most n bytes, cut back to a UTF-8 boundary (as the C++ side)."""
    out, at = [], 0
    while at < len(data):
        end = min(len(data), at + n)
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1
        out.append(data[at:end].decode())
        at = end
    return out


def texts():
    rng = random.Random(5)
    words = ("the of and to in is was for on that with as by at from this have are be or an it not which but "
             "tokenizer server model request cache prefill decode attention").split()
    prose = " ".join(rng.choice(words) + ("." if rng.random() < 0.08 else "") for _ in range(MIB // 4))
    code = ("def f(x, y):\n    if x > 10:\n        return [i * 2 for i in range(y)]\n    return {'a': x, \"b\": y}\n\n"
            "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n")
    cjk = "深度求索公司创造了这个模型。它可以回答问题，写代码，并进行推理。日本語のテキストも少し。"
    mixed = prose[:2000] + code + cjk + " Ünïcödé 😀👍🏽 ١٢٣ 12345 \t\t  \n\n"
    out = {"prose": prose, "code": code, "cjk": cjk, "mixed": mixed, "whitespace": "  \t\n" * 7 + "x",
           "digits": "3141592653589793 2718281828 "}
    return {k: (v * (MIB // len(v.encode()) + 1))[:MIB] for k, v in out.items()}


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "build" / "bench" / "text" / "bench_text_tokenizer")
    tok_path = sys.argv[2] if len(sys.argv) > 2 else str(REPO / "models" / "tokenizer" / "tokenizer.json")
    import tokenizers
    hf = tokenizers.Tokenizer.from_file(tok_path)
    ok = True
    print(f"{'text':12} {'pieces':>7} {'tandem MB/s':>12} {'HF MB/s':>9} {'speedup':>8}  ids")
    for chunk in (0, 4096):
      with tempfile.TemporaryDirectory() as d:
        files, hf_res = [], {}
        for name, text in texts().items():
            path = os.path.join(d, name + ".txt")
            Path(path).write_text(text, encoding="utf-8")
            files.append(path)
            pieces = [text] if chunk == 0 else chunks(text.encode(), chunk)
            best = 1e30
            for _ in range(3):
                t0 = time.perf_counter()
                ids = [i for p in pieces for i in hf.encode(p).ids]
                best = min(best, time.perf_counter() - t0)
            hf_res[path] = (best, len(ids), fnv1a64(ids))
        out = subprocess.run([binary, tok_path, f"--chunk={chunk}"] + files, check=True, capture_output=True, text=True).stdout
        for line in out.strip().splitlines():
            path, size, secs, count, digest = line.split("\t")
            hf_secs, hf_count, hf_digest = hf_res[path]
            same = int(count) == hf_count and digest == hf_digest
            ok &= same
            mb = int(size) / 1e6
            label = "1 MiB" if chunk == 0 else f"{chunk} B"
            print(f"{Path(path).stem:12} {label:>7} {mb / float(secs):12.1f} {mb / hf_secs:9.1f} "
                  f"{hf_secs / float(secs):7.2f}x  {'identical' if same else 'DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
