"""A server binary run by a test (Prometheus, VictoriaMetrics): its process and log, a readiness
wait that polls with a deadline (no fixed sleeps) and notices the process dying, and a stop."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import requests


class LocalServer:
    name = "server"

    def _start(self, argv: list[str], log: Path) -> None:
        self.log = open(log, "w")  # noqa: SIM115 - open for the server's life, closed by stop()
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_for(self, check, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}); see {self.log.name}")
            try:
                if check():
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:g} s for {what}; see {self.log.name}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
