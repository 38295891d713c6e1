"""A real single-node VictoriaMetrics (Debian's ``victoria-metrics``) for tests: private data
directory, a free 127.0.0.1 port, fed through its own Prometheus-text import endpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import requests

from tests.helpers.local_server import LocalServer
from tests.helpers.prometheus_rig import free_port


def have_victoria_metrics() -> bool:
    return shutil.which("victoria-metrics") is not None


class VictoriaRig(LocalServer):
    name = "victoria-metrics"

    def __init__(self, workdir: Path, *, ready_timeout_s: float = 60.0, flags: tuple[str, ...] = ()):
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._start(["victoria-metrics", f"-httpListenAddr=127.0.0.1:{self.port}",
                     f"-storageDataPath={self.workdir / 'vm-data'}", "-retentionPeriod=100y",
                     "-search.disableCache", "-search.latencyOffset=0s", *flags],
                    self.workdir / "victoria-metrics.log")
        self.wait_for(lambda: requests.get(f"{self.url}/health", timeout=1).status_code == 200,
                      ready_timeout_s, "victoria-metrics ready")

    def import_prometheus_text(self, lines) -> None:
        """Prometheus exposition lines with millisecond timestamps, through /api/v1/import/prometheus."""
        body = "".join(lines).encode()
        r = requests.post(f"{self.url}/api/v1/import/prometheus", data=body, timeout=120)
        r.raise_for_status()

    def flush(self) -> None:
        requests.get(f"{self.url}/internal/force_flush", timeout=60).raise_for_status()
