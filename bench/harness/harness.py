#!/usr/bin/env python3
"""tandem load and verification harness: multi-turn agent sessions with tools against one or
two servers, with latency, throughput, goodput, rejections, failures and divergences reported
separately, the servers' /metrics deltas, a JSON result and PNG plots.

  run     against running servers:
            harness.py run --url http://127.0.0.1:8000 [--reference-url http://127.0.0.1:8001]
                           [--concurrency 8 | --rate 2.0] [--sessions 32] [--out DIR]
  plot    re-draws the PNGs of a result.json:  harness.py plot harness-out/result.json
  verify  starts `single` (the reference) and `pd` on a model itself, runs the workload at each
          concurrency level against both, compares them session by session, and prints one
          verdict line; exit status 0 only without divergences and failures:
            harness.py verify --model models/small --concurrency 8,32,64

Run it with the venv's Python (.venv/bin/python); README "Load and verification harness".
"""
import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

import metrics
import plots
import report
import runner
import servers
from workload import WorkloadOptions, make_sessions, system_prompt

ROOT = Path(__file__).resolve().parents[2]


def workload_args(p):
    g = p.add_argument_group("workload")
    g.add_argument("--sessions", type=int, default=None,
                   help="sessions per run (verify: per level; default 2 x concurrency, run: 16)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--min-steps", type=int, default=2)
    g.add_argument("--max-steps", type=int, default=5)
    g.add_argument("--min-tokens", type=int, default=8, help="max_tokens of a turn, at least")
    g.add_argument("--max-tokens", type=int, default=24, help="max_tokens of a turn, at most")
    g.add_argument("--system-words", type=int, default=120, help="size of the shared system prompt")
    g.add_argument("--sampled-fraction", type=float, default=0.0,
                   help="sessions that sample with a fixed seed instead of greedy decoding")
    g.add_argument("--cancel-probability", type=float, default=0.1)
    g.add_argument("--tool-probability", type=float, default=0.35)
    g.add_argument("--regenerate-probability", type=float, default=0.1)
    g.add_argument("--branch-probability", type=float, default=0.1)
    g.add_argument("--slo-ttft-ms", type=float, default=None, help="goodput: TTFT at most this")
    g.add_argument("--slo-itl-ms", type=float, default=None,
                   help="goodput: mean inter-token gap at most this")
    g.add_argument("--timeout", type=float, default=600, help="seconds one request may take")
    g.add_argument("--out", type=Path, default=Path("harness-out"), help="JSON and PNGs go here")
    g.add_argument("--no-progress", action="store_true")


def options(a, sessions):
    return WorkloadOptions(sessions=sessions, min_steps=a.min_steps, max_steps=a.max_steps,
                           min_tokens=a.min_tokens, max_tokens=a.max_tokens,
                           system_words=a.system_words, sampled_fraction=a.sampled_fraction,
                           cancel_probability=a.cancel_probability,
                           tool_probability=a.tool_probability,
                           regenerate_probability=a.regenerate_probability,
                           branch_probability=a.branch_probability)


def reference_run(run, label):
    """The reference's answers of a compared run, as a run of their own (for plots and stats)."""
    ref = runner.RunResult(label, run.concurrency, run.rate, run.started, run.ended)
    ref.turns = [runner.TurnRecord(t.session, t.step, t.kind, t.reference)
                 for t in run.turns if t.reference is not None]
    return ref


def model_vocab_if_smaller(model_dir):
    """The model's vocab_size when it is smaller than its tokenizer's id range (then prompts go
    through the native API, folded: client.native), else None (the chat API as is)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    vocab = int(cfg["vocab_size"])
    tok_path = Path(model_dir) / "tokenizer.json"
    if not tok_path.exists():
        return None
    tok = json.loads(tok_path.read_text())
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return vocab if vocab < max(ids) + 1 else None


def one_run(a, url, reference, concurrency, rate, seed, label):
    opt = options(a, a.sessions or (2 * concurrency if concurrency else 16))
    sessions = make_sessions(seed, opt)
    system = system_prompt(seed, opt.system_words)
    before = {u: metrics.scrape(u) for u in filter(None, (url, reference))}
    total = sum(len(s.steps) for s in sessions)
    with tqdm(total=total, desc=label + (f" @{concurrency}" if concurrency else ""),
              unit="turn", disable=a.no_progress, file=sys.stderr) as bar:
        run = runner.run(url, sessions, system, reference=reference, concurrency=concurrency,
                         rate=rate, seed=seed, label=label, timeout=a.timeout, progress=bar,
                         vocab=a.vocab)
    after = {u: metrics.scrape(u) for u in before}
    delta = {u: metrics.deltas(before[u], after[u]) for u in before}
    return run, delta


def write_plots(out, runs, by_level):
    plots.latency_cdfs(runs, out / "latency_cdf.png")
    plots.throughput_over_time(runs, out / "throughput.png")
    if by_level:
        plots.rates_by_concurrency(by_level, out / "divergence_by_concurrency.png")


def write_outputs(a, doc, runs, by_level):
    a.out.mkdir(parents=True, exist_ok=True)
    doc["by_level"] = [[c, s] for c, s in by_level]
    doc["runs"] = [runner.run_to_json(r) for r in runs]
    (a.out / "result.json").write_text(json.dumps(doc))
    write_plots(a.out, runs, by_level)
    print(f"wrote {a.out}/result.json and PNG plots", file=sys.stderr)


def cmd_plot(a):
    """Re-draws the PNGs of a result.json (its runs keep every turn's timings)."""
    doc = json.loads(a.result.read_text())
    out = a.out or a.result.parent
    out.mkdir(parents=True, exist_ok=True)
    write_plots(out, [runner.run_from_json(r) for r in doc["runs"]],
                [(c, s) for c, s in doc.get("by_level", [])])
    print(f"wrote PNG plots to {out}", file=sys.stderr)
    return 0


def cmd_run(a):
    if bool(a.concurrency) == bool(a.rate):
        sys.exit("give exactly one of --concurrency N (closed loop) or --rate R (open loop)")
    if a.vocab is not None and a.vocab < 1:
        sys.exit("--vocab must be positive")
    run, delta = one_run(a, a.url, a.reference_url, a.concurrency, a.rate, a.seed, a.label)
    s = report.summarize(run, a.slo_ttft_ms, a.slo_itl_ms)
    report.print_summary(s, sys.stdout)
    for u, d in delta.items():
        report.print_metric_deltas(u, d, sys.stdout)
    canary = metrics.value(metrics.scrape(a.url), "tandem_verify_divergences_total")
    doc = {"mode": "run", "url": a.url, "reference_url": a.reference_url, "summary": s,
           "metrics_deltas": delta}
    runs = [run] + ([reference_run(run, "reference")] if a.reference_url else [])
    write_outputs(a, doc, runs, [(a.concurrency or 0, s)] if a.reference_url else [])
    print("VERDICT: " + report.verdict_line(s, canary))
    return 0 if s["divergent_turns"] == 0 and s["outcomes"]["failed"] == 0 else 1


def settled_canary(urls, timeout=300):
    """The servers' shadow-verification divergences once their pending checks ran (they run
    when a server is idle, so after the load)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(metrics.value(metrics.scrape(u), "tandem_verify_inflight") == 0 for u in urls):
            break
        time.sleep(0.5)
    return sum(metrics.value(metrics.scrape(u), "tandem_verify_divergences_total") for u in urls)


def cmd_verify(a):
    levels = [int(x) for x in a.concurrency.split(",")]
    a.out.mkdir(parents=True, exist_ok=True)
    a.vocab = model_vocab_if_smaller(a.model)
    if a.vocab:
        print(f"{a.model}: vocabulary {a.vocab} < the tokenizer's; turns go through "
              "/generate with folded ids", file=sys.stderr)
    common = list(a.set)
    single = servers.Server(a.binary, a.model, "single", common, a.out / "single.log")
    pd = servers.Server(a.binary, a.model, "pd", common + list(a.pd_set), a.out / "pd.log")
    try:
        single.wait_ready()
        pd.wait_ready()
        levels_doc, runs, by_level, lines = [], [], [], []
        for i, c in enumerate(levels):
            run, delta = one_run(a, pd.url, single.url, c, None, a.seed + i, "pd")
            s = report.summarize(run, a.slo_ttft_ms, a.slo_itl_ms)
            ref = reference_run(run, "single")
            canary_div = metrics.value(delta[pd.url], "tandem_verify_divergences_total")
            report.print_summary(s, sys.stdout)
            report.print_metric_deltas("pd", delta[pd.url], sys.stdout)
            report.print_metric_deltas("single", delta[single.url], sys.stdout)
            lines.append(report.verdict_line(s, canary_div))
            levels_doc.append({"concurrency": c, "pd": s,
                               "single": report.summarize(ref, a.slo_ttft_ms, a.slo_itl_ms),
                               "metrics_deltas": {"pd": delta[pd.url],
                                                  "single": delta[single.url]}})
            runs += [run, ref]
            by_level.append((c, s))
        turns = sum(x["pd"]["compared_turns"] for x in levels_doc)
        div = sum(x["pd"]["divergent_turns"] for x in levels_doc)
        all_turns = sum(x["pd"]["turns"] for x in levels_doc)
        rej = sum(x["pd"]["outcomes"]["rejected"] for x in levels_doc)
        err = sum(x["pd"]["outcomes"]["failed"] + x["pd"]["reference_failures"]
                  for x in levels_doc)
        canary_total = settled_canary([pd.url, single.url])
        ok = div == 0 and err == 0 and canary_total == 0
        verdict = (f"{'PASS' if ok else 'FAIL'}: pd vs single on {a.model} at concurrency "
                   f"{a.concurrency}: divergence {div}/{turns} turns "
                   f"({100 * div / max(turns, 1):.2f}%), rejections {rej}/{all_turns} "
                   f"({100 * rej / max(all_turns, 1):.1f}%), errors {err}, "
                   f"server canary divergences {int(canary_total)}")
        doc = {"mode": "verify", "model": str(a.model), "levels": levels_doc,
               "set": common, "pd_set": a.pd_set, "verdict": verdict, "level_verdicts": lines}
        write_outputs(a, doc, runs, by_level)
        for line in lines:
            print("  " + line)
        print(verdict)
        return 0 if ok else 1
    finally:
        pd.stop()
        single.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="drive running servers")
    r.add_argument("--url", required=True)
    r.add_argument("--reference-url", help="compare every greedy turn with this server's answer")
    r.add_argument("--concurrency", type=int, help="closed loop: sessions at a time")
    r.add_argument("--rate", type=float, help="open loop: Poisson session arrivals per second")
    r.add_argument("--label", default="target")
    r.add_argument("--vocab", type=int, default=None,
                   help="the model's vocabulary when smaller than the tokenizer's (e.g. 32768 "
                        "for the small preset): turns go through /generate with folded ids")
    workload_args(r)
    v = sub.add_parser("verify", help="start single and pd on a model and compare them")
    v.add_argument("--model", required=True, type=Path)
    v.add_argument("--binary", type=Path, default=ROOT / "build" / "tandem")
    v.add_argument("--concurrency", default="8,32,64", help="comma-separated levels")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for both servers (repeatable)")
    v.add_argument("--pd-set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for the pd server only, e.g. a fault drill")
    workload_args(v)
    pl = sub.add_parser("plot", help="re-draw the plots of a result.json")
    pl.add_argument("result", type=Path)
    pl.add_argument("--out", type=Path, default=None, help="default: next to result.json")
    a = ap.parse_args(argv)
    t0 = time.time()
    rc = {"run": cmd_run, "verify": cmd_verify, "plot": cmd_plot}[a.cmd](a)
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
