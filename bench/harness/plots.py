"""PNG plots of one or more runs: latency CDFs, throughput over time, and divergence and
rejection rates by concurrency (the single-vs-pd experiment at a glance)."""
import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402


def _ms_axis(ax):
    """Log-scale milliseconds with plain major labels (1, 10, 100, 1k, 10k) and no minor ones."""
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    wide = lo <= 0 or hi / lo > 300  # more than ~2.5 decades: label the decades only
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _cdf(ax, values, label):
    if not values:
        return
    s = sorted(v * 1000 for v in values)
    ax.plot(s, [(i + 1) / len(s) for i in range(len(s))], label=label)


def latency_cdfs(runs, path):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for run in runs:
        ok = [t.result for t in run.turns if t.result.outcome == "ok"]
        name = run.label + (f" @{run.concurrency}" if run.concurrency else "")
        _cdf(axes[0], [r.ttft for r in ok if r.ttft is not None], name)
        _cdf(axes[1], [x for r in ok for x in r.itl], name)
        _cdf(axes[2], [r.e2e for r in ok if r.e2e is not None], name)
    for ax, title in zip(axes, ("time to first token", "inter-token latency", "end to end")):
        ax.set_title(title)
        ax.set_xlabel("ms")
        _ms_axis(ax)
        ax.set_ylim(0, 1)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of turns (ITL: of tokens)")
    axes[2].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_over_time(runs, path):
    """Generated tokens per second in bins of 1/60 of the longest run (at least 1 s)."""
    fig, ax = plt.subplots(figsize=(10, 4))
    bin_s = max(1.0, max((r.ended - r.started for r in runs), default=60.0) / 60.0)
    for run in runs:
        times = [ts for t in run.turns for ts in t.result.token_times]
        if not times:
            continue
        n = int((run.ended - run.started) / bin_s) + 1
        bins = [0] * n
        for ts in times:
            i = int((ts - run.started) / bin_s)
            if 0 <= i < n:
                bins[i] += 1
        ax.plot([i * bin_s for i in range(n)], [b / bin_s for b in bins],
                label=run.label + (f" @{run.concurrency}" if run.concurrency else ""))
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("generated tokens / s")
    ax.set_title(f"throughput over time ({bin_s:.0f} s bins)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rates_by_concurrency(summaries, path):
    """summaries: [(concurrency, summary)] of target-vs-reference runs."""
    fig, ax = plt.subplots(figsize=(7, 4))
    levels = [str(c) for c, _ in summaries]
    x = range(len(levels))
    div = [100 * s["divergence_rate"] for _, s in summaries]
    rej = [100 * s["rejection_rate"] for _, s in summaries]
    err = [100 * s["failure_rate"] for _, s in summaries]
    w = 0.27
    ax.bar([i - w for i in x], div, w, label="divergent turns (vs reference)", color="tab:red")
    ax.bar(list(x), rej, w, label="rejected (503)", color="tab:orange")
    ax.bar([i + w for i in x], err, w, label="failed", color="tab:gray")
    for i, (_, s) in enumerate(summaries):
        ax.annotate(f"{s['divergent_turns']}/{s['compared_turns']}", (i - w, div[i]),
                    ha="center", va="bottom", fontsize="x-small")
    if not any(div + rej + err):
        ax.text(0.5, 0.5, f"no divergence, rejection or failure\n"
                f"({sum(s['compared_turns'] for _, s in summaries)} turns compared)",
                transform=ax.transAxes, ha="center", va="center", color="tab:green")
    ax.set_xticks(list(x), levels)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("% of turns")
    ax.set_ylim(0, max([5.0] + div + rej + err) * 1.15)
    ax.set_title("divergence, rejection and failure rate by concurrency")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
