"""The benchmark binaries: each answers --help without running, and the kernel benchmark's short
run prints every weight form with its ratios, the paired one included (issue #12 item 7 and the
paired bandwidth baseline of bench/model/machine_limits.h). No verdict here depends on speed:
only that the figures exist, are finite and positive."""
import math
import os
import re
import subprocess

import pytest

from conftest import BIN, MODEL_DIR

BENCH = BIN.parent / "bench"
BINARIES = ["model/bench_model_cpu", "model/bench_kernels", "model/bench_moe_stream", "pd/bench_pd_transfer",
            "cache/bench_host_tier", "engine/bench_scheduler_overhead", "grammar/bench_grammar_mask",
            "text/bench_text_tokenizer", "cuda/bench_cuda_bandwidth", "cuda/bench_cuda_decode"]


@pytest.mark.parametrize("name", BINARIES)
def test_bench_binary_answers_help_without_running(name):
    path = BENCH / name
    if not path.exists():
        pytest.skip(f"{path} is not built")
    r = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower()
    # Help only: no baseline or figure was measured.
    assert "baseline:" not in r.stdout


def test_bench_kernels_prints_every_form_with_a_paired_bandwidth_ratio():
    path = BENCH / "model" / "bench_kernels"
    if not path.exists():
        pytest.skip(f"{path} is not built")
    r = subprocess.run([str(path), "--rounds", "2", "--gemv-mib", "8", "--rows", "16", "--cols", "256",
                        "--threads", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "K 256" in r.stdout
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(f32|bf16|f16|fp8_e4m3|fp4_e2m1)\s+(exact|amx)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", line)
        if m:
            assert m.group(2) == "exact", line  # the tiles only with --cpu-matmul amx
            rows[m.group(1)] = [float(v) for v in m.groups()[2:]]
    assert set(rows) == {"f32", "bf16", "f16", "fp8_e4m3", "fp4_e2m1"}, r.stdout
    for form, figures in rows.items():
        assert all(math.isfinite(v) and v > 0 for v in figures), (form, figures)
    assert "median over 2 rounds" in r.stdout


def test_bench_kernels_refuses_amx_where_the_tiles_cannot_run_and_a_bad_value():
    path = BENCH / "model" / "bench_kernels"
    if not path.exists():
        pytest.skip(f"{path} is not built")
    # TANDEM_CPU_KERNELS pins the exact kernels, as on a CPU without AMX (the CI machines).
    r = subprocess.run([str(path), "--cpu-matmul", "amx"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TANDEM_CPU_KERNELS": "avx2"})
    assert r.returncode == 2
    assert "AMX-BF16" in r.stderr, r.stderr
    r = subprocess.run([str(path), "--cpu-matmul", "fast"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--cpu-matmul: want exact or amx, not fast" in r.stderr, r.stderr


def test_bench_kernels_refuses_columns_it_cannot_measure():
    path = BENCH / "model" / "bench_kernels"
    if not path.exists():
        pytest.skip(f"{path} is not built")
    r = subprocess.run([str(path), "--cols", "100"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "usage" in r.stderr


def test_bench_model_cpu_prints_the_batch_step_against_its_roofline_floor():
    # The floor line's figures agree with each other and with the measured tok/s printed above it:
    # floor tok/s ÷ batch-1 tok/s is the printed multiple, batch-B tok/s ÷ floor the printed share.
    path = BENCH / "model" / "bench_model_cpu"
    if not path.exists():
        pytest.skip(f"{path} is not built")
    r = subprocess.run([str(path), "--model", str(MODEL_DIR), "--rounds", "1", "--prompt", "16", "--decode", "4",
                        "--batch", "4", "--context", "16", "--threads", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    one = re.search(r"^decode batch 1 \(context 16\): ([\d.]+) tok/s", r.stdout, re.M)
    four = re.search(r"^decode batch 4 \(context 16\): ([\d.]+) tok/s", r.stdout, re.M)
    floor = re.search(r"^decode batch 4 at its roofline floor .*?: ([\d.]+) tok/s = ([\d.]+) x the measured batch 1 "
                      r"\(which read its weights at ([\d.]+) of the read bandwidth\); measured = ([\d.]+) of it$",
                      r.stdout, re.M)
    assert one and four and floor, r.stdout
    b1, b4 = float(one.group(1)), float(four.group(1))
    floor_tps, multiple, _, share = (float(v) for v in floor.groups())
    assert all(math.isfinite(v) and v > 0 for v in (b1, b4, floor_tps, multiple, share)), r.stdout
    assert multiple == pytest.approx(floor_tps / b1, rel=0.01, abs=0.006)  # printed to 2 decimals
    assert share == pytest.approx(b4 / floor_tps, rel=0.02, abs=0.006)
    assert "decode batch 4 ceiling:" in r.stdout
