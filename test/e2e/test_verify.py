"""Shadow verification, the silent-corruption canary (README "Shadow verification"), through the
real binary: a pd deployment whose decode side corrupts landed state after its checksums
verified (verify.fault_corrupt_kind) has every checked request counted as a divergence at path
pd_transfer on /metrics, logged with its request id, and shown as a warning on /health (still
200); a fault-free pd deployment under 64 concurrent clients checks every request and finds none.
"""
import requests

from pd_support import (
    assert_idle_without_leaks, cache_args, make_workload, pd_args, run_wave, scrape, wait_until)

CHECK_ALL = ["--set", "verify.sample_rate=1", "--set", "verify.max_inflight=256",
             "--set", "verify.max_tokens_per_second=0"]


def settled(t, sampled, timeout=120):
    """/metrics once `sampled` requests were sampled and no check is pending (the timeout only
    catches a verifier that stopped making progress)."""
    def done():
        m = scrape(t)
        return m if (m("tandem_verify_sampled_total") >= sampled
                     and m("tandem_verify_inflight") == 0) else None
    m = wait_until(done, timeout, 0.1)
    assert m, f"verification did not settle: {scrape(t).series}"
    return m


def test_corrupted_pd_transfer_is_caught_counted_logged_and_shown(start_tandem):
    t = start_tandem(*cache_args(), *pd_args("inproc"), *CHECK_ALL,
                     "--set", "verify.fault_corrupt_kind=window")
    prompts = [[0] + [100 + 7 * i + j for j in range(20 + 9 * i)] for i in range(4)]
    ids = []
    for i, p in enumerate(prompts):
        rid = f"canary-e2e-{i}"
        r = requests.post(t.url + "/generate", headers={"X-Request-Id": rid}, timeout=60,
                          json={"input_ids": p, "sampling_params": {
                              "max_tokens": 6, "temperature": 0, "ignore_eos": True}})
        assert r.status_code == 200, r.text  # the corruption is silent: the request "works"
        ids.append(rid)
    m = settled(t, len(prompts))
    assert m("tandem_verify_checks_total") == len(prompts)
    assert m("tandem_verify_divergences_total", path="pd_transfer") == len(prompts)
    for path in ("plain", "prefix_cache", "host_tier"):
        assert m("tandem_verify_divergences_total", path=path) == 0
    # Nothing in the transfer path saw it: every checksum verified.
    assert m("tandem_pd_checksum_failures_total") == 0
    r = requests.get(t.url + "/health", timeout=5)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert len(body["warnings"]) == 1 and "pd_transfer 4" in body["warnings"][0]
    assert "generated position 1" in body["warnings"][0]
    for rid in ids:
        t.wait_for_log(r"SILENT CORRUPTION: request " + rid + r" .*generated position 1 .*"
                       r"path pd_transfer: .*window", timeout=10)


def test_fault_free_pd_at_high_concurrency_has_no_divergence(start_tandem):
    t = start_tandem(*cache_args("bf16", "fp8"), *pd_args("tcp"), *CHECK_ALL)
    items = make_workload(seed=16, sessions=16, generates=48)  # 64 clients at once
    before = scrape(t)
    outcomes = run_wave(t.url, items)
    assert all(o[0] == "ok" for o in outcomes), [o for o in outcomes if o[0] != "ok"][:3]
    finished = scrape(t)("tandem_requests_finished_total") - before("tandem_requests_finished_total")
    m = settled(t, before("tandem_verify_sampled_total") + finished)
    assert m("tandem_verify_checks_total") == finished  # every request checked, none skipped
    assert m("tandem_verify_skipped_total") == 0
    assert m("tandem_verify_divergences_total") == 0
    assert m("tandem_verify_tokens_recomputed_total") > 0
    assert "warnings" not in requests.get(t.url + "/health", timeout=5).json()
    assert_idle_without_leaks(t)
