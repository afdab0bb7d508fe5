#!/usr/bin/env python3
"""End-to-end serving benchmark: starts the real binary on a model, drives /generate with greedy
requests at several concurrency levels, and prints tokens/s and latency percentiles.

The baseline is measured in the same run: throughput at concurrency 1 (one sequence per step).
Each level prints its throughput as a ratio to that baseline, i.e. what continuous batching buys
on this machine and model, and the server's own view of that level (steps, mean step time, mean
sequences per step: the /metrics histograms differenced around the level, so one level's steps
never dilute another's). Every request of the run has its own prompt, so the prefix cache never
turns a later level's prefill into a cache hit.

--vs-model R adds the server-versus-kernels comparison (issue item 7): R interleaved rounds of
(server at concurrency 1: prefill tok/s = prompt / time to first token of a 1-token request;
decode tok/s = generated tokens after the first ÷ the time between first and last token) and
(bench_model_cpu on the same checkpoint, same threads: prefill of the same prompt length, batch-1
decode at the same context), best of each kept, then server ÷ model for both.

    .venv/bin/python bench/serving/bench_serving.py [--model models/tiny] [--levels 1,16,64]
                                                    [--vs-model 3]
"""
import argparse
import json
import os
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
    # Distinct for every i (a level's requests and the vs-model rounds use disjoint ranges).
    ids = [0] + [(i * 131 + k * 7 + (i * k) % 997) % 20000 + 100 for k in range(prompt_len - 1)]
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
    decode_s = stamps[-1] - stamps[0] if len(stamps) > 1 else float("nan")
    return {"tokens": len(stamps), "ttft": first or end, "e2e": end, "itl": itl, "decode_s": decode_s}


def scrape(url):
    m = requests.get(url + "/metrics").text
    vals = dict(re.findall(r"^(tandem_(?:step_seconds|batch_size)_(?:sum|count)) (\S+)$", m, re.M))
    return {k: float(v) for k, v in vals.items()}


def server_view(before, after):
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    steps = d.get("tandem_step_seconds_count", 0.0)
    return {"steps": steps,
            "step_ms": 1000 * d.get("tandem_step_seconds_sum", 0.0) / steps if steps else float("nan"),
            "batch": d.get("tandem_batch_size_sum", 0.0) / steps if steps else float("nan")}


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_level(url, concurrency, requests_per_level, prompt_len, gen_len, first_id):
    before = scrape(url)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: one_request(url, prompt_len, gen_len, i),
                                range(first_id, first_id + requests_per_level)))
    wall = time.perf_counter() - t0
    view = server_view(before, scrape(url))
    tokens = sum(r["tokens"] for r in results)
    itl = [x for r in results for x in r["itl"]]
    return {"concurrency": concurrency, "tokens_per_s": tokens / wall,
            "ttft_p50_ms": 1000 * pct([r["ttft"] for r in results], 0.5),
            "ttft_p99_ms": 1000 * pct([r["ttft"] for r in results], 0.99),
            "itl_p50_ms": 1000 * pct(itl, 0.5), "itl_p99_ms": 1000 * pct(itl, 0.99),
            "e2e_p50_ms": 1000 * pct([r["e2e"] for r in results], 0.5),
            "e2e_p99_ms": 1000 * pct([r["e2e"] for r in results], 0.99), **view}


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model_bench(binary, model, prompt_len, gen_len, threads):
    """bench_model_cpu's prefill and batch-1 decode tok/s (one round) on the same checkpoint."""
    cmd = [binary, "--model", model, "--prompt", str(prompt_len), "--decode", str(gen_len - 1),
           "--context", str(prompt_len), "--batch", "1", "--rounds", "1"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    pre = re.search(r"^prefill: \d+ tokens: ([\d.]+) tok/s.*cores used ([\d.]+)", out, re.M)
    dec = re.search(r"^decode batch 1 \(context \d+\): ([\d.]+) tok/s.*cores used ([\d.]+)", out, re.M)
    if not pre or not dec:
        sys.exit("could not parse bench_model_cpu output:\n" + out)
    return (float(pre.group(1)), float(pre.group(2))), (float(dec.group(1)), float(dec.group(2)))


def keep(best, key, tps, cores):
    """Keeps the faster (tok/s, cores used) of a figure."""
    if tps > best.get(key, (0.0, 0.0))[0]:
        best[key] = (tps, cores)


def vs_model(url, pid, args, first_id):
    """Best of args.vs_model interleaved rounds: server c1 and bench_model_cpu. Each figure
    keeps the cores it used (CPU seconds ÷ wall seconds; the server's from /proc): on a shared
    machine tokens per CPU-second compare the two sides even when one got fewer cores."""
    best = {}
    for rnd in range(args.vs_model):
        c0 = cpu_seconds(pid)
        p = one_request(url, args.vs_prompt, 1, first_id + 2 * rnd)
        keep(best, "server_prefill", args.vs_prompt / p["ttft"], (cpu_seconds(pid) - c0) / p["e2e"])
        c0 = cpu_seconds(pid)
        d = one_request(url, args.vs_prompt, args.vs_gen, first_id + 2 * rnd + 1)
        # Decode cores: the whole request's CPU over its whole time (the prompt's share included).
        keep(best, "server_decode", (d["tokens"] - 1) / d["decode_s"], (cpu_seconds(pid) - c0) / d["e2e"])
        mp, md = model_bench(args.model_bench, args.model, args.vs_prompt, args.vs_gen, args.threads)
        keep(best, "model_prefill", *mp)
        keep(best, "model_decode", *md)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--model", default="models/tiny")
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--requests", type=int, default=0, help="per level (default 2 x concurrency, min 8)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for the server")
    ap.add_argument("--threads", type=int, default=0, help="backend.threads for both sides (0: all cores)")
    ap.add_argument("--vs-model", type=int, default=0, metavar="ROUNDS",
                    help="also compare server c1 with bench_model_cpu, best of ROUNDS interleaved rounds")
    ap.add_argument("--vs-prompt", type=int, default=512, help="prompt tokens of the vs-model rounds")
    ap.add_argument("--vs-gen", type=int, default=33, help="generated tokens of the vs-model rounds")
    ap.add_argument("--model-bench", default=str(ROOT / "build" / "bench" / "model" / "bench_model_cpu"))
    args = ap.parse_args()
    extra = [x for s in args.set for x in ("--set", s)]
    if args.threads:
        extra += ["--set", f"backend.threads={args.threads}"]
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    proc, url = start_server(args.binary, args.model, extra)
    try:
        rows = []
        first_id = 0
        for c in [int(x) for x in args.levels.split(",")]:
            n = args.requests or max(8, 2 * c)
            rows.append(run_level(url, c, n, args.prompt_len, args.gen_len, first_id))
            first_id += n
        vs = vs_model(url, proc.pid, args, first_id) if args.vs_model else None
        base = rows[0]["tokens_per_s"]
        print(f"model {args.model}: prompt {args.prompt_len} tokens, {args.gen_len} generated, greedy")
        print(f"{'conc':>5} {'tok/s':>9} {'x c=1':>6} {'ttft p50':>9} {'p99':>8} "
              f"{'itl p50':>8} {'p99':>8} {'e2e p50':>9} {'p99':>9}  (ms) | {'steps':>6} {'step ms':>8} {'seqs/step':>9}")
        for r in rows:
            print(f"{r['concurrency']:>5} {r['tokens_per_s']:>9.1f} {r['tokens_per_s'] / base:>6.2f} "
                  f"{r['ttft_p50_ms']:>9.1f} {r['ttft_p99_ms']:>8.1f} {r['itl_p50_ms']:>8.1f} "
                  f"{r['itl_p99_ms']:>8.1f} {r['e2e_p50_ms']:>9.1f} {r['e2e_p99_ms']:>9.1f}       | "
                  f"{r['steps']:>6.0f} {r['step_ms']:>8.1f} {r['batch']:>9.2f}")
        if vs:
            print(f"server c1 vs bench_model_cpu (best of {args.vs_model} interleaved rounds, "
                  f"prompt {args.vs_prompt}, decode at context {args.vs_prompt}):")
            for kind in ("prefill", "decode"):
                (s, sc), (m, mc) = vs["server_" + kind], vs["model_" + kind]
                print(f"  {kind:<8} server {s:8.2f} tok/s (cores used {sc:.2f}), model {m:8.2f} tok/s "
                      f"(cores used {mc:.2f}): server / model = {s / m:.3f}; per CPU-second "
                      f"{(s / sc) / (m / mc):.3f}")
        print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
