"""The command line and the configuration file, as a user meets them."""
import pytest
import tomllib

from conftest import ROOT, run_tandem


def test_help_documents_every_section_and_flag():
    r = run_tandem("--help")
    assert r.returncode == 0
    for word in ["--config", "--topology", "--model", "--host", "--port", "--set", "--print-config",
                 "[server]", "[model]", "[cache]", "[scheduler]", "[topology]", "[transport]",
                 "[logging]", "kv_dtype", "index_k_dtype"]:
        assert word in r.stdout, word


def test_print_config_shows_effective_values_and_round_trips(tmp_path):
    r = run_tandem("--config", "etc/tandem.toml", "--port", "9123", "--topology", "pd",
                   "--set", "cache.page_size=512", "--print-config")
    assert r.returncode == 0, r.stderr
    cfg = tomllib.loads(r.stdout)
    assert cfg["server"]["port"] == 9123
    assert cfg["topology"]["mode"] == "pd"
    assert cfg["cache"]["page_size"] == 512
    path = tmp_path / "printed.toml"
    path.write_text(r.stdout)
    again = run_tandem("--config", str(path), "--print-config")
    assert again.returncode == 0 and again.stdout == r.stdout


def test_unknown_key_fails_at_startup_naming_key_and_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = 8000\n[cache]\nkv_dtpye = \"fp8\"\n")
    r = run_tandem("--config", str(bad))
    assert r.returncode == 2
    assert f"{bad}:4" in r.stderr
    assert "cache.kv_dtpye" in r.stderr
    assert "did you mean 'cache.kv_dtype'" in r.stderr


def test_wrong_type_and_out_of_range_values_exit_2(tmp_path):
    cases = {
        "[server]\nport = \"eighty\"\n": "server.port",
        "[server]\nport = 99999\n": "out of range",
        "[cache]\npage_size = 200\n": "multiple of 128",
        "[topology]\nmode = \"triple\"\n": "topology.mode",
        "[logging]\naccess_log = 1\n": "logging.access_log",
    }
    for text, needle in cases.items():
        path = tmp_path / "c.toml"
        path.write_text(text)
        r = run_tandem("--config", str(path))
        assert r.returncode == 2, text
        assert needle in r.stderr, (text, r.stderr)


def test_bad_flags_exit_2():
    assert run_tandem("--frobnicate").returncode == 2
    r = run_tandem("--set", "server.nope=1")
    assert r.returncode == 2 and "server.nope" in r.stderr
    assert run_tandem("--config", "/nonexistent.toml").returncode == 2


def test_shipped_config_is_the_embedded_default():
    shipped = run_tandem("--config", str(ROOT / "etc" / "tandem.toml"), "--print-config")
    builtin = run_tandem("--print-config")
    assert shipped.returncode == builtin.returncode == 0
    assert shipped.stdout == builtin.stdout


def test_version_names_allocator():
    r = run_tandem("--version")
    assert r.returncode == 0 and "tandem" in r.stdout and "allocator" in r.stdout


@pytest.mark.parametrize("args, key", [
    (["--role", "prefill"], "topology.mode"),
    (["--topology", "pd", "--role", "decode"], "transport.kind"),
    (["--topology", "pd", "--role", "decode", "--set", "transport.kind=tcp"], "transport.peers"),
    (["--topology", "pd", "--set", "transport.kind=nccl"], "nccl"),
])
def test_pd_misconfigurations_are_startup_errors_naming_the_keys(args, key):
    r = run_tandem(*args)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr


def test_print_config_validates_like_serving():
    for args in (["--role", "prefill"], ["--topology", "pd", "--set", "transport.kind=nccl"]):
        r = run_tandem(*args, "--print-config")
        assert r.returncode == 2 and r.stdout == "", (args, r.stdout)
        assert "topology" in r.stderr or "nccl" in r.stderr, r.stderr


def test_served_name_defaults_to_the_model_directory_name():
    for path, name in [("models/tiny", "tiny"), ("/data/DeepSeek-V4-Flash/", "DeepSeek-V4-Flash")]:
        r = run_tandem("--model", path, "--print-config")
        assert r.returncode == 0, r.stderr
        assert tomllib.loads(r.stdout)["model"]["served_name"] == name
    r = run_tandem("--model", "models/tiny", "--set", "model.served_name=mine", "--print-config")
    assert tomllib.loads(r.stdout)["model"]["served_name"] == "mine"
