"""The pd topology end to end (issue #7 §5 a, b, c): a prefill engine and a decode engine in one
process, joined by the inproc or the tcp transport, must give the tokens single gives, fail
clearly under injected faults and never leak pages. Across processes: test_pd_processes.py.

Every pd answer is compared with the answer of a `--topology single` server run with the same
model and cache dtypes (the oracle, cached for the module: see pd_support.py).
"""
import random
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import run_tandem
from pd_support import (
    Generate, PAGE_SIZE, References, WORDS, assert_failed_clearly_or_identical, assert_identical,
    assert_idle_without_leaks, cache_args, clear_error, health, long_prompts, make_workload,
    metric_is, open_raw_generate, outcome_or_none_if_closed, pd_args, pool_bytes_for_pages, raw,
    retry_until_ok, run_item, run_wave, scrape, wait_health, wait_until)


@pytest.fixture(scope="module")
def single():
    """The single-topology oracle: answers per cache dtype pair, cached for this module."""
    refs = References()
    yield refs
    refs.close()


# ---------------------------------------------------------------------------------------------
# (a) equivalence: pd (inproc, tcp) gives single's tokens for every cache dtype pair.

# The full load (64 sessions) on two combinations; a smaller one on the rest keeps CI time sane.
FULL_LOAD = {("fp8", "fp8", "inproc"), ("bf16", "fp4", "tcp")}
DTYPES = [(kv, idx) for kv in ("fp8", "bf16") for idx in ("fp8", "bf16", "fp4")]


@pytest.mark.parametrize("kind", ["inproc", "tcp"])
@pytest.mark.parametrize("kv,idx", DTYPES)
def test_pd_tokens_are_identical_to_single(start_tandem, single, kv, idx, kind):
    full = (kv, idx, kind) in FULL_LOAD
    items = make_workload(seed=7 if full else 11, sessions=64 if full else 6,
                          generates=24 if full else 6)
    want = single(items, kv, idx)
    t = start_tandem(*cache_args(kv, idx), *pd_args(kind))
    before = scrape(t)
    got = run_wave(t.url, items)
    assert_identical(items, got, want)
    m = scrape(t)
    # Each request went through the transport: the pd metrics moved.
    assert m("tandem_pd_transfers_total", result="ok") - before("tandem_pd_transfers_total",
                                                                result="ok") >= len(items)
    assert m("tandem_pd_transfer_bytes_total") > before("tandem_pd_transfer_bytes_total")
    assert m("tandem_pd_transfer_seconds_count") > before("tandem_pd_transfer_seconds_count")
    assert (m("tandem_pd_transfer_seconds_bucket", le="+Inf")
            == m("tandem_pd_transfer_seconds_count"))
    assert m("tandem_pd_transfer_seconds_sum") > 0
    assert m("tandem_pd_transfers_total", result="failed") == 0
    assert m("tandem_pd_checksum_failures_total") == 0
    assert m("tandem_pd_prefill_peers_ready") >= 1
    assert_idle_without_leaks(t)
    # Role both: the checkpoint is loaded once; the decode engine's model shares its weights.
    assert t.log.count("weights: shared with the other engine") == 1, t.log
    assert t.log.count("INFO  loaded ") == 1, t.log


def test_preempted_requests_are_prefilled_again_and_match_single(start_tandem, single):
    """Long generations outgrow a ~32-page decode pool, so running requests are preempted and
    sent to the prefill again while late frames (300 ms) of earlier attempts are still coming:
    the tokens stay single's."""
    rng = random.Random(63)
    items = [Generate(ids=tuple([0] + [rng.randrange(10, 20000)
                                       for _ in range(rng.randint(60, 2 * PAGE_SIZE))]),
                      max_tokens=rng.randint(100, 200), ignore_eos=True, logprobs=1)
             for _ in range(16)]
    want = single(items)
    t = start_tandem(*cache_args(), "--set", f"cache.memory_bytes={pool_bytes_for_pages(32)}",
                     *pd_args("tcp", fault_delay_ms=300, abort_lease_ms=100))
    assert_identical(items, run_wave(t.url, items), want)
    m = scrape(t)
    assert m("tandem_preemptions_total") + m("tandem_pd_aborts_total", cause="preempted") >= 1, \
        "nothing was preempted: the pool was not small enough for this test"
    assert_idle_without_leaks(t)


@pytest.mark.parametrize("kind", ["inproc", "tcp"])
def test_pd_under_page_pressure_and_small_prefill_chunks(start_tandem, single, kind):
    """A pool of ~40 pages on each side and 128-token prefill chunks: requests wait for pages
    or are preempted and prefilled again, and still get single's tokens."""
    items = make_workload(seed=61, sessions=24, generates=12)
    want = single(items)
    t = start_tandem(*cache_args(), "--set", f"cache.memory_bytes={pool_bytes_for_pages(40)}",
                     "--set", "scheduler.max_prefill_tokens=128", *pd_args(kind))
    total = scrape(t)("tandem_pages_total")
    assert total <= 48
    fewest_free = [total]
    done = threading.Event()

    def watch():  # the fewest free decode pages seen while the wave runs
        while not done.wait(0.05):
            fewest_free[0] = min(fewest_free[0], scrape(t)("tandem_pages_free"))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        got = run_wave(t.url, items)
    finally:
        done.set()
        watcher.join()
    assert_identical(items, got, want)
    m = scrape(t)
    assert fewest_free[0] <= total // 4 or m("tandem_preemptions_total") >= 1, \
        f"the pool never ran short ({fewest_free[0]} of {total} pages stayed free)"
    assert_idle_without_leaks(t)


def test_pd_streams_match_single(start_tandem, single):
    items = make_workload(seed=3, sessions=6, generates=12)  # chat and native, all streamed
    want = single(items)
    t = start_tandem(*cache_args(), *pd_args("tcp"))
    got = run_wave(t.url, items, streams=set(range(len(items))))
    assert_identical(items, got, want)


def edge_requests():
    """Prompt lengths on the window (8), compression (4, 16), chunk and page (128) boundaries;
    prefill-only requests; prompt logprobs (echo); n > 1 with seeds; stop ids."""
    rng = random.Random(17)

    def ids(n):
        return [0] + [rng.randrange(10, 20000) for _ in range(n - 1)]

    lengths = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 127, 128, 129, 255, 256, 257, 384, 385]
    out = [raw("/generate", input_ids=ids(n), sampling_params={
        "temperature": 0, "max_tokens": 6, "logprobs": 2}) for n in lengths]
    out += [raw("/generate", input_ids=ids(n),
                sampling_params={"temperature": 0, "max_tokens": 1, "logprobs": 3})
            for n in (1, 200)]
    out += [raw("/generate", input_ids=ids(60), sampling_params={
        "temperature": 0, "max_tokens": 12, "stop_token_ids": list(range(10, 129280, 7))})]
    text = " ".join(rng.choice(WORDS) for _ in range(220))
    out += [raw("/v1/completions", prompt=text, max_tokens=4, echo=True, logprobs=2,
                temperature=0),
            raw("/v1/completions", prompt=["a b", "c d e"], max_tokens=5, n=2, seed=9,
                temperature=0.7),
            raw("/v1/chat/completions", messages=[{"role": "user", "content": text}],
                max_tokens=6, n=3, seed=5, temperature=0.7, logprobs=True, top_logprobs=2)]
    return out


@pytest.mark.parametrize("chunk", [2048, 128])
@pytest.mark.parametrize("kind", ["inproc", "tcp"])
def test_pd_edge_requests_match_single(start_tandem, single, kind, chunk):
    items = edge_requests()
    want = single(items)
    t = start_tandem(*cache_args(), "--set", f"scheduler.max_prefill_tokens={chunk}",
                     *pd_args(kind))
    assert_identical(items, run_wave(t.url, items), want)
    assert_idle_without_leaks(t)


# ---------------------------------------------------------------------------------------------
# (b) mass abort while transfers are in flight, then a second wave identical to single;
# late writes after an abort; shutdown with transfers in flight.


def test_mass_abort_during_transfers_leaks_nothing(start_tandem, single):
    t = start_tandem(*cache_args(), "--set", "scheduler.max_running_requests=64",
                     *pd_args("tcp", abort_lease_ms=500, fault_delay_ms=1500,
                              transfer_timeout_ms=60000))
    rng = random.Random(5)
    prompts = [[0] + [rng.randrange(10, 20000)
                      for _ in range(rng.randint(PAGE_SIZE, 4 * PAGE_SIZE))] for _ in range(48)]
    answers = []

    def long_request(ids):
        try:
            r = requests.post(t.url + "/generate", timeout=60, json={
                "input_ids": ids, "sampling_params": {"max_tokens": 4000, "ignore_eos": True}})
            answers.append(r)
        except requests.RequestException as e:
            answers.append(e)

    threads = [threading.Thread(target=long_request, args=(p,)) for p in prompts[:32]]
    for th in threads:
        th.start()
    sockets = [open_raw_generate(t.port, p, 4000) for p in prompts[32:]]
    in_flight = wait_until(lambda: scrape(t)("tandem_pd_transfers_in_flight") > 0, 20, 0.02)
    assert in_flight, "no transfer was ever in flight: the abort would not hit the window"

    def all_admitted():  # abort_all only reaches requests the server already has
        m = scrape(t)
        return m("tandem_running_requests") + m("tandem_queue_depth") == len(prompts)
    assert wait_until(all_admitted, 20, 0.02)
    assert scrape(t)("tandem_pd_transfers_in_flight") > 0
    for s in sockets:  # client disconnects
        s.close()
    r = requests.post(t.url + "/abort_request", json={"abort_all": True}, timeout=10)
    assert r.status_code == 200 and r.json()["aborted"] > 0, r.text
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads), "aborted requests did not end within 30s"
    for a in answers:  # an aborted request ends with finish_reason "abort" (or a clear error)
        assert isinstance(a, requests.Response), a
        if a.status_code == 200:
            assert a.json()["finish_reason"] == "abort", a.text[:300]
        else:
            clear_error(a)
    assert_idle_without_leaks(t)
    m = scrape(t)
    assert m("tandem_pd_aborts_total", cause="client") >= 1
    assert m("tandem_pd_transfers_total", result="aborted") >= 1
    assert health(t)[0] == 200
    items = make_workload(seed=21, sessions=8, generates=8)
    assert_identical(items, run_wave(t.url, items), single(items))
    assert_idle_without_leaks(t)


def test_late_writes_after_the_abort_lease_cannot_touch_reused_pages(start_tandem, single):
    """Invariant 2: every prefill frame is 1.5 s late while the lease is 100 ms, so aborted
    requests' pages are reused before their writes arrive; those writes must be rejected and
    the requests now owning the pages must get single's tokens and logprobs."""
    t = start_tandem(*cache_args(), "--set", f"cache.memory_bytes={pool_bytes_for_pages(40)}",
                     *pd_args("tcp", fault_delay_ms=1500, abort_lease_ms=100,
                              transfer_timeout_ms=60000))
    doomed = long_prompts(71, 12)
    with ThreadPoolExecutor(len(doomed)) as pool:
        pending = [pool.submit(run_item, t.url, it) for it in doomed]
        assert wait_until(lambda: metric_is(t, "tandem_running_requests", len(doomed)), 30, 0.02)
        assert wait_until(lambda: scrape(t)("tandem_pd_bytes_sent_total") > 0, 30, 0.02), \
            "the prefill side never sent state: nothing would arrive late"
        r = requests.post(t.url + "/abort_request", json={"abort_all": True}, timeout=10)
        assert r.status_code == 200 and r.json()["aborted"] > 0, r.text
        for f in pending:
            f.result(timeout=10)  # every aborted request ends promptly
    successors = long_prompts(72, 12)
    assert_identical(successors, run_wave(t.url, successors), single(successors))
    m = scrape(t)
    assert m("tandem_pd_abort_leases_expired_total") >= 1, \
        "no lease expired: pages were not reused early"
    assert m("tandem_pd_stale_writes_rejected_total") + m("tandem_pd_late_writes_total") >= 1, \
        "no late write was seen: the test did not exercise the race"
    assert_idle_without_leaks(t)
    # Each aborted transfer's quarantine ended exactly once: by its ACK or by its lease.
    m = scrape(t)
    ended = m("tandem_pd_abort_leases_expired_total") + m("tandem_pd_abort_acks_total")
    assert ended == m("tandem_pd_transfers_total", result="aborted"), (
        "quarantines ended (leases expired {} + acks {}) != aborted transfers {}".format(
            m("tandem_pd_abort_leases_expired_total"), m("tandem_pd_abort_acks_total"),
            m("tandem_pd_transfers_total", result="aborted")))


def test_sigterm_with_transfers_in_flight_exits_cleanly(start_tandem, single):
    t = start_tandem(*cache_args(), "--set", "server.shutdown_grace_ms=1000",
                     *pd_args("tcp", fault_delay_ms=1000))
    items = long_prompts(91, 8)
    want = single(items)
    with ThreadPoolExecutor(len(items)) as pool:
        pending = [pool.submit(outcome_or_none_if_closed, t.url, it) for it in items]
        # Every request must be in the server before SIGTERM: one still in the listen backlog
        # is closed unanswered, and on a loaded machine some arrive late (the scrape counts
        # itself, hence + 1).
        assert wait_until(lambda: scrape(t)("tandem_http_requests_in_flight") >= len(items) + 1
                          and scrape(t)("tandem_pd_transfers_in_flight") > 0, 60, 0.02)
        start = time.time()
        assert t.stop(timeout=20) == 0
        assert time.time() - start < 10, "shutdown took longer than the grace plus 9 s"
        outs = [f.result(timeout=10) for f in pending]
    assert "shut down cleanly" in t.log
    assert None not in outs, "a connection closed without an answer (expected a clear error)"
    assert_failed_clearly_or_identical(items, outs, want)


# ---------------------------------------------------------------------------------------------
# (c) injected faults: each request fails clearly or gets single's tokens; no wedge; no leak.

# Faults act on the prefill side's sending (delay, corrupt, storm) or on its links (stall,
# drop); corruption, drops and storms stay on for the whole test.
FAULTS = {
    "delay": dict(fault_delay_ms=20),                                # every frame 20 ms late
    # > transfer_timeout_ms, < peer_timeout_ms: a read stall that long is a lost peer, and every
    # new link would stall again.
    "stall": dict(fault_stall_ms=6000, fault_stall_after_frames=10, peer_timeout_ms=30000),
    "drop": dict(fault_drop_after_frames=300),                       # every link, again and again
    "corrupt": dict(fault_corrupt_probability=0.005),                # one byte of some frames
    "abort_storm": dict(fault_abort_storm=2),                        # 2 bogus ABORTs per frame
}


def fault_trace(name, m):
    """What a fault must leave in the decode's /metrics."""
    failed = m("tandem_pd_transfers_total", result="failed")
    deadline = m("tandem_pd_aborts_total", cause="deadline")
    if name == "corrupt":
        assert (m("tandem_pd_checksum_failures_total")
                + m("tandem_pd_decode_transport_frame_checksum_failures_total")
                + m("tandem_pd_decode_transport_malformed_links_total")) >= 1
        assert failed + deadline >= 1
    elif name == "stall":
        assert deadline + failed >= 1
    elif name == "drop":
        assert m("tandem_pd_decode_transport_disconnects_total") >= 1
        assert failed + deadline >= 1
    elif name == "abort_storm":
        assert m("tandem_pd_unknown_aborts_total") >= 1
    elif name == "delay":
        assert failed == 0


# The transfer deadline each fault runs under. It measures a job's own lack of progress and that
# of the jobs ahead of it, so waiting behind others never trips it; but one prefill step longer
# than the deadline still does, and on a loaded 2-core machine a step can take seconds. The delay
# test asserts that slow frames fail nothing, so its deadline stays clear of step times; the stall
# must outlast its deadline.
DEADLINE_MS = {"delay": 30000}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_injected_fault_fails_clearly_or_matches_single(start_tandem, single, fault):
    t = start_tandem(*cache_args(), *pd_args(
        "tcp", transfer_timeout_ms=DEADLINE_MS.get(fault, 3000), abort_lease_ms=500,
        reconnect_min_ms=50,
        reconnect_max_ms=500, fault_seed=1234, **FAULTS[fault]))
    items = make_workload(seed=31, sessions=8, generates=16)
    want = single(items)
    start = time.time()
    got = run_wave(t.url, items, streams=set(range(0, len(items), 3)))
    elapsed = time.time() - start
    assert elapsed < 120, f"the wave took {elapsed:.0f}s: something waited without a deadline"
    assert_failed_clearly_or_identical(items, got, want)
    wait_health(t, 200, 20)
    assert_idle_without_leaks(t)
    fault_trace(fault, scrape(t))
    if fault == "delay":
        assert all(g[0] == "ok" for g in got), "a 20 ms delay must not fail requests"
    # Second wave: identical to single (a request hit again by a standing fault may retry).
    second = make_workload(seed=32, sessions=4, generates=8)
    with ThreadPoolExecutor(4) as pool:
        again = list(pool.map(lambda it: retry_until_ok(t, it), second))
    assert_identical(second, again, single(second))
    assert health(t)[0] == 200
    assert_idle_without_leaks(t)


# ---------------------------------------------------------------------------------------------
# /health_generate and misconfiguration.


@pytest.mark.parametrize("kind", ["inproc", "tcp"])
def test_health_generate_goes_through_the_transport(start_tandem, kind):
    t = start_tandem(*cache_args(), *pd_args(kind))
    before = scrape(t)("tandem_pd_transfers_total", result="ok")
    r = requests.get(t.url + "/health_generate", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text
    assert scrape(t)("tandem_pd_transfers_total", result="ok") >= before + 1


def test_abort_sent_before_its_request_ends_it_in_pd(start_tandem):
    # The pending abort lives on the HTTP side (decode); the request it stops is aborted through
    # the decode engine, which tells the prefill side, and nothing is left in flight.
    t = start_tandem(*cache_args(), *pd_args("tcp", abort_lease_ms=500))
    r = requests.post(t.url + "/abort_request", json={"rid": "pd-abort-first"})
    assert r.status_code == 200 and r.json() == {"aborted": 0, "pending": True}, r.text
    r = requests.post(t.url + "/generate", headers={"X-Request-Id": "pd-abort-first"}, timeout=60,
                      json={"input_ids": list(long_prompts(1, 1)[0].ids),
                            "sampling_params": {"max_tokens": 2000, "ignore_eos": True}})
    assert r.status_code == 200 and r.json()["finish_reason"] == "abort", r.text
    assert_idle_without_leaks(t)


@pytest.mark.parametrize("args,keys", [
    (["--topology", "pd", "--role", "decode", "--set", "transport.kind=inproc"],
     ["topology.role", "transport.kind"]),
    (["--topology", "pd", "--role", "prefill", "--set", "transport.kind=inproc"],
     ["topology.role", "transport.kind"]),
    (["--topology", "single", "--role", "prefill"], ["topology.role", "topology.mode"]),
    (["--topology", "single", "--role", "decode"], ["topology.role", "topology.mode"]),
    (["--topology", "pd", "--role", "decode", "--set", "transport.kind=tcp"], ["transport.peers"]),
])
def test_role_and_transport_misconfigurations_exit_naming_the_keys(args, keys):
    try:
        r = run_tandem("--port", "0", "--model", "models/tiny", *args, timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"tandem {' '.join(args)} started serving instead of exiting")
    assert r.returncode != 0, r.stdout + r.stderr
    for key in keys:
        assert key in r.stderr, (key, r.stderr)
