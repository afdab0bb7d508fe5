"""Summaries of a run: latency percentiles, throughput, goodput, and rejections, failures,
cancellations and divergences — each counted on its own, because mistaking one for another
(503 back-pressure for corruption, say) is exactly how a real deployment lost weeks.

goodput = completion tokens per second of turns that finished, did not diverge, and met the
optional SLOs (--slo-ttft-ms, --slo-itl-ms: mean inter-token gap of the turn).
"""
import math


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def pcts(values, scale=1000.0):
    """p50/p90/p99/max in milliseconds (None when there is nothing to measure)."""
    return {f"p{p}": (None if not values else round(percentile(values, p) * scale, 3))
            for p in (50, 90, 99)} | {"max": None if not values else round(max(values) * scale, 3),
                                      "n": len(values)}


def meets_slo(res, slo_ttft_ms, slo_itl_ms):
    if slo_ttft_ms is not None and (res.ttft is None or res.ttft * 1000 > slo_ttft_ms):
        return False
    if slo_itl_ms is not None and res.itl and sum(res.itl) / len(res.itl) * 1000 > slo_itl_ms:
        return False
    return True


def summarize(run, slo_ttft_ms=None, slo_itl_ms=None):
    turns = run.turns
    wall = max(run.ended - run.started, 1e-9)
    by = {k: [t for t in turns if t.result.outcome == k]
          for k in ("ok", "rejected", "failed", "cancelled")}
    ok = by["ok"]
    # Compared: against the reference's answer, or (regenerate) against the turn it repeats.
    compared = [t for t in ok if t.divergence or t.kind == "regenerate"
                or (t.reference is not None and t.reference.outcome == "ok")]
    diverged = [t for t in ok if t.divergence]
    tokens = sum(len(t.result.tokens) for t in turns)
    good = sum(len(t.result.tokens) for t in ok
               if not t.divergence and meets_slo(t.result, slo_ttft_ms, slo_itl_ms))
    sessions = sorted({t.session for t in turns})
    first_div = {}
    for t in diverged:  # the first divergent turn of each session
        first_div.setdefault(t.session, {"session": t.session, "turn": t.step, "step": t.kind,
                                         **t.divergence})
    checked = len(compared)
    return {
        "label": run.label,
        "concurrency": run.concurrency,
        "rate": run.rate,
        "wall_s": round(wall, 3),
        "sessions": len(sessions),
        "turns": len(turns),
        "outcomes": {k: len(v) for k, v in by.items()},
        "rejection_rate": len(by["rejected"]) / max(len(turns), 1),
        "failure_rate": len(by["failed"]) / max(len(turns), 1),
        "failures": [{"session": t.session, "turn": t.step, "status": t.result.status,
                      "error": t.result.error} for t in by["failed"]][:20],
        "reference_failures": sum(1 for t in ok if t.reference is not None
                                  and t.reference.outcome != "ok"),
        "compared_turns": checked,
        "divergent_turns": len(diverged),
        "divergence_rate": len(diverged) / max(checked, 1),
        "divergent_sessions": len(first_div),
        "first_divergences": list(first_div.values()),
        "ttft_ms": pcts([t.result.ttft for t in ok if t.result.ttft is not None]),
        "itl_ms": pcts([x for t in ok for x in t.result.itl]),
        "e2e_ms": pcts([t.result.e2e for t in ok if t.result.e2e is not None]),
        "throughput_tok_s": round(tokens / wall, 3),
        "goodput_tok_s": round(good / wall, 3),
        "slo": {"ttft_ms": slo_ttft_ms, "itl_ms": slo_itl_ms},
    }


def verdict_line(s, canary=None):
    """One line an operator can read: divergence, rejection and error rates."""
    d = s["divergent_turns"]
    parts = [f"{s['label'] or 'run'}" + (f" @{s['concurrency']}" if s["concurrency"] else ""),
             f"divergence {d}/{s['compared_turns']} turns ({100 * s['divergence_rate']:.1f}%)",
             f"rejections {s['outcomes']['rejected']}/{s['turns']} "
             f"({100 * s['rejection_rate']:.1f}%)",
             f"errors {s['outcomes']['failed']}"]
    if canary is not None:
        parts.append(f"canary divergences {int(canary)}")
    return ", ".join(parts)


def print_summary(s, out):
    o = s["outcomes"]
    print(f"== {s['label'] or 'run'}"
          + (f" (concurrency {s['concurrency']})" if s["concurrency"] else f" (rate {s['rate']}/s)"),
          file=out)
    print(f"   {s['sessions']} sessions, {s['turns']} turns in {s['wall_s']:.1f} s: ok {o['ok']}, "
          f"rejected (503) {o['rejected']}, failed {o['failed']}, cancelled {o['cancelled']}",
          file=out)
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        p = s[name]
        if p["n"]:
            print(f"   {name[:-3]:5s} p50 {p['p50']:9.1f} ms  p90 {p['p90']:9.1f} ms  "
                  f"p99 {p['p99']:9.1f} ms  (n={p['n']})", file=out)
    print(f"   throughput {s['throughput_tok_s']:.1f} tok/s, goodput {s['goodput_tok_s']:.1f} tok/s",
          file=out)
    print(f"   divergences: {s['divergent_turns']} of {s['compared_turns']} compared turns "
          f"in {s['divergent_sessions']} sessions", file=out)
    for d in s["first_divergences"][:5]:
        print(f"     session {d['session']} turn {d['turn']} ({d['step']}): first {d['kind']} "
              f"difference vs {d['against']} at token {d['token']}", file=out)


# The server-side counters worth a line in the console (all of them are in result.json).
KEY_METRICS = ("tandem_requests_finished_total", "tandem_requests_failed_total",
               "tandem_requests_aborted_total", "tandem_rejected_queue_full_total",
               "tandem_preemptions_total", "tandem_pd_transfers_total",
               "tandem_verify_checks_total", "tandem_verify_divergences_total",
               "tandem_verify_skipped_total")


def print_metric_deltas(name, delta, out):
    parts = []
    for metric in KEY_METRICS:
        moved = {k: v for k, v in delta.items() if k.split("{", 1)[0] == metric}
        for key, v in sorted(moved.items()):
            parts.append(f"{key.removeprefix('tandem_')} +{v:g}")
    print(f"   {name} /metrics: " + (", ".join(parts) if parts else "no counter moved"), file=out)
