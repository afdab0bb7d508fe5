"""Fixtures that run the real tandem binary on a free loopback port and talk HTTP to it."""
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
BIN = Path(os.environ.get("TANDEM_BIN", ROOT / "build" / "tandem"))
LISTEN_RE = re.compile(r"listening on http://([^:\s]+):(\d+)")


class TandemServer:
    """One tandem process. Its stderr is collected on a thread so the pipe never fills."""

    def __init__(self, args, cwd=ROOT):
        self.args = [str(BIN), "--port", "0", *args]
        self.proc = subprocess.Popen(self.args, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.port = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))
                self._listening.set()

    @property
    def log(self):
        return "".join(self.lines)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def wait_listening(self, timeout=30):
        if not self._listening.wait(timeout):
            self.kill()
            raise AssertionError(f"tandem did not start listening:\n{self.log}")
        return self

    def wait_healthy(self, timeout=120):
        self.wait_listening(timeout)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"tandem exited with {self.proc.returncode}:\n{self.log}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError(f"/health never turned 200:\n{self.log}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
            self._reader.join(5)  # the last log lines, written just before exit
            return rc
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"tandem did not exit within {timeout}s of {sig!r}:\n{self.log}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_tandem():
    """start_tandem(*args) → a healthy TandemServer; every one is stopped after the test."""
    servers = []

    def start(*args, healthy=True):
        s = TandemServer(list(args))
        servers.append(s)
        return s.wait_healthy() if healthy else s

    yield start
    for s in servers:
        s.kill()


def run_tandem(*args, timeout=60):
    """Runs tandem to completion (for --help, --print-config, bad configs)."""
    return subprocess.run([str(BIN), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
