#!/usr/bin/env python3
"""Agent sessions with the prefix cache on and off, measured in the same run on the same model.

Starts two servers (cache.prefix_cache = false / true) and replays the same seeded workload on
each, turn by turn, interleaved so the shared machine's load drift hits both alike: `--sessions`
sessions share a `--history`-token system prompt; every turn's prompt is the previous prompt +
the previous output + a new `--message`-token user message, and each turn generates `--gen`
tokens (greedy). Prints the TTFT of turn 1 and of turns 2+ on each server, the ratio
cache ÷ no cache for turns 2+ (issue #11's goal: <= 0.15 on `small` with 4k histories), the
cache's hit ratio from /metrics, and checks that both servers produced the same tokens.

With `--host-tier` a third server runs the cache with the host tier and the test-only switch
cache.test_host_evict_on_release: every request end evicts the pool's cached pages to host
memory, so every hit of turns 2+ loads its pages back layer by layer (the host tier's worst
case); it prints that server's turns-2+ ratio, the pages it loaded and its mean load latency.

    .venv/bin/python bench/cache/bench_prefix_cache.py [--model models/small] [--sessions 8]
        [--turns 6] [--history 4096] [--message 64] [--gen 32] [--host-tier]
"""
import argparse
import json
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))
from bench_serving import start_server  # noqa: E402


def turn(url, ids, gen):
    """(TTFT seconds, output ids) of one streamed greedy /generate."""
    body = {"input_ids": ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_tokens": gen, "ignore_eos": True}}
    t0 = time.perf_counter()
    first = None
    out = []
    with requests.post(url + "/generate", json=body, stream=True, timeout=7200) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("output_ids"):
                if first is None:
                    first = time.perf_counter() - t0
                out.extend(ev["output_ids"])
    return first, out


def metric(url, name):
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[2] / "build" / "tandem"))
    ap.add_argument("--model", default="models/small")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--history", type=int, default=4096)
    ap.add_argument("--message", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--host-tier", action="store_true")
    args = ap.parse_args()
    common = ["--set", "cache.memory_bytes=2147483648", "--set", "scheduler.max_prefill_tokens=2048",
              "--set", "scheduler.max_running_requests=16"]
    setups = [("no cache", common + ["--set", "cache.prefix_cache=false"]),
              ("cache", common + ["--set", "cache.prefix_cache=true"])]
    if args.host_tier:
        setups.append(("host", common + ["--set", "cache.prefix_cache=true",
                                         "--set", "cache.host_memory_bytes=4294967296",
                                         "--set", "cache.test_host_evict_on_release=true"]))
    servers = [(name, *start_server(args.binary, args.model, extra)) for name, extra in setups]
    rng = random.Random(args.seed)
    system = [0] + [rng.randrange(100, 20000) for _ in range(args.history - 1)]
    msgs = [[[rng.randrange(100, 20000) for _ in range(args.message)] for _ in range(args.turns)]
            for _ in range(args.sessions)]
    ttfts = {name: {t: [] for t in range(args.turns)} for name, _, _ in servers}
    outputs = {name: [] for name, _, _ in servers}
    try:
        for name, _, url in servers:
            turn(url, [0] + list(range(100, 163)), 2)  # warm-up
        histories = {name: [list(system) for _ in range(args.sessions)] for name, _, _ in servers}
        for t in range(args.turns):
            for name, _, url in servers:  # turn t on one server, then on the other
                hist = histories[name]
                for s in range(args.sessions):
                    hist[s] = hist[s] + msgs[s][t]
                with ThreadPoolExecutor(args.sessions) as ex:
                    res = list(ex.map(lambda s: turn(url, hist[s], args.gen), range(args.sessions)))
                for s, (ttft, out) in enumerate(res):
                    ttfts[name][t].append(ttft)
                    outputs[name].append(out)
                    hist[s] = hist[s] + out
                print(f"turn {t + 1} {name:8s}: TTFT median {statistics.median(ttfts[name][t]):8.2f} s "
                      f"(prompt ~{len(hist[0]) - args.gen} tokens)", flush=True)
        hit_ratio = metric(servers[1][2], "tandem_prefix_cache_hit_ratio")
        if args.host_tier:
            url = servers[2][2]
            loaded = metric(url, "tandem_prefix_cache_host_loaded_pages_total")
            loads = metric(url, "tandem_prefix_cache_host_load_seconds_count")
            load_s = metric(url, "tandem_prefix_cache_host_load_seconds_sum")
    finally:
        for _, proc, _ in servers:
            proc.terminate()
            proc.wait(60)
    same = all(outputs[name] == outputs["no cache"] for name in outputs)
    later = {name: [x for t in range(1, args.turns) for x in ttfts[name][t]] for name in ttfts}
    base, cached = statistics.mean(later["no cache"]), statistics.mean(later["cache"])
    print(f"\nsessions {args.sessions}, turns {args.turns}, history {args.history}, "
          f"message {args.message}, gen {args.gen}")
    print(f"turn 1 TTFT mean: no cache {statistics.mean(ttfts['no cache'][0]):.2f} s, "
          f"cache {statistics.mean(ttfts['cache'][0]):.2f} s")
    print(f"turns 2+ TTFT mean: no cache {base:.2f} s, cache {cached:.2f} s, "
          f"ratio cache / no cache = {cached / base:.3f}")
    print(f"hit ratio (hit tokens / lookup tokens): {hit_ratio:.3f}")
    if args.host_tier:
        host = statistics.mean(later["host"])
        print(f"turns 2+ TTFT mean with every hit loaded from the host tier: {host:.2f} s, "
              f"ratio host / no cache = {host / base:.3f}; {loaded:.0f} pages loaded in "
              f"{loads:.0f} loads, mean load {1000 * load_s / max(loads, 1):.1f} ms")
    print(f"tokens identical with and without the cache{' and host tier' if args.host_tier else ''}: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
