"""One streaming chat request, timed: TTFT, inter-token gaps, end to end, and the tokens with
their logprobs (what two servers are compared on).

An outcome is one of
  ok         the stream ended with [DONE]
  rejected   HTTP 503 (over capacity: Retry-After) — back-pressure, not a failure
  failed     any other HTTP error, an SSE error event, a broken or timed-out connection
  cancelled  the harness disconnected on purpose (a `cancel` step)
"""
import json
import time
from dataclasses import dataclass, field

import requests


@dataclass
class Result:
    outcome: str
    status: int = 0
    error: str = ""
    text: str = ""
    tokens: list = field(default_factory=list)    # token strings, one per generated token
    logprobs: list = field(default_factory=list)  # the chosen token's logprob, per token
    finish_reason: str | None = None
    completion_tokens: int = 0
    start: float = 0.0        # wall clock (time.time()) when sent
    ttft: float | None = None
    itl: list = field(default_factory=list)       # seconds between token-bearing chunks, per token
    token_times: list = field(default_factory=list)  # wall clock per token
    e2e: float | None = None


def _delta_tokens(choice):
    lp = choice.get("logprobs") or {}
    return [(e.get("token", ""), e.get("logprob")) for e in (lp.get("content") or [])]


def _record_tokens(res, toks, t0, last):
    """Adds one streamed chunk's (token, logprob) pairs to `res`: the time to first token, the gap
    per token since the previous chunk, each token's arrival time. Returns the chunk's arrival
    time, the `last` of the next call."""
    now = time.perf_counter()
    if last is None:
        res.ttft = now - t0
    else:
        res.itl += [(now - last) / len(toks)] * len(toks)
    res.token_times += [res.start + (now - t0)] * len(toks)
    for tok, lp in toks:
        res.tokens.append(tok)
        res.logprobs.append(lp)
    return now


def chat(url, body, cancel_after=0, timeout=600, session=None):
    """POST /v1/chat/completions as a stream. cancel_after > 0: disconnect after that many chunks."""
    http = session or requests
    res = Result("failed", start=time.time())
    t0 = time.perf_counter()
    last = None
    chunks = 0
    try:
        with http.post(url + "/v1/chat/completions", json=body, stream=True,
                       timeout=timeout) as r:
            res.status = r.status_code
            if r.status_code != 200:
                res.outcome = "rejected" if r.status_code == 503 else "failed"
                try:
                    res.error = r.json()["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    res.error = r.text[:200]
                return res
            # SSE frames end with a blank line; token text may hold U+2028 and friends, so split
            # on bytes rather than with str.splitlines.
            for raw in r.iter_lines(delimiter=b"\n"):
                if not raw.startswith(b"data: "):
                    continue
                payload = raw[6:]
                if payload == b"[DONE]":
                    res.outcome = "ok"
                    break
                ev = json.loads(payload)
                if "error" in ev:
                    res.error = str(ev["error"].get("message", ev["error"]))
                    return res
                if ev.get("usage"):
                    res.completion_tokens = ev["usage"].get("completion_tokens", 0)
                for choice in ev.get("choices", []):
                    delta = choice.get("delta") or {}
                    res.text += delta.get("content") or ""
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                    toks = _delta_tokens(choice)
                    if toks:
                        last = _record_tokens(res, toks, t0, last)
                chunks += 1
                if cancel_after and chunks >= cancel_after:
                    res.outcome = "cancelled"
                    break
    except requests.RequestException as e:
        res.error = f"{type(e).__name__}: {e}"
        return res
    finally:
        res.e2e = time.perf_counter() - t0
    if res.outcome == "failed" and not res.error:
        res.error = "the stream ended without [DONE]"
    return res


def native(url, body, vocab, cancel_after=0, timeout=600, session=None):
    """The same turn through the native API, for models whose vocabulary is smaller than the
    tokenizer's (the `small` preset: 32768 of 129,280 ids): the server renders the chat body
    (/v1/chat/completions/render: template, tools as DSML), ids beyond the model's vocabulary are
    folded into it (id % vocab; the prompt keeps its length and shared prefixes), /generate
    streams the reply ids, and /detokenize gives the text fed back into the history. TTFT is
    measured from the /generate request; the render call is not timed."""
    http = session or requests
    res = Result("failed", start=time.time())
    chat_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "logprobs")}
    try:
        r = http.post(url + "/v1/chat/completions/render", json=chat_body, timeout=timeout)
        if r.status_code != 200:
            res.status = r.status_code
            res.outcome = "rejected" if r.status_code == 503 else "failed"
            res.error = "render: " + r.text[:200]
            return res
        ids = [t % vocab for t in r.json()["tokens"]]
    except requests.RequestException as e:
        res.error = f"render: {type(e).__name__}: {e}"
        return res
    sampling = {"max_tokens": body["max_tokens"], "temperature": body["temperature"],
                "logprobs": 0}
    if "seed" in body:
        sampling["seed"] = body["seed"]
    res.start = time.time()
    t0 = time.perf_counter()
    last = None
    chunks = 0
    try:
        with http.post(url + "/generate", json={"input_ids": ids, "stream": True,
                                                "sampling_params": sampling},
                       stream=True, timeout=timeout) as r:
            res.status = r.status_code
            if r.status_code != 200:
                res.outcome = "rejected" if r.status_code == 503 else "failed"
                res.error = r.text[:200]
                return res
            for raw in r.iter_lines(delimiter=b"\n"):
                if not raw.startswith(b"data: "):
                    continue
                if raw[6:] == b"[DONE]":
                    res.outcome = "ok"
                    break
                ev = json.loads(raw[6:])
                if "error" in ev:
                    res.error = str(ev["error"].get("message", ev["error"]))
                    return res
                if ev.get("finish_reason"):
                    res.finish_reason = ev["finish_reason"]
                if ev.get("usage"):
                    res.completion_tokens = ev["usage"].get("completion_tokens", 0)
                toks = [(e["token"], e["logprob"]) for e in ev.get("logprobs") or []]
                if toks:
                    last = _record_tokens(res, toks, t0, last)
                chunks += 1
                if cancel_after and chunks >= cancel_after:
                    res.outcome = "cancelled"
                    break
        res.e2e = time.perf_counter() - t0
        if res.outcome == "ok":
            d = http.post(url + "/detokenize", json={"tokens": res.tokens}, timeout=timeout)
            res.text = d.json().get("prompt", "") if d.status_code == 200 else ""
    except requests.RequestException as e:
        res.error = f"{type(e).__name__}: {e}"
        res.outcome = "failed"
        return res
    if res.outcome == "failed" and not res.error:
        res.error = "the stream ended without [DONE]"
    return res


def first_difference(a, b):
    """(index, kind) of the first position where two results differ — "token" when the tokens
    differ, "logprob" when only the chosen token's logprob does (kernels are batch-invariant, so
    a greedy rerun must repeat both bit for bit) — or None when they agree."""
    for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens)):
        if ta != tb:
            return i, "token"
        if a.logprobs[i] != b.logprobs[i]:
            return i, "logprob"
    if len(a.tokens) != len(b.tokens):
        return min(len(a.tokens), len(b.tokens)), "length"
    return None
