#!/usr/bin/env python3
"""End-to-end serving benchmark: starts the real binary on a model, drives /generate with greedy
requests at several concurrency levels, and prints tokens/s and latency percentiles.

The baseline is measured in the same run: throughput at concurrency 1 (one sequence per step).
Each level prints its throughput as a ratio to that baseline, i.e. what continuous batching buys
on this machine and model.

    .venv/bin/python bench/serving/bench_serving.py [--model models/tiny] [--levels 1,16,64]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]


def start_server(binary, model, extra):
    proc = subprocess.Popen([binary, "--port", "0", "--model", model, *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in proc.stdout:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "serving" in line and port:
            break
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("server did not become healthy")


def one_request(url, prompt_len, gen_len, i):
    ids = [0] + [(i * 131 + k * 7) % 20000 + 100 for k in range(prompt_len - 1)]
    body = {"input_ids": ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_tokens": gen_len, "ignore_eos": True}}
    t0 = time.perf_counter()
    first = None
    stamps = []
    with requests.post(url + "/generate", json=body, stream=True, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            now = time.perf_counter()
            for _ in ev.get("output_ids", []):
                stamps.append(now)
            if first is None and ev.get("output_ids"):
                first = now - t0
    end = time.perf_counter() - t0
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"tokens": len(stamps), "ttft": first or end, "e2e": end, "itl": itl}


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_level(url, concurrency, requests_per_level, prompt_len, gen_len):
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: one_request(url, prompt_len, gen_len, i),
                                range(requests_per_level)))
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    itl = [x for r in results for x in r["itl"]]
    return {"concurrency": concurrency, "tokens_per_s": tokens / wall,
            "ttft_p50_ms": 1000 * pct([r["ttft"] for r in results], 0.5),
            "ttft_p99_ms": 1000 * pct([r["ttft"] for r in results], 0.99),
            "itl_p50_ms": 1000 * pct(itl, 0.5), "itl_p99_ms": 1000 * pct(itl, 0.99),
            "e2e_p50_ms": 1000 * pct([r["e2e"] for r in results], 0.5),
            "e2e_p99_ms": 1000 * pct([r["e2e"] for r in results], 0.99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--model", default="models/tiny")
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--requests", type=int, default=0, help="per level (default 2 x concurrency, min 8)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for the server")
    args = ap.parse_args()
    extra = [x for s in args.set for x in ("--set", s)]
    proc, url = start_server(args.binary, args.model, extra)
    try:
        rows = []
        for c in [int(x) for x in args.levels.split(",")]:
            n = args.requests or max(8, 2 * c)
            rows.append(run_level(url, c, n, args.prompt_len, args.gen_len))
        base = rows[0]["tokens_per_s"]
        print(f"model {args.model}: prompt {args.prompt_len} tokens, {args.gen_len} generated, greedy")
        print(f"{'conc':>5} {'tok/s':>9} {'x c=1':>6} {'ttft p50':>9} {'p99':>8} "
              f"{'itl p50':>8} {'p99':>8} {'e2e p50':>9} {'p99':>9}  (ms)")
        for r in rows:
            print(f"{r['concurrency']:>5} {r['tokens_per_s']:>9.1f} {r['tokens_per_s'] / base:>6.2f} "
                  f"{r['ttft_p50_ms']:>9.1f} {r['ttft_p99_ms']:>8.1f} {r['itl_p50_ms']:>8.1f} "
                  f"{r['itl_p99_ms']:>8.1f} {r['e2e_p50_ms']:>9.1f} {r['e2e_p99_ms']:>9.1f}")
        m = requests.get(url + "/metrics").text
        vals = dict(re.findall(r"^(tandem_(?:step_seconds|batch_size)_(?:sum|count)) (\S+)$", m, re.M))
        steps = float(vals.get("tandem_step_seconds_count", 0)) or 1
        print(f"server: {steps:.0f} steps, mean step {1000 * float(vals.get('tandem_step_seconds_sum', 0)) / steps:.2f} ms, "
              f"mean batch {float(vals.get('tandem_batch_size_sum', 0)) / steps:.1f} sequences")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
