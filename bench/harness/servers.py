"""Starting tandem servers for the harness's `verify` mode: a topology on a model, on a free
loopback port, its log in a file, stopped with SIGTERM (then SIGKILL) when done."""
import re
import signal
import subprocess
import time
from pathlib import Path

import requests

LISTEN_RE = re.compile(r"listening on http://([^:\s]+):(\d+)")


class Server:
    def __init__(self, binary, model, topology, extra_sets, log_path, extra_args=()):
        self.name = topology
        self.log_path = Path(log_path)
        self.args = [str(binary), "--model", str(model), "--port", "0", "--topology", topology,
                     *extra_args]
        for kv in extra_sets:
            self.args += ["--set", kv]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = None

    def wait_ready(self, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited with {self.proc.returncode}; "
                                   f"log: {self.log_path}\n{self.log_path.read_text()[-2000:]}")
            if self.url is None:
                m = LISTEN_RE.search(self.log_path.read_text())
                if m:
                    self.url = f"http://127.0.0.1:{m.group(2)}"
            if self.url:
                try:
                    if requests.get(self.url + "/health", timeout=5).status_code == 200:
                        return self
                except requests.RequestException:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} server not healthy within {timeout}s; log: {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def log_lines(server, pattern):
    return [line for line in server.log_path.read_text().splitlines() if re.search(pattern, line)]
