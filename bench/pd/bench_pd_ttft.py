#!/usr/bin/env python3
"""Time to first token, pd against single, measured in the same run on the same model.

Starts `--topology single` and `--topology pd` (inproc, and tcp over loopback with --tcp) on one
model, sends one greedy request per prompt length to each (after a warm-up), and prints the TTFT
of each and the pd/single ratio: what disaggregation costs a lone request (job, state transfer,
verification) on this machine. The first token's state is the whole prompt's, so the transfer
grows with the prompt length.

    .venv/bin/python bench/pd/bench_pd_ttft.py [--model models/small] [--lengths 1024,4096,16384]
"""
import argparse
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))
from bench_serving import start_server  # noqa: E402


def ttft(url, length, key):
    ids = [0] + [(key * 131 + k * 7) % 20000 + 100 for k in range(length - 1)]
    body = {"input_ids": ids, "stream": True,
            "sampling_params": {"temperature": 0, "max_tokens": 2, "ignore_eos": True}}
    t0 = time.perf_counter()
    with requests.post(url + "/generate", json=body, stream=True, timeout=3600) as r:
        r.raise_for_status()
        seen = []
        for line in r.iter_lines():
            if line.startswith(b"data: ") and b"output_ids" in line:
                return time.perf_counter() - t0
            seen.append(line)
    sys.exit(f"no token from {url}: {b' '.join(seen)[:500]!r}")


def transfer_bytes(url):
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("tandem_pd_transfer_bytes_total "):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[2] / "build" / "tandem"))
    ap.add_argument("--model", default="models/small")
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--tcp", action="store_true", help="also pd over loopback tcp")
    ap.add_argument("--repeat", type=int, default=1, help="best of N per length and setup")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    common = ["--set", "cache.memory_bytes=1073741824", "--set", "scheduler.max_prefill_tokens=2048"]
    setups = [("single", ["--topology", "single"]), ("pd inproc", ["--topology", "pd"])]
    if args.tcp:
        setups.append(("pd tcp", ["--topology", "pd", "--set", "transport.kind=tcp",
                                  "--set", "transport.listen_port=0"]))
    # All servers up at once, lengths interleaved across them: drift in the machine's load (the
    # 2-core VM is shared) hits every setup alike.
    servers = [(name, *start_server(args.binary, args.model, common + extra)) for name, extra in setups]
    results = {}
    try:
        for _, _, url in servers:
            ttft(url, 64, 999)  # warm-up: pages, threads, first-touch
        for n in lengths:
            for name, _, url in servers:
                before = transfer_bytes(url)
                best = min(ttft(url, n, n + 7919 * k) for k in range(args.repeat))
                results[(name, n)] = (best, (transfer_bytes(url) - before) // args.repeat)
                print(f"{name:10s} prompt {n:6d}: TTFT {results[(name, n)][0] * 1000:9.1f} ms",
                      flush=True)
    finally:
        for _, proc, _ in servers:
            proc.terminate()
            proc.wait(60)
    print(f"\n{'prompt':>7s} {'single ms':>10s}", end="")
    for name, _ in setups[1:]:
        print(f" {name + ' ms':>12s} {'ratio':>6s} {'MiB moved':>9s}", end="")
    print()
    for n in lengths:
        base = results[("single", n)][0]
        print(f"{n:7d} {base * 1000:10.1f}", end="")
        for name, _ in setups[1:]:
            t, moved = results[(name, n)]
            print(f" {t * 1000:12.1f} {t / base:6.3f} {moved / 2**20:9.2f}", end="")
        print()


if __name__ == "__main__":
    main()
