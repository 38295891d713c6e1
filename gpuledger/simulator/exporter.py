"""Live dcgm-exporter endpoints: one HTTP server per simulated node serving ``/metrics``.

Values are those of the simulated clock's "now" (floored to the sample interval), so a Prometheus
scraping these endpoints stores exactly what ``gpuledger simulate warehouse`` writes for the same
seconds (scrape gaps excepted: a live endpoint always answers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpuledger.simulator.exposition import metrics_page
from gpuledger.simulator.scenario import SimCluster, to_epoch_s

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SimClock:
    """Simulated time: ``sim_start`` (naive UTC; default: now) advancing ``speed`` times wall time.

    Calling it returns epoch seconds (float).

    ``catch_up``: never ahead of the wall clock — a start in the past fast-forwarded at ``speed``
    runs at real time once it reaches now (samples stamped with it stay scrapeable: a scraper
    refuses sample times minutes in the future).
    """

    def __init__(self, sim_start: datetime | None = None, speed: float = 1.0, *, catch_up: bool = False):
        self._wall0 = time.time()
        self._sim0 = float(to_epoch_s(sim_start)) if sim_start else self._wall0
        self.speed = speed
        self.catch_up = catch_up

    def __call__(self) -> float:
        wall = time.time()
        sim = self._sim0 + (wall - self._wall0) * self.speed
        return min(sim, wall) if self.catch_up else sim


def fixed_clock(moment: datetime | float) -> Callable[[], float]:
    """A clock that always reads ``moment`` (naive UTC datetime or epoch seconds); for tests."""
    value = float(to_epoch_s(moment)) if isinstance(moment, datetime) else float(moment)
    return lambda: value


@dataclass
class Exporters:
    """Running endpoints: ``urls[i]`` serves node ``nodes[i]``; ``stop()`` shuts them all down."""

    urls: list[str]
    nodes: list[int]
    _servers: list[ThreadingHTTPServer] = field(default_factory=list, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)

    def stop(self) -> None:
        # shutdown() waits up to one poll (0.5 s) for its loop: all at once, so 32 nodes stop in
        # half a second, not sixteen
        stoppers = [threading.Thread(target=server.shutdown, daemon=True) for server in self._servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(timeout=5)
        for server in self._servers:
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> Exporters:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _handler(sim: SimCluster, node: int, clock: Callable[[], float], timestamps: bool = False):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = metrics_page(sim, node, int(clock()), timestamps=timestamps).encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # keep test and CLI output clean
            pass

    return Handler


def start_exporters(
    sim: SimCluster,
    port: int = 9400,
    clock: Callable[[], float] | None = None,
    *,
    host: str = "127.0.0.1",
    nodes: Iterable[int] | None = None,
    timestamps: bool = False,
) -> Exporters:
    """Start one ``/metrics`` server per node on ``host``: ports ``port``, ``port+1``, ...
    (``port=0``: any free ports). ``clock`` returns epoch seconds; default: wall clock.
    ``timestamps``: sample lines carry the simulated time (ms), see ``metrics_page``."""
    clock = clock or SimClock()
    chosen = list(range(len(sim.hardware.node_host))) if nodes is None else list(nodes)
    handle = Exporters(urls=[], nodes=chosen)
    try:
        for i, node in enumerate(chosen):
            server = ThreadingHTTPServer((host, 0 if port == 0 else port + i), _handler(sim, node, clock, timestamps))
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name=f"dcgm-sim-{node}", daemon=True)
            thread.start()
            handle._servers.append(server)
            handle._threads.append(thread)
            handle.urls.append(f"http://{host}:{server.server_address[1]}/metrics")
    except Exception:
        handle.stop()
        raise
    return handle
