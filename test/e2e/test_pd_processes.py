"""The pd topology across processes, end to end (issue #7 §5 d, e): `--role prefill` and
`--role decode` servers joined over tcp. Peer death and restart, several peers, faults each
process injects itself, hostile peers, and handshakes that must be refused.

Answers are compared with a `--topology single` server's (the oracle: see pd_support.py).
"""
import json
import random
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import MODEL_DIR, run_tandem
from pd_support import (
    Generate, PAGE_SIZE, PEERS_RE, References, assert_failed_clearly_or_identical,
    assert_identical, assert_idle_without_leaks, cache_args, health, long_prompts, make_workload,
    metric_is, pd_args, peers_value, pool_bytes_for_pages, run_item, run_wave, scrape,
    start_decode, start_prefill, swallow_errors, wait_health, wait_until)


@pytest.fixture(scope="module")
def single():
    """The single-topology oracle: answers per cache dtype pair, cached for this module."""
    refs = References()
    yield refs
    refs.close()


# ---------------------------------------------------------------------------------------------
# (d) two processes: peer death and restart, several peers, faults, hostile peers.


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
    # A flipped byte lands in a payload (the frame is dropped: its job ends at the transfer
    # deadline) or in a header (the link is closed: its jobs fail as the peer is lost). Which
    # frames get hit depends on how heartbeats interleave with jobs, so either must count.
    seen = scrape(prefill)
    dropped = seen("tandem_pd_prefill_transport_frame_checksum_failures_total")
    closed = seen("tandem_pd_prefill_transport_malformed_links_total")
    assert dropped + closed >= 1, "the prefill detected no corrupted frame"
    if closed == 0:
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
    # Loading the model takes what it takes on a loaded machine; then it must say why it waits.
    assert wait_until(lambda: "starting" not in health(decode)[1], 120), health(decode)
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
# The prefill role on its own; a decode without its prefill.


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


def test_health_generate_on_a_decode_without_prefill_is_503(start_tandem):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    decode = start_decode(start_tandem, free_port)
    start = time.time()
    r = requests.get(decode.url + "/health_generate", timeout=30)
    assert r.status_code == 503 and time.time() - start < 10, r.text
