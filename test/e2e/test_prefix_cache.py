"""The prefix cache through the real binary (prefix-cache.md §9 T9, single and pd): seeded
multi-turn agent sessions (shared system prompt, each turn = previous prompt + output + a new
message, regenerate, branches, aborts mid-turn) replayed with the cache off, the device cache, and
the device cache + host tier with a tiny device budget (every request end evicts the pool's cached
copies to host, so every hit loads back through the per-layer gate, with sentinel-filled load
destinations checked before attention) — every token and logprob equal, for each index-K dtype,
in single and in pd (inproc and tcp); /metrics shows the hits and the host loads; /flush_cache is
refused while requests run; the startup log states the cache's capacity."""
import concurrent.futures
import random
import time

import pytest
import requests

from conftest import run_tandem  # noqa: F401  (conftest fixtures)

VOCAB = 20000
PAGE = 128


def tandem_args(prefix, index_k, extra=()):
    return ["--set", f"cache.prefix_cache={'true' if prefix else 'false'}",
            "--set", f"cache.page_size={PAGE}", "--set", "cache.kv_dtype=fp8",
            "--set", f"cache.index_k_dtype={index_k}", "--set", "cache.snapshot_interval_tokens=256",
            "--set", "scheduler.max_prefill_tokens=96", "--set", "backend.threads=2", *extra]


# The host tier with a tiny device budget (8 slots + 46 pages of 128 tokens on models/tiny):
# test-only switches make every request end evict the pool's cached copies to host and fill load
# destinations with a sentinel the gate checks before attention.
HOST = ["--set", "cache.host_memory_bytes=67108864", "--set", "cache.memory_bytes=2000000",
        "--set", "scheduler.max_running_requests=8", "--set", "cache.snapshot_memory_bytes=8388608",
        "--set", "cache.test_host_evict_on_release=true", "--set", "cache.test_host_sentinel=true"]


def generate(url, ids, max_tokens, seed, rid=None, temperature=0.0):
    headers = {"X-Request-Id": rid} if rid else {}
    r = requests.post(url + "/generate", headers=headers, timeout=300, json={
        "input_ids": ids,
        "sampling_params": {"max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                            "ignore_eos": True, "logprobs": 2}})
    return r


def workload(seed):
    """A list of rounds; each round is a list of (key, prompt builder) run concurrently."""
    rng = random.Random(seed)
    system = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(150, 260))]
    sessions = 4
    msgs = {(s, t): [rng.randrange(3, VOCAB) for _ in range(rng.randrange(10, 70))]
            for s in range(sessions) for t in range(4)}
    return system, sessions, msgs


def replay(url, seed, aborts=False):
    """Runs the sessions; returns {key: (output_ids, logprobs)} for every finished turn."""
    system, sessions, msgs = workload(seed)
    history = {s: list(system) for s in range(sessions)}
    results = {}
    pool = concurrent.futures.ThreadPoolExecutor(8)
    for turn in range(4):
        jobs = {}
        for s in range(sessions):
            history[s] = history[s] + msgs[(s, turn)]
            temp = 0.7 if s == 3 else 0.0  # one seeded sampling session
            jobs[(s, turn)] = pool.submit(generate, url, history[s], 24 + 5 * s, seed + s,
                                          None, temp)
        if turn == 2:
            jobs[("regen", turn)] = pool.submit(generate, url, history[0], 24, seed)
            branch = history[1][:-3] + msgs[(2, 0)]
            jobs[("branch", turn)] = pool.submit(generate, url, branch, 20, seed)
        if aborts and turn == 1:
            # A long request aborted mid-decode: what it cached must not disturb anyone.
            long_prompt = history[2] + [7] * 300
            rid = f"abort-{seed}"
            fut = pool.submit(generate, url, long_prompt, 2000, seed, rid)
            time.sleep(0.5)
            while requests.post(url + "/abort_request", json={"rid": rid},
                                timeout=30).json()["aborted"] == 0:
                time.sleep(0.01)
            assert fut.result().json()["finish_reason"] == "abort"
        for key, fut in jobs.items():
            r = fut.result()
            assert r.status_code == 200, r.text
            body = r.json()
            results[key] = (body["output_ids"], body["logprobs"])
            if isinstance(key[0], int):
                history[key[0]] = history[key[0]] + body["output_ids"]
    pool.shutdown()
    return results


def metric(url, name):
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("index_k", ["fp8", "bf16", "fp4"])
def test_sessions_cache_on_equal_cache_off(start_tandem, index_k):
    seed = {"fp8": 1, "bf16": 2, "fp4": 3}[index_k]
    off = start_tandem(*tandem_args(False, index_k))
    expected = replay(off.url, seed)
    off.stop()
    on = start_tandem(*tandem_args(True, index_k))
    assert "prefix cache: on" in on.log
    got = replay(on.url, seed, aborts=index_k == "fp8")
    for key in expected:
        assert got[key] == expected[key], f"{key} differs with the cache on"
    hits = metric(on.url, "tandem_prefix_cache_hit_tokens_total")
    lookups = metric(on.url, "tandem_prefix_cache_lookup_tokens_total")
    assert hits >= 10 * PAGE, (hits, lookups)
    assert 0 < metric(on.url, "tandem_prefix_cache_hit_ratio") <= 1
    assert metric(on.url, "tandem_prefix_cache_snapshots") > 0
    assert metric(on.url, "tandem_prefix_cache_snapshot_bytes") > 0
    assert metric(on.url, "tandem_prefix_cache_restore_failures_total") == 0
    on.stop()

    host = start_tandem(*tandem_args(True, index_k, HOST))
    assert "host tier" in host.log and "TEST switches on" in host.log
    got = replay(host.url, seed, aborts=index_k == "fp8")
    for key in expected:
        assert got[key] == expected[key], f"{key} differs with the host tier"
    assert metric(host.url, "tandem_prefix_cache_host_loaded_pages_total") >= 10
    assert metric(host.url, "tandem_prefix_cache_evicted_to_host_total") >= 10
    assert metric(host.url, "tandem_prefix_cache_host_bytes_used") > 0
    assert metric(host.url, "tandem_prefix_cache_host_load_seconds_count") > 0
    assert metric(host.url, "tandem_prefix_cache_restore_failures_total") == 0
    assert requests.get(host.url + "/health", timeout=10).status_code == 200


def test_flush_cache_refused_while_running_then_frees(start_tandem):
    on = start_tandem(*tandem_args(True, "fp8"))
    rid = "flush-holder"
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(generate, on.url, list(range(5, 400)), 3000, 1, rid)
    while metric(on.url, "tandem_running_requests") < 1:
        time.sleep(0.01)
    r = requests.post(on.url + "/flush_cache", timeout=30)
    assert r.status_code == 409, r.text
    assert "retry when idle" in r.json()["error"]["message"]
    requests.post(on.url + "/abort_request", json={"rid": rid}, timeout=30)
    assert fut.result().status_code == 200
    assert metric(on.url, "tandem_prefix_cache_pages") > 0  # its prompt-end snapshot stayed
    r = requests.post(on.url + "/flush_cache", timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["flushed"] is True and r.json()["pages_freed"] > 0
    assert metric(on.url, "tandem_prefix_cache_pages") == 0
    assert metric(on.url, "tandem_pages_free") == metric(on.url, "tandem_pages_total")
    pool.shutdown()

    off = start_tandem(*tandem_args(False, "fp8"))
    r = requests.post(off.url + "/flush_cache", timeout=30)
    assert r.status_code == 400 and "prefix_cache" in r.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["inproc", "tcp"])
@pytest.mark.parametrize("index_k", ["fp8", "bf16", "fp4"])
def test_pd_prefill_cache_and_host_tier_equal_single(start_tandem, index_k, kind):
    """pd: the prefill engine keeps the cache (device, then device + host with a tiny device
    budget); the decode receives the whole verified state — the tokens of single, cache off."""
    seed = {"fp8": 4, "bf16": 5, "fp4": 6}[index_k]
    single = start_tandem(*tandem_args(False, index_k))
    expected = replay(single.url, seed)
    single.stop()
    pd_args = ["--topology", "pd", "--set", f"transport.kind={kind}"]
    if kind == "tcp":
        pd_args += ["--set", "transport.listen_port=0"]
    if index_k == "fp8":
        pd = start_tandem(*tandem_args(True, index_k, pd_args))
        got = replay(pd.url, seed)
        for key in expected:
            assert got[key] == expected[key], f"{key} differs in pd with the prefill cache on"
        assert metric(pd.url, "tandem_pd_prefill_cache_hit_tokens_total") >= 10 * PAGE
        pd.stop()
    pd = start_tandem(*tandem_args(True, index_k, pd_args + HOST))
    got = replay(pd.url, seed)
    for key in expected:
        assert got[key] == expected[key], f"{key} differs in pd ({kind}) with the host tier"
    assert metric(pd.url, "tandem_pd_prefill_cache_hit_tokens_total") >= 10 * PAGE
    assert metric(pd.url, "tandem_pd_prefill_cache_host_loaded_pages_total") >= 10
