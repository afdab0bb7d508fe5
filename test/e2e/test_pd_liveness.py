"""Liveness of pd links across processes (design invariant 12): a peer that is stopped (SIGSTOP:
its sockets stay open, as with a hung host) is declared lost by heartbeat within
transport.peer_timeout_ms — /health says so, its in-flight requests fail clearly, no new job goes
to it — and it is picked up again after SIGCONT. In both directions: prefill stopped, decode
stopped. Answers are compared with a `--topology single` server's (pd_support.References)."""
import json
import os
import signal
import threading
import time

import pytest
import requests

from pd_support import (
    References, assert_failed_clearly_or_identical, assert_identical, assert_idle_without_leaks,
    health, long_prompts, make_workload, run_item, run_wave, scrape, start_decode, start_prefill,
    wait_health, wait_until)

# Short heartbeats so the tests take seconds; generous against a loaded machine (a loop that
# does not run for an interval blames itself, not its peer).
HEARTBEAT = ["--set", "transport.heartbeat_interval_ms=200", "--set", "transport.peer_timeout_ms=2000"]
# Loss here is the heartbeats' verdict, never the transfer deadline's: that deadline judges how
# long one prefill step takes (no write lands before the step ends), and under TSan one batched
# step of the recovery wave took 6 s against start_decode's 5 s — every job failed 504 with
# "0 of 6 layers landed" without any stop at all. A 10-minute deadline only guards against a hang.
NO_TRANSFER_DEADLINE = ["--set", "transport.transfer_timeout_ms=600000"]


@pytest.fixture(scope="module")
def single():
    refs = References()
    yield refs
    refs.close()


def start_load(url, items):
    """Runs every item on its own thread; returns (threads, results)."""
    results = [None] * len(items)

    def one(i):
        results[i] = run_item(url, items[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(items))]
    for th in threads:
        th.start()
    return threads, results


def join_all(threads, timeout):
    deadline = time.time() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.time()))
    assert not any(th.is_alive() for th in threads), "requests wedged"


def test_a_stopped_prefill_is_declared_lost_then_picked_up_after_sigcont(start_tandem, single):
    prefill, port = start_prefill(start_tandem, *HEARTBEAT, "--set", "transport.fault_delay_ms=30")
    decode = start_decode(start_tandem, port, *HEARTBEAT, *NO_TRANSFER_DEADLINE)
    wait_health(decode, 200, 60)
    load = long_prompts(131, 12)
    want = single(load)
    threads, results = start_load(decode.url, load)
    assert wait_until(lambda: scrape(decode)("tandem_pd_transfers_in_flight") > 0, 30, 0.02), \
        "no transfer in flight to interrupt"
    os.kill(prefill.proc.pid, signal.SIGSTOP)
    try:
        # The socket stays open: only the missing heartbeat answers can tell.
        wait_health(decode, 503, 30)
        code, text = health(decode)
        assert "answered no heartbeat" in json.loads(text)["error"]["message"], text
        # Its in-flight requests end while it is still stopped, and no new job goes to it.
        join_all(threads, 60)
        r = requests.post(decode.url + "/generate", json={"input_ids": [0, 5, 6]}, timeout=30)
        assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
        assert scrape(decode)("tandem_pd_prefill_peers_ready") == 0
    finally:
        os.kill(prefill.proc.pid, signal.SIGCONT)
    assert_failed_clearly_or_identical(load, results, want)
    assert any(o[0] == "error" for o in results), "no request was cut by the stop"
    assert scrape(decode)("tandem_pd_aborts_total", cause="peer_lost") >= 1
    wait_health(decode, 200, 60)  # redialled and handshaken again
    wave = make_workload(seed=132, sessions=4, generates=8)
    assert_identical(wave, run_wave(decode.url, wave), single(wave))
    assert_idle_without_leaks(decode)
    assert wait_until(lambda: scrape(prefill)("tandem_pd_jobs_in_flight") == 0, 30)


def test_a_stopped_decode_is_declared_lost_by_its_prefill_and_both_recover(start_tandem, single):
    prefill, port = start_prefill(start_tandem, *HEARTBEAT, "--set", "transport.fault_delay_ms=30")
    decode = start_decode(start_tandem, port, *HEARTBEAT, *NO_TRANSFER_DEADLINE)
    wait_health(decode, 200, 60)
    load = long_prompts(133, 12)
    want = single(load)
    threads, results = start_load(decode.url, load)
    assert wait_until(lambda: scrape(decode)("tandem_pd_transfers_in_flight") > 0, 30, 0.02)
    os.kill(decode.proc.pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: scrape(prefill)("tandem_pd_decode_peers_ready") == 0, 30), \
            prefill.log[-3000:]
        prefill.wait_for_log(r"decode peer lost: .*answered no heartbeat", 10)
        # The prefill drops the stopped decode's jobs instead of computing for nobody.
        assert wait_until(lambda: scrape(prefill)("tandem_pd_jobs_in_flight") == 0, 30)
    finally:
        os.kill(decode.proc.pid, signal.SIGCONT)
    join_all(threads, 120)
    assert_failed_clearly_or_identical(load, results, want)
    wait_health(decode, 200, 60)
    wave = make_workload(seed=134, sessions=4, generates=8)
    assert_identical(wave, run_wave(decode.url, wave), single(wave))
    assert_idle_without_leaks(decode)
