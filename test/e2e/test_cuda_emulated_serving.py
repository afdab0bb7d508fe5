"""Serving through the device path without a GPU (backend.device = "cuda" with the testing-only
backend.test_emulate_device: the device executor over the host emulation, host memory as the
device). The pool is an external arena the server reaches only through the device runtime's
upload/download, as on a GPU, so these tests prove the serving plumbing of the device path —
engine, pd transfers out of and into device pools, prefix-cache snapshots and the host tier over
a device pool — not the device itself (no GPU runs here; see README "CUDA backend").

Every answer is compared with the CPU backend's (the emulation is bit-equal to the CPU, so tokens
and logprobs must be identical)."""
import json
import time

import pytest
import requests

from pd_support import (
    Raw, References, assert_failed_clearly_or_identical, assert_identical,
    assert_idle_without_leaks, cache_args, make_workload, pd_args, run_wave, scrape, sse_events,
    wait_health)
from test_prefix_cache import HOST, metric, replay, tandem_args
from test_verify import CHECK_ALL, settled

EMULATED = ["--set", "backend.device=cuda", "--set", "backend.test_emulate_device=true"]


@pytest.fixture(scope="module")
def cpu_single():
    """The CPU backend's single-topology answers (fp8 cache rows), cached for this module."""
    refs = References()
    yield refs
    refs.close()


def assert_on_the_emulated_device(t):
    assert "over the host emulation" in t.log, t.log
    assert "CUDA executor on host emulation" in t.log, t.log


def completions(seed):
    """Legacy completions (text, ids, echo + logprobs), compared as whole bodies."""
    bodies = [{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0},
              {"prompt": [0, 523, 1891, 77, 4000, 12], "max_tokens": 9, "temperature": 0,
               "logprobs": 2},
              {"prompt": "river stone cloud lantern " * 20, "max_tokens": 7, "echo": True,
               "logprobs": 1, "temperature": 0.8, "seed": seed}]
    return [Raw("/v1/completions", json.dumps(b)) for b in bodies]


def streamed_completion(url):
    r = requests.post(url + "/v1/completions", stream=True, timeout=300, json={
        "prompt": "Once upon a time in a quiet harbor", "max_tokens": 16, "temperature": 0,
        "stream": True})
    assert r.status_code == 200, r.text
    text, finish = "", None
    for event in sse_events(r):
        for choice in event["choices"]:
            text += choice.get("text") or ""
            finish = choice.get("finish_reason") or finish
    return text, finish


def test_single_on_the_emulated_device_equals_the_cpu(start_tandem, cpu_single):
    # Chat sessions and native requests, every other one streamed, plus legacy completions.
    items = make_workload(seed=41, sessions=4, generates=8) + completions(41)
    want = cpu_single(items)
    cpu_stream = streamed_completion(cpu_single._server(("fp8", "fp8")).url)
    t = start_tandem(*cache_args(), *EMULATED)
    assert_on_the_emulated_device(t)
    got = run_wave(t.url, items, streams=set(range(0, len(items), 2)), workers=8)
    assert_identical(items, got, want)
    assert streamed_completion(t.url) == cpu_stream
    assert requests.get(t.url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("kind", ["inproc", "tcp", "nccl"])
def test_pd_on_the_emulated_device_equals_the_cpu_single(start_tandem, cpu_single, kind):
    """Both engines' pools on the (emulated) device. inproc (one process, one device): history
    pages go device to device — named by PAGE_SPANs, hashed by the device XXH3 where they lie,
    copied between the pools' arenas and hashed again where they landed — and the prefill holds
    the named pages until the decode side released them. tcp: every span is read out of the
    prefill pool, carried, written into the decode pool and checked there by the device XXH3.
    nccl (one process only over the emulation): history bytes go over the buffer channel — a
    loopback standing in for NCCL — announced by PAGE_BUFFER frames, held as for inproc, and
    checked by the device XXH3 where they landed."""
    items = make_workload(seed=43, sessions=4, generates=8)
    want = cpu_single(items)
    t = start_tandem(*cache_args(), *EMULATED, *pd_args(kind))
    assert_on_the_emulated_device(t)
    # Role both on one device: the decode engine reads the prefill engine's upload, no second copy.
    assert t.log.count("resident as stored") == 2, t.log
    assert t.log.count("resident as stored (shared with the other engine in this process") == 1, t.log
    before = scrape(t)
    got = run_wave(t.url, items, streams={1, 4}, workers=8)
    assert_identical(items, got, want)
    m = scrape(t)
    ok = m("tandem_pd_transfers_total", result="ok") - before("tandem_pd_transfers_total",
                                                               result="ok")
    assert ok >= len(items)
    assert m("tandem_pd_transfer_bytes_total") > 0
    assert m("tandem_pd_transfers_total", result="failed") == 0
    assert m("tandem_pd_checksum_failures_total") == 0
    copied = m("tandem_pd_spans_copied_total") - before("tandem_pd_spans_copied_total")
    if kind in ("inproc", "nccl"):
        assert copied >= ok, "history pages should have gone device to device / over the channel"
        assert m("tandem_pd_span_bytes_copied_total") > 0
        assert m("tandem_pd_spans_named_total") == m("tandem_pd_spans_copied_total")
    else:
        assert copied == 0 and m("tandem_pd_spans_named_total") == 0
    assert_idle_without_leaks(t)
    # Every hold was released by the decode side (none by the lease).
    assert settled_holds(t) == 0
    assert scrape(t)("tandem_pd_span_holds_expired_total") == 0


def settled_holds(t, timeout=10):
    deadline = time.time() + timeout
    while True:
        held = scrape(t)("tandem_pd_held_source_pages")
        if held == 0 or time.time() > deadline:
            return held
        time.sleep(0.05)


def test_pd_on_the_emulated_device_fails_clearly_under_corruption(start_tandem, cpu_single):
    """Corrupted frames over tcp: each answer is a clear error or exactly the CPU's; the decode's
    metrics show the corruption was caught; nothing leaks and the next wave is identical."""
    t = start_tandem(*cache_args(), *EMULATED, *pd_args(
        "tcp", transfer_timeout_ms=3000, abort_lease_ms=500, reconnect_min_ms=50,
        reconnect_max_ms=500, fault_seed=99, fault_corrupt_probability=0.01))
    items = make_workload(seed=47, sessions=4, generates=12)
    want = cpu_single(items)
    start = time.time()
    got = run_wave(t.url, items, streams=set(range(0, len(items), 3)), workers=8)
    assert time.time() - start < 240, "something waited without a deadline"
    assert_failed_clearly_or_identical(items, got, want)
    m = scrape(t)
    assert (m("tandem_pd_checksum_failures_total")
            + m("tandem_pd_decode_transport_frame_checksum_failures_total")
            + m("tandem_pd_decode_transport_malformed_links_total")) >= 1
    assert (m("tandem_pd_transfers_total", result="failed")
            + m("tandem_pd_aborts_total", cause="deadline")) >= 1
    wait_health(t, 200, 20)
    assert_idle_without_leaks(t)


@pytest.mark.parametrize("kind, length", [("window", 20), ("compressed_kv", 300)])
def test_corruption_landed_in_a_device_pool_is_caught_by_the_canary(start_tandem, kind, length):
    """The drill that flips bits in landed state after its checksums verified reaches a device
    pool only through its reader/writer; shadow verification (recomputing on the device
    executor) counts every request at path pd_transfer. window: a STATE_WRITE; compressed_kv:
    history that came device to device as PAGE_SPANs (prompts past a whole page)."""
    t = start_tandem(*cache_args(), *EMULATED, *pd_args("inproc"), *CHECK_ALL,
                     "--set", f"verify.fault_corrupt_kind={kind}")
    prompts = [[0] + [100 + 7 * i + j for j in range(length + 9 * i)] for i in range(2)]
    for p in prompts:
        r = requests.post(t.url + "/generate", timeout=120, json={
            "input_ids": p, "sampling_params": {"max_tokens": 6, "temperature": 0,
                                                "ignore_eos": True}})
        assert r.status_code == 200, r.text
    m = settled(t, len(prompts))
    assert m("tandem_verify_divergences_total", path="pd_transfer") == len(prompts)
    assert m("tandem_verify_divergences_total", path="plain") == 0
    assert m("tandem_pd_checksum_failures_total") == 0
    if kind == "compressed_kv":
        assert m("tandem_pd_spans_copied_total") > 0


def test_prefix_cache_and_host_tier_on_the_emulated_device(start_tandem):
    """Snapshots are read out of and restored into the device pool; the host tier writes pages
    through to host memory and loads them back (sentinel-filled destinations checked by the
    per-layer gate; every request end evicts to host, so every hit round-trips) — the tokens and
    logprobs of the CPU backend with the cache off."""
    seed = 8
    off = start_tandem(*tandem_args(False, "fp8"))
    expected = replay(off.url, seed)
    off.stop()
    on = start_tandem(*tandem_args(True, "fp8", EMULATED))
    assert_on_the_emulated_device(on)
    assert "prefix cache: on" in on.log
    got = replay(on.url, seed)
    for key in expected:
        assert got[key] == expected[key], f"{key} differs with the cache on (emulated device)"
    assert metric(on.url, "tandem_prefix_cache_hit_tokens_total") >= 4 * 128
    assert metric(on.url, "tandem_prefix_cache_snapshots") > 0
    assert metric(on.url, "tandem_prefix_cache_restore_failures_total") == 0
    on.stop()
    host = start_tandem(*tandem_args(True, "fp8", [*EMULATED, *HOST]))
    assert "host tier" in host.log and "TEST switches on" in host.log
    got = replay(host.url, seed)
    for key in expected:
        assert got[key] == expected[key], f"{key} differs with the host tier (emulated device)"
    assert metric(host.url, "tandem_prefix_cache_host_loaded_pages_total") >= 10
    assert metric(host.url, "tandem_prefix_cache_evicted_to_host_total") >= 10
    assert metric(host.url, "tandem_prefix_cache_restore_failures_total") == 0
    assert requests.get(host.url + "/health", timeout=10).status_code == 200
