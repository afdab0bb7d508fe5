"""`tandem plan`: capacity planning from config.json alone, for DeepSeek-V4 Flash and Pro."""
import itertools
import json

import pytest

from conftest import ROOT, run_tandem

CONFIGS = ROOT / "test" / "golden" / "model" / "configs"
INDEX_K_ROW = {"fp8": 132, "bf16": 256, "fp4": 68}
KV_ROW = {"fp8": 584, "bf16": 1024}
# History bytes per token at fp8 + fp8 (design: ~3850 for Flash, ~5511 for Pro).
FP8_BYTES_PER_TOKEN = {"deepseek-v4-flash.json": 3850.25, "deepseek-v4-pro.json": 5511.4375}


def plan(model, kv, idx, *extra):
    r = run_tandem("plan", "--json", "--model", str(CONFIGS / model),
                   "--set", f"cache.kv_dtype={kv}", "--set", f"cache.index_k_dtype={idx}",
                   "--set", "cache.memory_bytes=68719476736", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", sorted(FP8_BYTES_PER_TOKEN))
@pytest.mark.parametrize("kv,idx", list(itertools.product(KV_ROW, INDEX_K_ROW)))
def test_row_and_page_sizes_follow_the_dtypes(model, kv, idx):
    p = plan(model, kv, idx)
    kinds = p["buffer_kinds"]
    assert kinds["index_k"]["bytes_per_row"] == INDEX_K_ROW[idx]
    assert kinds["index_k"]["rows_per_page"] == 64  # 256-token page, one row per 4 tokens
    assert kinds["index_k"]["bytes_per_page"] == 64 * INDEX_K_ROW[idx]
    for kind in ("compressed_kv_csa", "compressed_kv_hca"):
        assert kinds[kind]["bytes_per_row"] == KV_ROW[kv]
        assert kinds[kind]["bytes_per_page"] == kinds[kind]["rows_per_page"] * KV_ROW[kv]
    assert kinds["compressed_kv_hca"]["rows_per_page"] == 2  # one row per 128 tokens
    assert len(p["fingerprint"]) == 16
    # Per token: CSA layers hold kv + index-K per 4 tokens, HCA layers kv per 128 tokens.
    csa, hca = kinds["compressed_kv_csa"]["layers"], kinds["compressed_kv_hca"]["layers"]
    expected = csa * (KV_ROW[kv] + INDEX_K_ROW[idx]) / 4 + hca * KV_ROW[kv] / 128
    assert p["bytes_per_token"] == pytest.approx(expected)


@pytest.mark.parametrize("model", sorted(FP8_BYTES_PER_TOKEN))
def test_fp8_bytes_per_token_and_distinct_fingerprints(model):
    p = plan(model, "fp8", "fp8")
    assert p["bytes_per_token"] == pytest.approx(FP8_BYTES_PER_TOKEN[model])
    prints = {plan(model, kv, idx)["fingerprint"] for kv in KV_ROW for idx in INDEX_K_ROW}
    assert len(prints) == len(KV_ROW) * len(INDEX_K_ROW)  # peers with any dtype mismatch differ


def test_budget_is_reported_and_text_mode_prints_a_summary():
    p = plan("deepseek-v4-flash.json", "fp8", "fp8")
    assert p["budget"]["memory_bytes"] == 68719476736
    assert p["budget"]["tokens"] > 0 and p["budget"]["sequence_slots"] > 0
    r = run_tandem("plan", "--model", str(CONFIGS / "deepseek-v4-flash.json"),
                   "--set", "cache.kv_dtype=fp8", "--set", "cache.index_k_dtype=fp8")
    assert r.returncode == 0 and "3850.25" in r.stdout and "index_k" in r.stdout


def test_plan_prints_what_the_host_tier_and_snapshot_budget_hold():
    host = 64 << 30
    p = plan("deepseek-v4-flash.json", "fp8", "fp8", "--set", f"cache.host_memory_bytes={host}",
             "--set", "cache.snapshot_memory_bytes=1073741824")
    pc = p["prefix_cache"]
    # Whole pages of every layer and kind; alignment padding costs less than one page.
    assert pc["host_pages"] * p["bytes_per_page"] <= host < (pc["host_pages"] + 1) * p["bytes_per_page"]
    assert pc["host_tokens"] == pc["host_pages"] * p["page_size"]
    assert 17_000_000 < pc["host_tokens"] < 18_500_000  # spec §5.2: ~17.8 M tokens in 64 GiB
    assert pc["snapshots"] == 1073741824 // p["snapshot"]["bytes"]
    r = run_tandem("plan", "--model", str(CONFIGS / "deepseek-v4-flash.json"),
                   "--set", "cache.kv_dtype=fp8", "--set", "cache.index_k_dtype=fp8",
                   "--set", f"cache.host_memory_bytes={host}")
    assert r.returncode == 0 and f"{pc['host_tokens']} tokens of history" in r.stdout
    off = plan("deepseek-v4-flash.json", "fp8", "fp8")
    assert off["prefix_cache"]["host_pages"] == 0


def test_plan_errors_name_the_problem(tmp_path):
    r = run_tandem("plan", "--model", str(tmp_path / "missing"))
    assert r.returncode == 2 and "missing" in r.stderr
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "deepseek_v4"}')
    r = run_tandem("plan", "--model", str(tmp_path))
    assert r.returncode == 2 and ("hidden_size" in r.stderr or "config.json" in r.stderr)


def test_a_budget_that_does_not_fit_is_reported_not_refused():
    """Flash with the default 1 GiB and 64 running requests: the plan, then what would fit."""
    flash = str(CONFIGS / "deepseek-v4-flash.json")
    r = run_tandem("plan", "--model", flash)
    assert r.returncode == 0, r.stderr
    assert "index_k" in r.stdout and "DOES NOT FIT" in r.stdout
    p = json.loads(run_tandem("plan", "--json", "--model", flash).stdout)
    assert p["budget"]["fits"] is False and p["budget"]["sequence_slots"] == 0
    text = p["budget"]["does_not_fit"]
    slots = int(text.split("max_running_requests <= ")[1].split(";")[0])
    need = int(text.split("cache.memory_bytes >= ")[1].split(" ")[0])
    # Both suggestions are exact: they fit, and one less does not.
    for extra, fits in [(["--set", f"scheduler.max_running_requests={slots}"], True),
                        (["--set", f"scheduler.max_running_requests={slots + 1}"], False),
                        (["--set", f"cache.memory_bytes={need}"], True),
                        (["--set", f"cache.memory_bytes={need - 1}"], False)]:
        q = json.loads(run_tandem("plan", "--json", "--model", flash, *extra).stdout)
        assert q["budget"]["fits"] is fits, (extra, q["budget"])


def test_plan_reports_the_step_buffers_and_memory_fraction_leaves_them_room():
    """The CPU forward's step buffers at the largest step the scheduler can build: reported beside
    an explicit cache.memory_bytes, taken out of MemAvailable before cache.memory_fraction."""
    flash = str(CONFIGS / "deepseek-v4-flash.json")

    def step_buffers(*extra):
        r = run_tandem("plan", "--json", "--model", flash, "--set", "cache.kv_dtype=fp8",
                       "--set", "cache.index_k_dtype=fp8", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    fixed = step_buffers("--set", "cache.memory_bytes=68719476736",
                         "--set", "scheduler.max_prefill_tokens=2048", "--set", "scheduler.max_running_requests=64")
    b = fixed["step_buffers"]
    assert b["reserved"] is False and b["tokens"] == 2048 + 64 and b["sequences"] == 64
    assert b["bytes"] == b["activations"] + b["context"] + b["logits"] + b["per_thread"]
    # A row per sequence plus scheduler.max_prompt_logprob_tokens (256) prompt-logprob rows, fp32,
    # once: the head writes them into the engine's step output (there used to be two more copies,
    # and every row of the step counted); and the shadow verifier's chunk (on by default: 32 rows).
    rows = 64 + 256 + 32
    assert 4 * rows * 129280 <= b["logits"] < 4 * rows * 129280 + 16 * rows
    more = step_buffers("--set", "cache.memory_bytes=68719476736", "--set", "scheduler.max_prefill_tokens=2048",
                        "--set", "scheduler.max_running_requests=64", "--set", "scheduler.max_prompt_logprob_tokens=1024")
    assert more["step_buffers"]["logits"] - b["logits"] >= 4 * 768 * 129280
    # Shadow verification's own step output: a chunk's every row, counted only while it is on.
    verifying, off = (step_buffers("--set", "cache.memory_bytes=68719476736", "--set", "scheduler.max_prefill_tokens=2048",
                                   "--set", "scheduler.max_running_requests=64", "--set", f"verify.sample_rate={rate}",
                                   "--set", "verify.max_chunk_tokens=1024")["step_buffers"]["logits"] for rate in (0.5, 0))
    assert verifying - off >= 4 * 1024 * 129280 and off == b["logits"] - (4 * 32 * 129280 + 8 * 32)
    # ~0.85 MB of activations per token at Flash's widths (measured on flash-slice: 0.8-0.9).
    assert 0.7e6 < b["activations"] / b["tokens"] < 1.1e6
    half = step_buffers("--set", "cache.memory_bytes=68719476736",
                        "--set", "scheduler.max_prefill_tokens=1024", "--set", "scheduler.max_running_requests=64")
    assert half["step_buffers"]["activations"] < 0.6 * b["activations"]
    # Twice the pool: the context term grows only by the compressed rows' slot map (4 B per CSA
    # row); the indexer's rows are decoded a chunk at a time per thread, not the whole context (they
    # were Di x 4 B per CSA row: +2.1 GiB here).
    double = step_buffers("--set", "cache.memory_bytes=137438953472",
                          "--set", "scheduler.max_prefill_tokens=2048", "--set", "scheduler.max_running_requests=64")
    extra_tokens = double["step_buffers"]["context_tokens"] - b["context_tokens"]
    assert extra_tokens > 10_000_000
    csa_rows = extra_tokens // 4  # compress rate 4
    assert double["step_buffers"]["context"] - b["context"] <= 4 * csa_rows + 4096

    frac = step_buffers("--set", "cache.memory_bytes=0", "--set", "cache.memory_fraction=0.5")
    assert frac["step_buffers"]["reserved"] is True and frac["step_buffers"]["bytes"] > 0
    r = run_tandem("plan", "--model", flash, "--set", "cache.memory_bytes=0", "--set", "cache.memory_fraction=0.5")
    assert "taken out of MemAvailable before cache.memory_fraction" in r.stdout
    # A machine whose available memory the step buffers alone exceed: a startup error naming the keys.
    huge = run_tandem("plan", "--model", flash, "--set", "cache.memory_bytes=0", "--set", "cache.memory_fraction=0.5",
                      "--set", "scheduler.max_prefill_tokens=16000000")
    assert huge.returncode == 2 and "scheduler.max_prefill_tokens" in huge.stderr, huge.stderr


def test_pd_in_one_process_splits_a_memory_fraction_between_its_two_engines():
    """pd with role both runs two engines, each with a pool and step buffers: a fraction of the
    memory is split between them (it used to be given to each); cache.memory_bytes stays each one's."""
    flash = str(CONFIGS / "deepseek-v4-flash.json")

    def budget(*extra):
        r = run_tandem("plan", "--json", "--model", flash, "--set", "cache.kv_dtype=fp8",
                       "--set", "cache.index_k_dtype=fp8", "--set", "scheduler.max_prefill_tokens=256",
                       "--set", "scheduler.max_running_requests=4", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["budget"]

    single = budget("--set", "cache.memory_bytes=0", "--set", "cache.memory_fraction=0.5")
    pd = budget("--set", "cache.memory_bytes=0", "--set", "cache.memory_fraction=0.5", "--set", "topology.mode=pd")
    assert single["engines"] == 1 and pd["engines"] == 2
    # MemAvailable moves a little between the two runs; the split is a factor of two.
    assert 0.4 * single["memory_bytes"] < pd["memory_bytes"] < 0.55 * single["memory_bytes"]
    fixed = budget("--set", "cache.memory_bytes=4294967296", "--set", "topology.mode=pd")
    assert fixed["engines"] == 2 and fixed["memory_bytes"] == 4294967296
    r = run_tandem("plan", "--model", flash, "--set", "cache.memory_bytes=4294967296", "--set", "topology.mode=pd")
    assert "2 engines in this process" in r.stdout
