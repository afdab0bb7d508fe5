"""backend.cpu_matmul = "amx" as a user meets it: where this process cannot run AMX-BF16 tiles it
refuses at startup naming the key; where it can (an AMX CPU; skipped elsewhere), a BF16 model and an
FP8 + FP4 model are served on the tiles, and the invariant that matters — the same greedy tokens whatever the topology
and the batch — holds within that mode (its bits differ from the exact kernels', so it is compared
with itself, never with "exact")."""
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import MODEL_DIR, ROOT, run_tandem
from pd_support import pd_args


def amx_cpu():
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return " amx_bf16" in flags and " amx_tile" in flags


def test_amx_is_refused_at_startup_where_the_tiles_cannot_run():
    # TANDEM_CPU_KERNELS pins the exact kernels, as on a CPU without AMX (the CI machines).
    r = run_tandem("--port", "0", "--model", str(MODEL_DIR), "--set", "backend.cpu_matmul=amx",
                   timeout=120, env={"TANDEM_CPU_KERNELS": "avx2"})
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert 'backend.cpu_matmul = "amx"' in out, out
    assert "AMX-BF16" in out, out


def test_a_bad_cpu_matmul_value_names_the_key():
    r = run_tandem("--port", "0", "--model", str(MODEL_DIR), "--set", "backend.cpu_matmul=fast")
    assert r.returncode != 0
    assert "backend.cpu_matmul" in r.stdout + r.stderr


@pytest.fixture(scope="module", params=["tiny-bf16", "tiny-fp8"])
def tile_model(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("amx") / request.param
    r = run_tandem("make-model", "--preset", request.param, "--seed", "4", "--out", str(out),
                   "--tokenizer", str(ROOT / "models" / "tokenizer"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


PROMPTS = [f"request {i}: the quick brown fox number {i * 7} jumps over" for i in range(6)]


def greedy(url, prompt):
    r = requests.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 12,
                                                    "temperature": 0, "logprobs": 1}, timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["text"], choice["logprobs"]["token_logprobs"]


@pytest.mark.skipif(not amx_cpu(), reason="needs a CPU with AMX-BF16 tiles")
def test_amx_serves_the_same_tokens_in_single_and_pd_alone_and_batched(start_tandem, tile_model):
    amx = ["--model", str(tile_model), "--set", "backend.cpu_matmul=amx"]
    single = start_tandem(*amx)
    assert "FP4 matrices on AMX tiles" in single.log, single.log
    assert "multiplied on AMX tiles" in single.log, single.log
    alone = [greedy(single.url, p) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # batched with each other
        batched = list(pool.map(lambda p: greedy(single.url, p), PROMPTS))
    assert batched == alone
    pd = start_tandem(*amx, *pd_args("inproc"))
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        through_pd = list(pool.map(lambda p: greedy(pd.url, p), PROMPTS))
    assert through_pd == alone
    assert requests.get(f"{pd.url}/health", timeout=10).status_code == 200
