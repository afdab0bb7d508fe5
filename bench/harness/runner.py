"""Running sessions against a server — closed loop (N sessions at a time) or open loop (sessions
arrive as a Poisson process) — and, when a reference server is given, comparing every greedy
turn with the reference's answer to the same request, session by session.

Each turn is sent to the target; when it succeeded and the session is greedy (or seeded), the
identical request goes to the reference and the two answers are compared token by token (tokens
and logprobs: batch-invariant kernels repeat both bit for bit). The history continues with the
target's reply, so a divergence in one turn does not make every later turn differ.
A `regenerate` step is also compared with the turn it repeats, on the same server.
"""
import functools
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import requests

from client import Result, chat, first_difference, native
from workload import Conversation


@dataclass
class TurnRecord:
    session: int
    step: int
    kind: str
    result: object                   # client.Result of the target
    reference: object = None         # client.Result of the reference (when compared)
    divergence: dict | None = None   # {"against", "token", "kind"} at the first difference


@dataclass
class RunResult:
    label: str
    concurrency: int | None
    rate: float | None
    started: float
    ended: float = 0.0
    turns: list = field(default_factory=list)


def model_name(url):
    r = requests.get(url + "/v1/models", timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]


def sender(vocab):
    """chat(), or native() folding prompts into `vocab` (a model smaller than its tokenizer)."""
    return functools.partial(native, vocab=vocab) if vocab else chat


def run_session(url, reference, model, system, session, record, timeout, stop, vocab=None):
    send = sender(vocab)
    conv = Conversation(system, session)
    http = requests.Session()
    ref_http = requests.Session() if reference else None
    last_tokens = None
    for i, step in enumerate(session.steps):
        if stop.is_set():
            return
        body = conv.body(step, model)
        res = send(url, body, cancel_after=step.cancel_after, timeout=timeout, session=http)
        rec = TurnRecord(session.index, i, step.kind, res)
        if res.outcome == "ok":
            if step.kind == "regenerate" and last_tokens is not None:
                diff = first_difference(res, last_tokens)
                if diff:
                    rec.divergence = {"against": "regenerate", "token": diff[0], "kind": diff[1]}
            if reference and rec.divergence is None:
                rec.reference = send(reference, body, timeout=timeout, session=ref_http)
                if rec.reference.outcome == "ok":
                    diff = first_difference(res, rec.reference)
                    if diff:
                        rec.divergence = {"against": "reference", "token": diff[0],
                                          "kind": diff[1]}
            if step.kind != "cancel":
                last_tokens = res
            conv.commit(step, body, res.text)
        record(rec)
        if res.outcome in ("rejected", "failed"):
            return  # the session gives up (a client would retry later; counted either way)


def run(url, sessions, system, *, reference=None, concurrency=None, rate=None, seed=0,
        label="", timeout=600, progress=None, vocab=None):
    """Runs every session; closed loop with `concurrency`, else open loop at `rate` sessions/s."""
    model = model_name(url)
    out = RunResult(label, concurrency, rate, time.time())
    lock = threading.Lock()
    stop = threading.Event()

    def record(rec):
        with lock:
            out.turns.append(rec)
        if progress:
            progress.update(1)

    def one(s):
        run_session(url, reference, model, system, s, record, timeout, stop, vocab)

    try:
        if concurrency:
            with ThreadPoolExecutor(concurrency) as pool:
                for f in [pool.submit(one, s) for s in sessions]:
                    f.result()
        else:
            rng = random.Random(seed)
            with ThreadPoolExecutor(max(1, len(sessions))) as pool:
                futures = []
                for s in sessions:
                    futures.append(pool.submit(one, s))
                    time.sleep(rng.expovariate(rate))
                for f in futures:
                    f.result()
    except KeyboardInterrupt:
        stop.set()
        raise
    out.ended = time.time()
    out.turns.sort(key=lambda t: (t.session, t.step))
    return out


def run_to_json(run):
    """Every turn with its timings, tokens and comparison: enough to re-plot (harness.py plot)."""
    return asdict(run)


def run_from_json(d):
    turns = [TurnRecord(t["session"], t["step"], t["kind"], Result(**t["result"]),
                        Result(**t["reference"]) if t["reference"] else None, t["divergence"])
             for t in d["turns"]]
    return RunResult(d["label"], d["concurrency"], d["rate"], d["started"], d["ended"], turns)
