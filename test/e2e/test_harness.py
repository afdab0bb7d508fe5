"""The load and verification harness (bench/harness/) on the tiny model, as an operator runs it:
`verify` starts single and pd itself and must FAIL when the pd side decodes from corrupted state
(verify.fault_corrupt_kind: bits flipped after the checksums verified), naming the first
divergent turn and token of each session; `run` against a fault-free pd with single as the
reference must PASS with every greedy turn compared (through the native API, folding ids into a
smaller vocabulary as the `small` preset needs), and its result.json re-plots."""
import json
import subprocess
import sys

from conftest import BIN, MODEL_DIR, ROOT
from pd_support import cache_args, pd_args

HARNESS = ROOT / "bench" / "harness" / "harness.py"
SMALL = ["--sessions", "4", "--min-steps", "2", "--max-steps", "3", "--min-tokens", "6",
         "--max-tokens", "10", "--system-words", "40", "--no-progress"]


def harness(*args, timeout=300):
    return subprocess.run([sys.executable, str(HARNESS), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_verify_mode_catches_an_injected_divergence(tmp_path):
    out = tmp_path / "verify"
    p = harness("verify", "--model", str(MODEL_DIR), "--binary", str(BIN), "--concurrency", "2",
                "--seed", "3", "--cancel-probability", "0", "--out", str(out), *SMALL,
                "--set", "cache.memory_bytes=268435456",
                "--pd-set", "verify.fault_corrupt_kind=window")
    assert p.returncode == 1, p.stdout + p.stderr
    verdict = p.stdout.strip().splitlines()[-1]
    assert verdict.startswith("FAIL: pd vs single"), p.stdout
    doc = json.loads((out / "result.json").read_text())
    level = doc["levels"][0]
    pd = level["pd"]
    assert pd["outcomes"]["failed"] == 0 and pd["outcomes"]["rejected"] == 0
    assert pd["compared_turns"] > 0
    # Every compared turn decoded from a corrupted window: each diverges, at token 1 — token 0
    # was sampled by the prefill engine from its own intact state.
    assert pd["divergent_turns"] == pd["compared_turns"]
    firsts = pd["first_divergences"]
    assert len(firsts) == pd["divergent_sessions"] == pd["sessions"]
    assert all(d["against"] == "reference" and d["token"] == 1 for d in firsts), firsts
    assert f"divergence {pd['divergent_turns']}/{pd['compared_turns']}" in verdict
    # The servers' /metrics deltas are recorded; the single reference did its own turns.
    assert level["metrics_deltas"]["pd"]["tandem_requests_finished_total"] >= pd["turns"]
    assert level["single"]["outcomes"]["ok"] == pd["compared_turns"]
    for png in ("latency_cdf.png", "throughput.png", "divergence_by_concurrency.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_mode_fault_free_pd_matches_single(start_tandem, tmp_path):
    single = start_tandem(*cache_args())
    pd = start_tandem(*cache_args(), *pd_args("inproc"))
    out = tmp_path / "run"
    # Through the native API this time (--vocab: what models smaller than the tokenizer need).
    p = harness("run", "--url", pd.url, "--reference-url", single.url, "--concurrency", "4",
                "--seed", "5", "--vocab", "32768", "--out", str(out), *SMALL)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("VERDICT: target @4, divergence 0/")
    s = json.loads((out / "result.json").read_text())["summary"]
    assert s["divergent_turns"] == 0 and s["outcomes"]["failed"] == 0
    assert s["compared_turns"] == s["outcomes"]["ok"] > 0  # every finished turn was compared
    assert s["ttft_ms"]["n"] > 0 and s["throughput_tok_s"] > 0
    # The result keeps every turn, so the plots can be re-drawn from it.
    p = harness("plot", str(out / "result.json"), "--out", str(tmp_path / "replot"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "replot" / "latency_cdf.png").read_bytes()[:4] == b"\x89PNG"
