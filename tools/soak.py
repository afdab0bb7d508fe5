#!/usr/bin/env python3
"""Bounded soak run on loopback: a `single` server (the oracle) and a `pd` server over tcp with
injected faults, driven for --minutes by workers mixing greedy /generate (plain and streamed),
client aborts, disconnects and bursts past the queue limit. Reports, over time and at the end:

  wrong    pd answers that differ from single's greedy tokens (must be 0)
  lost     requests with neither an answer nor a clear error within --request-timeout (must be 0)
  errors   clear errors (5xx with an OpenAI error body, an SSE error event): faults, overflow
  leaked   pages not free / transfers quarantined once both servers are idle (must be 0)
  rss, fds the pd and single processes' resident memory and open descriptors, sampled
  growth   RSS and descriptor growth after --warmup-minutes: the least-squares slope over the
           later samples times their span (must stay under --max-rss-growth-mib, --max-fd-growth)

Both servers run with a small pool (--cache-memory-bytes) so that the prefix caches, which keep
every prompt's pages and snapshots until the pool needs them, reach their configured bound during
the warm-up: a pool page's memory is committed when first written and kept, so a 1 GiB default
pool filling over hours looks like a slow leak in RSS while it is a bounded cache filling. For
the same reason each server first runs its largest batches (prime): the step buffers, kept
between steps, grow to the largest batch seen.
    .venv/bin/python tools/soak.py --minutes 20            # the documented run
    .venv/bin/python tools/soak.py --minutes 2 --workers 6 # a short one

    .venv/bin/python tools/soak.py --minutes 4 --model DIR --set backend.cpu_matmul=amx
                                                           # another model, more keys for both servers

Exit status 1 when anything is wrong, lost or leaked. Needs build/tandem and models/tiny (or --model).
"""
import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
LISTEN_RE = re.compile(r"listening on http://([^:\s]+):(\d+)")


class Server:
    def __init__(self, binary, model, args, env=None):
        self.model = Path(model)
        self.proc = subprocess.Popen([binary, "--port", "0", "--model", str(self.model),
                                      *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})
        self.port = None
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.port and self._healthy():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit("server did not become healthy:\n" + "".join(self.log[-40:]))

    def _read(self):
        for line in self.proc.stdout:
            self.log.append(line)
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))

    def _healthy(self):
        try:
            return requests.get(self.url + "/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def metrics(self):
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {}
        for m in re.finditer(r"^(tandem_[a-z_]+)(\{[^}]*\})? (\S+)$", text, re.M):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def page_bytes(self):
        """(bytes of one history page, bytes of one boundary snapshot) from the startup log."""
        text = "".join(self.log)
        page = re.search(r"history per page \(all layers and kinds\): (\d+) B", text)
        snap = re.search(r"prefix-cache boundary snapshot: (\d+) B", text)
        return int(page.group(1)) if page else 0, int(snap.group(1)) if snap else 0

    def pool_sizes(self):
        """Mapping sizes of the KV pools (one per engine), from the startup log: each pool is one
        anonymous mmap of slots x fixed state + pages x page bytes."""
        text = "".join(self.log)
        page, _ = self.page_bytes()
        fixed = re.search(r"fixed state per sequence: (\d+) B", text)
        sizes = set()
        for m in re.finditer(r"budget \d+ B \([^)]*\): (\d+) sequence slots \+ (\d+) pages", text):
            b = int(m.group(1)) * int(fixed.group(1)) + int(m.group(2)) * page
            sizes.add((b + 4095) // 4096 * 4096)
        return sizes

    def weight_copy_sizes(self):
        """Mapping sizes of the checkpoint files' copies in memory (model.weight_pages = "huge",
        src/model/file_bytes.cpp): each file's size rounded up to whole 2 MiB pages. Kernels with
        CONFIG_ANON_VMA_NAME also name them "[anon:tandem weights <file>]"."""
        mib2 = 2 << 20
        return {(f.stat().st_size + mib2 - 1) // mib2 * mib2
                for f in self.model.glob("*.safetensors")}

    def memory_mib(self):
        """Resident memory by kind, from /proc/<pid>/smaps: weights (the checkpoint's files, mapped
        or copied into memory: bounded by their size), pools (the KV pools: bounded by
        cache.memory_bytes; a page's memory is committed when first written and kept) and other
        (heap, stacks, code: where a leak would show)."""
        pools, out, cur = self.pool_sizes(), {"weights": 0, "pools": 0, "other": 0}, None
        copies = self.weight_copy_sizes()
        for line in open(f"/proc/{self.proc.pid}/smaps"):
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$", line)
            if m:
                size = int(m.group(2), 16) - int(m.group(1), 16)
                name = m.group(3)
                cur = ("weights" if name.endswith(".safetensors") or name.startswith("[anon:tandem weights")
                       or (not name and size in copies) else
                       "pools" if not name and size in pools else "other")
            elif line.startswith("Rss:"):
                out[cur] += int(line.split()[1]) * 1024
        return {k: round(v / 2**20, 1) for k, v in out.items()}

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Tally:
    def __init__(self):
        self.mu = threading.Lock()
        self.counts = {}
        self.examples = []

    def add(self, key, example=None):
        with self.mu:
            self.counts[key] = self.counts.get(key, 0) + 1
            if example and len(self.examples) < 10:
                self.examples.append(f"{key}: {example}")


MAX_PROMPT_TOKENS = 300  # after the leading 0


def prompt(rng, tokens=None):
    tokens = rng.randint(4, MAX_PROMPT_TOKENS) if tokens is None else tokens
    return [0] + [rng.randrange(10, 20000) for _ in range(tokens)]


def at_once(calls, timeout):
    """Runs every zero-argument call on its own thread, all started before any is joined."""
    threads = [threading.Thread(target=c) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def body(ids, max_tokens, stream=False):
    return {"input_ids": ids, "stream": stream,
            "sampling_params": {"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True}}


def clear_error(r):
    try:
        return r.status_code >= 500 and bool(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return False


def generate(url, ids, max_tokens, stream, timeout, rid=None):
    """('ok', tokens) | ('error', why) | ('lost', why)."""
    headers = {"X-Request-Id": rid} if rid else {}
    try:
        r = requests.post(url + "/generate", json=body(ids, max_tokens, stream), timeout=timeout,
                          stream=stream, headers=headers)
        if not stream:
            if r.status_code == 200:
                return "ok", r.json()["output_ids"]
            return ("error", r.status_code) if clear_error(r) else ("lost", r.text[:200])
        if r.status_code != 200:
            return ("error", r.status_code) if clear_error(r) else ("lost", r.text[:200])
        tokens, event = [], None
        for line in r.iter_lines():
            line = line.decode()
            if line.startswith("event: error"):
                event = "error"
            elif line.startswith("data: ") and line != "data: [DONE]":
                d = json.loads(line[6:])
                if event == "error" or "error" in d:
                    return "error", "sse"
                tokens += d.get("output_ids", d.get("token_ids", []))
            elif line == "data: [DONE]":
                return "ok", tokens
        return "lost", "stream ended without [DONE] or an error event"
    except requests.Timeout:
        return "lost", "no answer within the request timeout"
    except requests.RequestException as e:
        return "lost", repr(e)[:200]


def worker(n, single, pd, stop_at, args, tally, refs, refs_mu):
    rng = random.Random(args.seed * 1000 + n)
    while time.time() < stop_at:
        ids = prompt(rng)
        max_tokens = rng.randint(1, 24)
        op = rng.random()
        if op < 0.08:  # a client that hangs up mid-request
            s = socket.create_connection(("127.0.0.1", pd.port))
            data = json.dumps(body(ids, 2000))
            s.sendall(f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
                      f"Content-Type: application/json\r\n\r\n{data}".encode())
            time.sleep(rng.random() * 0.5)
            s.close()
            tally.add("disconnect")
            continue
        if op < 0.16:  # an operator abort by request id, while it runs
            rid = f"soak-{n}-{rng.randrange(1 << 30)}"
            t = threading.Thread(target=lambda: tally.add(
                "abort_" + generate(pd.url, ids, 2000, False, args.request_timeout, rid)[0]))
            t.start()
            time.sleep(rng.random() * 0.5)
            # An abort that reaches the server before the request is tracked aborts nothing
            # ({"aborted": 0}); on a loaded machine that is common, and the 2000-token request
            # would then run to its end. Repeat it until it takes or the request has ended.
            while t.is_alive():
                r = requests.post(pd.url + "/abort_request", json={"rid": rid}, timeout=30)
                if r.status_code == 200 and r.json().get("aborted", 0) > 0:
                    break
                time.sleep(0.05)
            t.join(args.request_timeout + 10)
            continue
        stream = op < 0.4
        key = (tuple(ids), max_tokens)
        with refs_mu:
            want = refs.get(key)
        if want is None:
            kind, want = generate(single.url, ids, max_tokens, False, args.request_timeout)
            if kind != "ok":
                tally.add("single_" + kind, want)
                continue
            with refs_mu:
                refs[key] = want
        kind, got = generate(pd.url, ids, max_tokens, stream, args.request_timeout)
        if kind == "ok" and got != want:
            tally.add("wrong", f"prompt of {len(ids)}: got {got[:6]}… want {want[:6]}…")
        elif kind == "ok":
            tally.add("ok")
        else:
            tally.add(kind, got)


def overflow_burst(pd, tally, rng, args):
    """More requests at once than running + queued allow: the excess must get 503."""
    results = []

    def one():
        kind, why = generate(pd.url, prompt(rng), 16, False, args.request_timeout)
        results.append(why if kind == "error" else kind)

    at_once([one] * args.burst, args.request_timeout + 10)
    tally.add("burst")
    for r in results:
        tally.add(f"burst_{r}")


def prime(server, concurrent, rng, timeout, rounds=3):
    """The largest steps the run can give this server, before the clock starts: `concurrent`
    requests at once with the longest prompt the workers send, a few times over. Why: the engine's
    step buffers grow to the largest batch they have seen and are kept (so a steady step allocates
    nothing), and a run's first all-long-prompt batch can come late — then a bounded high-water
    mark reads as growth after the warm-up. Measured on a single server with `tiny`: anonymous
    memory 110 -> 180 MiB at its first eight 300-token prompts at once, then flat over 24,000
    ordinary requests; 20-minute soaks without this failed the check on single's `other` (+16.6
    and +25.8 MiB) while pd, whose bursts reach its largest batch early, stayed at +9."""
    for _ in range(rounds):
        prompts = [prompt(rng, MAX_PROMPT_TOKENS) for _ in range(concurrent)]
        at_once([lambda p=p: generate(server.url, p, 2, False, timeout) for p in prompts], timeout + 10)


def wait_idle(server, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if (m.get("tandem_running_requests", 0) == 0 and m.get("tandem_queue_depth", 0) == 0
                and m.get("tandem_pd_transfers_in_flight", 0) == 0
                and m.get("tandem_pd_quarantined_requests", 0) == 0
                and m.get("tandem_verify_inflight", 0) == 0
                and held_pages(m) == 0):
            return m, 0
        time.sleep(0.5)
    m = server.metrics()
    return m, int(held_pages(m) + m.get("tandem_pd_quarantined_requests", 0))


def cache_mib(server, m):
    """MiB the prefix cache holds (pool pages + snapshots), the single or the pd prefill side."""
    page, snap = server.page_bytes()
    pages = m.get("tandem_prefix_cache_pages", 0) + m.get("tandem_pd_prefill_cache_pages", 0)
    snaps = m.get("tandem_prefix_cache_snapshots", 0) + m.get("tandem_pd_prefill_cache_snapshots", 0)
    return round((pages * page + snaps * snap) / 2**20, 1)


def growth(samples, key, warmup_minutes):
    """Least-squares slope of samples[key] after the warm-up, times the span it covers: what
    the series gained after warm-up, robust to single-sample allocator noise. None when fewer
    than three samples follow the warm-up."""
    pts = [(s["minutes"], s[key]) for s in samples if s["minutes"] >= warmup_minutes]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    return round(slope * (pts[-1][0] - pts[0][0]), 1)


def held_pages(m):
    # Pages neither free nor kept by the prefix cache (shared history is held on purpose; the
    # cache gives it back under pressure or on POST /flush_cache).
    return (m["tandem_pages_total"] - m["tandem_pages_free"]
            - m.get("tandem_prefix_cache_pages", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--burst", type=int, default=40)
    ap.add_argument("--sample-seconds", type=float, default=30)
    ap.add_argument("--request-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=str(ROOT / "build/tandem"))
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--cache-memory-bytes", type=int, default=32 << 20,
                    help="cache.memory_bytes of both servers (small, so the caches fill in warm-up)")
    ap.add_argument("--warmup-minutes", type=float, default=None,
                    help="samples before this are not judged for growth (default: a quarter of "
                         "the run, at most 5)")
    ap.add_argument("--max-rss-growth-mib", type=float, default=16,
                    help="resident memory outside the weights and the KV pools that each server "
                         "may gain after warm-up (fitted slope x span)")
    ap.add_argument("--max-fd-growth", type=float, default=4,
                    help="open descriptors each server may gain after warm-up")
    ap.add_argument("--logs", help="write both servers' logs into this directory")
    ap.add_argument("--model", default=str(ROOT / "models/tiny"), help="checkpoint both servers load")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key for both servers (repeatable), e.g. backend.cpu_matmul=amx")
    args = ap.parse_args()

    warmup = args.warmup_minutes if args.warmup_minutes is not None else min(5.0, args.minutes / 4)
    common = ["--set", f"cache.memory_bytes={args.cache_memory_bytes}"]  # both servers
    for kv in args.set:
        common += ["--set", kv]
    single = Server(args.bin, args.model, ["--set", "scheduler.max_queued_requests=4096", *common])
    pd_max_running = 16
    pd = Server(args.bin, args.model, [*common,
        "--topology", "pd", "--set", "transport.kind=tcp", "--set", "transport.listen_port=0",
        "--set", "cache.page_size=128", "--set", f"scheduler.max_running_requests={pd_max_running}",
        "--set", "scheduler.max_queued_requests=16", "--set", "transport.abort_lease_ms=500",
        "--set", "transport.transfer_timeout_ms=30000", "--set", "transport.fault_delay_ms=2",
        "--set", "transport.fault_corrupt_probability=0.0005",
        "--set", "transport.fault_drop_after_frames=5000", f"--set", f"transport.fault_seed={args.seed}"])
    tally, refs, refs_mu = Tally(), {}, threading.Lock()
    prime_rng = random.Random(args.seed + 7)
    prime(single, args.workers, prime_rng, args.request_timeout)  # single serves one request per worker at most
    prime(pd, pd_max_running, prime_rng, args.request_timeout)
    start = time.time()
    stop_at = start + args.minutes * 60
    threads = [threading.Thread(target=worker, args=(i, single, pd, stop_at, args, tally, refs,
                                                     refs_mu)) for i in range(args.workers)]
    for t in threads:
        t.start()
    samples, rng = [], random.Random(args.seed)
    print("MiB: rss = weights (checkpoint files) + pools (KV) + other (heap, stacks, code); cache: what the "
          "prefix cache holds", flush=True)
    print(f"{'min':>6} {'ok':>6} {'wrong':>5} {'lost':>4} {'errors':>6} | {'pd rss':>6} "
          f"{'weights':>7} {'pools':>6} {'other':>6} {'cache':>6} {'fds':>4} | {'single rss':>10} "
          f"{'weights':>7} {'pools':>6} {'other':>6} {'cache':>6} {'fds':>4}", flush=True)
    while time.time() < stop_at:
        time.sleep(min(args.sample_seconds, max(0.0, stop_at - time.time())))
        overflow_burst(pd, tally, rng, args)
        c = dict(tally.counts)
        sample = {"minutes": round((time.time() - start) / 60, 2), "ok": c.get("ok", 0),
                  "wrong": c.get("wrong", 0), "lost": c.get("lost", 0),
                  "errors": c.get("error", 0), "pd_rss_mib": pd.rss_kib() // 1024,
                  "pd_fds": pd.fds(), "single_rss_mib": single.rss_kib() // 1024,
                  "single_fds": single.fds(), "pd_cache_mib": cache_mib(pd, pd.metrics()),
                  "single_cache_mib": cache_mib(single, single.metrics())}
        for name, server in (("pd", pd), ("single", single)):
            for kind, mib in server.memory_mib().items():
                sample[f"{name}_{kind}_mib"] = mib
        samples.append(sample)
        row = f"{sample['minutes']:6.2f} {sample['ok']:6d} {sample['wrong']:5d} " \
              f"{sample['lost']:4d} {sample['errors']:6d}"
        for name, w in (("pd", 6), ("single", 10)):
            row += (f" | {sample[name + '_rss_mib']:{w}d} {sample[name + '_weights_mib']:7.1f} "
                    f"{sample[name + '_pools_mib']:6.1f} {sample[name + '_other_mib']:6.1f} "
                    f"{sample[name + '_cache_mib']:6.1f} {sample[name + '_fds']:4d}")
        print(row, flush=True)
    for t in threads:
        t.join(args.request_timeout + 30)
    lost_threads = sum(t.is_alive() for t in threads)
    pd_m, pd_leak = wait_idle(pd)
    _, single_leak = wait_idle(single)
    report = {"counts": tally.counts, "examples": tally.examples, "samples": samples,
              "leaked_pages": pd_leak + single_leak, "wedged_workers": lost_threads,
              "pd_late_end_events": pd_m.get("tandem_request_late_end_events_total", 0),
              "pd_transfers_failed": pd_m.get('tandem_pd_transfers_total{result="failed"}', 0),
              "warmup_minutes": warmup,
              "growth_after_warmup": {f"{name}_{k}": growth(samples, f"{name}_{k}", warmup)
                                      for name in ("pd", "single")
                                      for k in ("rss_mib", "weights_mib", "pools_mib",
                                                "other_mib", "fds")}}
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    pd.stop()
    single.stop()
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
        Path(args.logs, "pd.log").write_text("".join(pd.log))
        Path(args.logs, "single.log").write_text("".join(single.log))
    bad = (tally.counts.get("wrong", 0) + tally.counts.get("lost", 0) + report["leaked_pages"]
           + lost_threads + sum(v for k, v in tally.counts.items() if k.endswith("_lost")))
    # Judged: memory outside the weights' file mappings and the KV pools (both bounded by their
    # size, and both committed lazily as they are first touched), and descriptors.
    g = report["growth_after_warmup"]
    limits = {"other_mib": args.max_rss_growth_mib, "fds": args.max_fd_growth}
    judged = {k: v for k, v in g.items() if any(k.endswith(s) for s in limits)}
    grew = [f"{k} +{v}" for k, v in judged.items() if v is not None and v > next(
        limit for suffix, limit in limits.items() if k.endswith(suffix))]
    if any(v is None for v in judged.values()):
        grew.append("too few samples after the warm-up to judge growth")
    if grew:
        print("growth after warm-up over the limit: " + ", ".join(grew))
    print("SOAK " + ("FAILED" if bad or grew else "PASSED"))
    return 1 if bad or grew else 0


if __name__ == "__main__":
    sys.exit(main())
