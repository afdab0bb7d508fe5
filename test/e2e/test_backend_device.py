"""backend.device as a user meets it: "auto" serves and says why it chose the CPU; "cuda" without a
usable GPU (CI) refuses at startup with a message naming the key and the reason."""
from conftest import MODEL_DIR, run_tandem


def test_cuda_refuses_at_startup_naming_the_key():
    r = run_tandem("--port", "0", "--model", str(MODEL_DIR), "--set", "backend.device=cuda", timeout=120)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert 'backend.device = "cuda"' in out, out
    assert "no GPU can be used" in out or "no CUDA forward" in out, out


def test_auto_serves_on_the_cpu_and_logs_why(start_tandem):
    s = start_tandem("--set", "backend.device=auto")
    line = s.wait_for_log(r"backend: cpu \(auto: CPU.*").group(0)
    assert "because" in line
    assert s.proc.poll() is None  # still serving
