"""The pd topology end to end (issue #7 §5): a prefill engine and a decode engine joined by a
transport (inproc, tcp in one process, tcp across two processes) must give the tokens single
gives, fail clearly under injected faults, never leak pages, and recover from peer death.

Every pd answer is compared with the answer of a `--topology single` server run with the same
model and cache dtypes (the oracle, cached for the module: see pd_support.py).
"""
import json
import random
import re
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import MODEL_DIR, run_tandem
from pd_support import (
    PAGE_SIZE, PEERS_RE, WORDS, Generate, References, assert_failed_clearly_or_identical,
    assert_identical, assert_idle_without_leaks, cache_args, clear_error, health, long_prompts,
    make_workload, metric_is, open_raw_generate, outcome_or_none_if_closed, pd_args, peers_value,
    pool_bytes_for_pages, raw, retry_until_ok, run_item, run_wave, scrape, start_decode,
    start_prefill, swallow_errors, wait_health, wait_until)


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
        assert wait_until(lambda: scrape(t)("tandem_pd_transfers_in_flight") > 0, 30, 0.02)
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
    "stall": dict(fault_stall_ms=6000, fault_stall_after_frames=10),  # > transfer_timeout_ms
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


@pytest.mark.parametrize("fault", list(FAULTS))
def test_injected_fault_fails_clearly_or_matches_single(start_tandem, single, fault):
    t = start_tandem(*cache_args(), *pd_args(
        "tcp", transfer_timeout_ms=3000, abort_lease_ms=500, reconnect_min_ms=50,
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
# (d) two processes: kill -9 the prefill under load, restart it, the decode reconnects.


def test_two_processes_survive_prefill_death(start_tandem, single):
    prefill, port = start_prefill(start_tandem, "--set", "transport.fault_delay_ms=30")
    decode = start_decode(start_tandem, port)
    wait_health(decode, 200, 60)
    warm = make_workload(seed=41, sessions=4, generates=4)
    assert_identical(warm, run_wave(decode.url, warm), single(warm))

    rng = random.Random(43)
    load = [Generate(ids=tuple([0] + [rng.randrange(10, 20000)
                                      for _ in range(rng.randint(PAGE_SIZE, 4 * PAGE_SIZE))]),
                     max_tokens=16) for _ in range(24)]
    want = single(load)
    results = [None] * len(load)

    def one(i):
        results[i] = (run_item(decode.url, load[i]), time.time())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(load))]
    for th in threads:
        th.start()
    assert wait_until(lambda: scrape(decode)("tandem_pd_transfers_in_flight") > 0, 20, 0.02), \
        "no transfer in flight to interrupt"
    prefill.kill()  # SIGKILL
    killed_at = time.time()
    for th in threads:
        th.join(40)
    assert not any(th.is_alive() for th in threads), "requests wedged after the prefill died"
    outs = [r[0] for r in results]
    assert_failed_clearly_or_identical(load, outs, want)
    assert any(o[0] == "error" for o in outs), "no request was in flight when the prefill died"
    last_end = max(r[1] for r in results)
    assert last_end - killed_at < 15, "in-flight requests took over 15s to end after the kill"

    wait_health(decode, 503, 10)
    code, text = health(decode)
    assert "prefill peer" in json.loads(text)["error"]["message"], text
    start = time.time()
    r = requests.post(decode.url + "/generate", json={"input_ids": [0, 5, 6]}, timeout=10)
    assert r.status_code == 503 and time.time() - start < 3, (r.status_code, r.text)
    assert r.headers.get("Retry-After")
    assert r.json()["error"]["message"]
    assert scrape(decode)("tandem_pd_prefill_peers_ready") == 0

    start_prefill(start_tandem, port=port)  # same port: the decode finds it again
    wait_health(decode, 200, 30)
    assert scrape(decode)("tandem_pd_prefill_peers_ready") == 1
    wave = make_workload(seed=45, sessions=8, generates=8)
    assert_identical(wave, run_wave(decode.url, wave), single(wave))
    assert_idle_without_leaks(decode)


def test_a_decode_with_two_prefills_survives_losing_one(start_tandem, single):
    """Two prefills that compute differently (chunks of 128 tokens on one thread vs the
    defaults) both give single's tokens; losing one leaves the decode serving from the other."""
    first, port1 = start_prefill(start_tandem)
    second, port2 = start_prefill(start_tandem, "--set", "scheduler.max_prefill_tokens=128",
                                  "--set", "backend.threads=1")
    decode = start_tandem(*cache_args(), *pd_args(
        "tcp", role="decode", peers=peers_value(port1, port2), reconnect_min_ms=50,
        reconnect_max_ms=500, abort_lease_ms=500), healthy=False).wait_listening()
    assert wait_until(lambda: metric_is(decode, "tandem_pd_prefill_peers_ready", 2), 30), \
        decode.log[-3000:]
    wave = make_workload(seed=85, sessions=4, generates=12)
    assert_identical(wave, run_wave(decode.url, wave), single(wave))
    jobs = [scrape(p)("tandem_pd_jobs_total", result="ok") for p in (first, second)]
    assert all(j >= 1 for j in jobs), f"one prefill did all the work: {jobs}"
    first.kill()
    assert wait_until(lambda: metric_is(decode, "tandem_pd_prefill_peers_ready", 1), 10)
    assert health(decode)[0] == 200, health(decode)
    again = make_workload(seed=86, sessions=4, generates=12)
    assert_identical(again, run_wave(decode.url, again), single(again))
    assert_idle_without_leaks(decode)


def test_two_decodes_share_a_prefill_and_one_dying_spares_the_other(start_tandem, single):
    prefill, port = start_prefill(start_tandem, "--set", "transport.fault_delay_ms=200")
    doomed, survivor = start_decode(start_tandem, port), start_decode(start_tandem, port)
    wait_health(doomed, 200, 60)
    wait_health(survivor, 200, 60)
    assert wait_until(lambda: metric_is(prefill, "tandem_pd_decode_peers_ready", 2), 10)
    ours = make_workload(seed=88, sessions=4, generates=12)
    want = single(ours)
    theirs = long_prompts(89, 12)
    with ThreadPoolExecutor(2) as pool:
        mine = pool.submit(run_wave, survivor.url, ours)
        pool.submit(run_wave, doomed.url, theirs)  # its answers die with it
        assert wait_until(lambda: scrape(doomed)("tandem_pd_transfers_in_flight") > 0, 30, 0.02)
        doomed.kill()
        got = mine.result(timeout=120)
    assert_identical(ours, got, want)  # the other decode's death cost these requests nothing
    assert wait_until(lambda: metric_is(prefill, "tandem_pd_decode_peers_ready", 1), 10)
    assert wait_until(lambda: metric_is(prefill, "tandem_pd_jobs_in_flight", 0), 15)
    assert_idle_without_leaks(survivor)


def test_decode_side_faults_in_two_processes(start_tandem, single):
    """Each process applies its own fault settings: the decode corrupts some PREFILL_JOBs it
    sends, the prefill drops them (frame checksum), and those requests fail at the transfer
    deadline; the rest match single."""
    prefill, port = start_prefill(start_tandem)
    decode = start_decode(start_tandem, port, "--set", "transport.fault_corrupt_probability=0.2",
                          "--set", "transport.fault_seed=7", "--set",
                          "transport.transfer_timeout_ms=3000")
    wait_health(decode, 200, 60)
    items = make_workload(seed=87, sessions=0, generates=24)
    start = time.time()
    got = run_wave(decode.url, items)
    assert time.time() - start < 60
    assert_failed_clearly_or_identical(items, got, single(items))
    assert any(g[0] == "error" for g in got), "no corrupted job: the fault did not act"
    assert scrape(prefill)("tandem_pd_prefill_transport_frame_checksum_failures_total") >= 1
    assert scrape(decode)("tandem_pd_aborts_total", cause="deadline") >= 1
    assert_idle_without_leaks(decode)


def test_an_abort_storm_from_the_decode_changes_nothing(start_tandem, single):
    """The decode sends 3 ABORTs for requests that never existed after each frame: the prefill
    counts and ignores them; every answer is single's."""
    prefill, port = start_prefill(start_tandem)
    decode = start_decode(start_tandem, port, "--set", "transport.fault_abort_storm=3")
    wait_health(decode, 200, 60)
    items = make_workload(seed=91, sessions=4, generates=12)
    assert_identical(items, run_wave(decode.url, items), single(items))
    p = scrape(prefill)
    assert p("tandem_pd_aborts_received_total") >= len(items)
    assert p("tandem_pd_jobs_total", result="aborted") == 0
    assert_idle_without_leaks(decode)


def test_a_prompt_the_prefill_cannot_hold_fails_at_once(start_tandem, single):
    """The prefill's pool (~20 pages) is smaller than the decode's: a 35-page prompt the decode
    admits fails clearly and at once (no wait for a deadline); smaller ones still work."""
    _, port = start_prefill(start_tandem, "--set",
                            f"cache.memory_bytes={pool_bytes_for_pages(20)}")
    decode = start_decode(start_tandem, port)
    wait_health(decode, 200, 60)
    big = Generate(ids=tuple([0] + [(i * 7) % 20000 + 10 for i in range(35 * PAGE_SIZE)]),
                   max_tokens=4)
    start = time.time()
    out = run_item(decode.url, big)
    assert out[0] == "error" and "prefill" in out[2], out
    assert time.time() - start < 5
    small = make_workload(seed=89, sessions=2, generates=4)
    assert_identical(small, run_wave(decode.url, small), single(small))
    assert health(decode)[0] == 200
    assert_idle_without_leaks(decode)


def test_a_rogue_peer_cannot_hurt_the_decode(start_tandem, single):
    """Invariant 5: whatever listens at the prefill address (silence, garbage, a huge frame
    header) the decode stays up, 503 with Retry-After, and connects once a real prefill is
    there."""
    rogue = socket.socket()
    rogue.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rogue.bind(("127.0.0.1", 0))
    rogue.listen(16)
    rogue.settimeout(0.2)
    port = rogue.getsockname()[1]
    rng = random.Random(99)
    payloads = [b"", bytes(rng.randrange(256) for _ in range(4096)), b"\xff" * 64,
                b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 32]
    served, stop = [0], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = rogue.accept()
            except socket.timeout:
                continue
            with conn:
                try:
                    conn.sendall(payloads[served[0] % len(payloads)])
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the decode closed the link on the garbage: as it should
                served[0] += 1
                time.sleep(0.3)

    server = threading.Thread(target=serve)
    server.start()
    try:
        decode = start_decode(start_tandem, port, "--set", "transport.handshake_timeout_ms=200")
        assert wait_until(lambda: served[0] >= 2 * len(payloads), 30), served
        code, text = health(decode)
        assert code == 503 and "prefill peer" in text, text
        r = requests.post(decode.url + "/generate", json={"input_ids": [0, 1, 2]}, timeout=5)
        assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
    finally:
        stop.set()
        server.join()
        rogue.close()
    start_prefill(start_tandem, port=port)
    wait_health(decode, 200, 30)
    items = make_workload(seed=97, sessions=2, generates=4)
    assert_identical(items, run_wave(decode.url, items), single(items))
    m = scrape(decode)
    assert m("tandem_pd_decode_transport_disconnects_total") >= len(payloads)


def test_a_rogue_client_cannot_hurt_the_prefill(start_tandem, single):
    prefill, port = start_prefill(start_tandem, "--set", "transport.handshake_timeout_ms=200")
    rng = random.Random(98)
    for payload in [b"", bytes(rng.randrange(256) for _ in range(65536)), b"\xff" * 64,
                    b"\x00" * 4096]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                s.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the prefill closed the link on the garbage: as it should
            time.sleep(0.3)  # past the handshake deadline
    assert health(prefill)[0] == 200
    decode = start_decode(start_tandem, port)
    wait_health(decode, 200, 30)
    items = make_workload(seed=96, sessions=2, generates=4)
    assert_identical(items, run_wave(decode.url, items), single(items))
    assert scrape(prefill)("tandem_pd_prefill_transport_disconnects_total") >= 1


def test_decode_death_leaves_the_prefill_clean(start_tandem, single):
    """kill -9 the decode while its jobs are on the prefill (frames delayed so they stay in
    flight): the prefill drops them and frees its pool (~40 pages, so a leak would starve the
    next decode), and a new decode gets single's tokens from it."""
    prefill, port = start_prefill(start_tandem, "--set", "transport.fault_delay_ms=500",
                                  "--set", f"cache.memory_bytes={pool_bytes_for_pages(40)}")
    first = start_decode(start_tandem, port)
    wait_health(first, 200, 60)
    doomed = long_prompts(81, 16)
    threads = [threading.Thread(target=lambda it=it: swallow_errors(run_item, first.url, it))
               for it in doomed]
    for th in threads:
        th.start()
    assert wait_until(lambda: scrape(prefill)("tandem_pd_jobs_in_flight") >= 4, 30, 0.02), \
        "the prefill never held the decode's jobs"
    first.kill()
    for th in threads:
        th.join(10)

    def prefill_idle():
        m = scrape(prefill)
        return (m("tandem_pd_jobs_in_flight") == 0 and m("tandem_pd_prefill_running") == 0
                and m("tandem_pd_prefill_queue_depth") == 0
                and m("tandem_pd_decode_peers_ready") == 0)
    assert wait_until(prefill_idle, 15), \
        f"the prefill kept the dead decode's jobs:\n{prefill.log[-3000:]}"
    m = scrape(prefill)
    assert m("tandem_pd_jobs_total", result="aborted") + m("tandem_pd_jobs_total",
                                                           result="failed") >= 1
    assert health(prefill)[0] == 200
    second = start_decode(start_tandem, port)
    wait_health(second, 200, 30)
    wave = long_prompts(82, 12, pages=(3, 3))  # together about the whole prefill pool
    assert_identical(wave, run_wave(second.url, wave), single(wave))
    assert_idle_without_leaks(second)


def test_decode_waits_for_its_prefill_and_answers_503_meanwhile(start_tandem, single):
    # A port nobody listens on (bound then released): the decode keeps retrying.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    decode = start_decode(start_tandem, free_port)
    time.sleep(0.5)
    code, text = health(decode)
    assert code == 503 and "prefill peer" in json.loads(text)["error"]["message"], text
    for path, body in [("/generate", {"input_ids": [0, 1, 2]}),
                       ("/v1/completions", {"prompt": "hello", "max_tokens": 3}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})]:
        start = time.time()
        r = requests.post(decode.url + path, json=body, timeout=10)
        assert r.status_code == 503 and time.time() - start < 3, (path, r.status_code, r.text)
        assert r.headers.get("Retry-After"), path
        assert r.json()["error"]["message"], path
    # The prefill arrives late on that port; the decode connects by itself.
    start_prefill(start_tandem, port=free_port)
    wait_health(decode, 200, 30)
    items = make_workload(seed=47, sessions=2, generates=4)
    assert_identical(items, run_wave(decode.url, items), single(items))


# ---------------------------------------------------------------------------------------------
# (e) a layout mismatch is refused at the handshake.


def assert_handshake_refused(start_tandem, prefill_args, decode_args, names):
    """A prefill and a decode that must not work together: the decode never becomes ready and
    says why, naming what each side has (`names`), in its /health and its log."""
    prefill = start_tandem(*prefill_args, *pd_args("tcp", role="prefill", listen_port=0))
    port = int(prefill.wait_for_log(PEERS_RE).group(2))
    decode = start_tandem(*decode_args, *pd_args(
        "tcp", role="decode", peers=peers_value(port), reconnect_min_ms=50,
        reconnect_max_ms=200), healthy=False).wait_listening()
    decode.wait_for_log("".join(f"(?=.*{re.escape(n)})" for n in names), timeout=20)
    time.sleep(1.0)  # several redials: none may succeed
    code, text = health(decode)
    assert code == 503, text
    message = json.loads(text)["error"]["message"]
    assert all(n in message for n in names), message
    r = requests.post(decode.url + "/generate", json={"input_ids": [0, 1, 2]}, timeout=10)
    assert r.status_code == 503, r.text
    assert scrape(decode)("tandem_pd_prefill_peers_ready") == 0
    assert scrape(prefill)("tandem_pd_decode_peers_ready") == 0
    return prefill, port, decode


@pytest.mark.parametrize("prefill_args,decode_args,names", [
    (cache_args("fp8", "bf16"), cache_args("fp8", "fp8"), ("bf16", "fp8", "layout")),
    (cache_args("bf16", "fp8"), cache_args("fp8", "fp8"), ("bf16", "fp8", "layout")),
    (cache_args() + ["--set", "cache.page_size=256"], cache_args(), ("256", "128", "layout")),
], ids=["index_k_dtype", "kv_dtype", "page_size"])
def test_layout_mismatch_is_refused_naming_both_layouts(start_tandem, prefill_args, decode_args,
                                                        names):
    assert_handshake_refused(start_tandem, prefill_args, decode_args, names)


def test_a_refused_decode_heals_when_a_matching_prefill_takes_the_port(start_tandem, single):
    prefill, port, decode = assert_handshake_refused(
        start_tandem, cache_args("fp8", "bf16"), cache_args("fp8", "fp8"), ("bf16", "fp8"))
    prefill.kill()
    start_prefill(start_tandem, port=port)  # fp8 / fp8, like the decode
    wait_health(decode, 200, 15)
    items = make_workload(seed=93, sessions=2, generates=4)
    assert_identical(items, run_wave(decode.url, items), single(items))


def test_different_weights_or_numerics_are_refused(start_tandem, tmp_path):
    other = tmp_path / "tiny-seed-2"
    r = run_tandem("make-model", "--preset", "tiny", "--out", str(other), "--seed", "2",
                   "--tokenizer", str(MODEL_DIR.parent / "tokenizer"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert_handshake_refused(start_tandem, cache_args() + ["--model", str(other)], cache_args(),
                             ("model mismatch", str(other), str(MODEL_DIR.name)))
    assert_handshake_refused(start_tandem, cache_args() + ["--set", "model.numerics=official"],
                             cache_args(), ("model mismatch", "official", "hf"))


# ---------------------------------------------------------------------------------------------
# Roles, /health_generate, misconfiguration.


def test_prefill_role_serves_health_but_refuses_generation(start_tandem):
    prefill, _ = start_prefill(start_tandem)
    assert requests.get(prefill.url + "/health", timeout=5).status_code == 200
    for path, body in [("/generate", {"input_ids": [0, 1, 2]}),
                       ("/v1/completions", {"prompt": "hello", "max_tokens": 3}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})]:
        r = requests.post(prefill.url + path, json=body, timeout=10)
        assert r.status_code == 503, (path, r.status_code, r.text)
        err = r.json()["error"]
        assert "prefill" in err["message"] and err["type"], (path, err)
    m = scrape(prefill)
    assert m("tandem_pd_jobs_in_flight") == 0
    assert m.has("tandem_pd_jobs_total") and m.has("tandem_pd_bytes_sent_total")


def test_prefill_metrics_count_jobs_of_its_decode(start_tandem, single):
    prefill, port = start_prefill(start_tandem)
    decode = start_decode(start_tandem, port)
    wait_health(decode, 200, 60)
    items = make_workload(seed=51, sessions=0, generates=6)
    assert_identical(items, run_wave(decode.url, items), single(items))
    p, d = scrape(prefill), scrape(decode)
    assert p("tandem_pd_jobs_total", result="ok") >= len(items)
    assert p("tandem_pd_bytes_sent_total") == d("tandem_pd_transfer_bytes_total") > 0
    assert p("tandem_pd_jobs_in_flight") == 0


@pytest.mark.parametrize("kind", ["inproc", "tcp"])
def test_health_generate_goes_through_the_transport(start_tandem, kind):
    t = start_tandem(*cache_args(), *pd_args(kind))
    before = scrape(t)("tandem_pd_transfers_total", result="ok")
    r = requests.get(t.url + "/health_generate", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text
    assert scrape(t)("tandem_pd_transfers_total", result="ok") >= before + 1


def test_health_generate_on_a_decode_without_prefill_is_503(start_tandem):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    decode = start_decode(start_tandem, free_port)
    start = time.time()
    r = requests.get(decode.url + "/health_generate", timeout=30)
    assert r.status_code == 503 and time.time() - start < 10, r.text


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
