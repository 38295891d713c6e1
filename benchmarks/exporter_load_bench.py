"""`gpuledger metrics serve` under a fleet's scrapes (not a test; issue 36): a simulated warehouse
of ``--gpus`` GPUs, the real CLI serving it, and ``--clients`` concurrent scrapes of /metrics, each
with ``--timeout`` (Prometheus's default scrape_timeout, 10 s). Reports how many were answered
200 within it, the slowest answer and the computations the server ran (its log: none per scrape).

    nice -n 10 .venv/bin/python benchmarks/exporter_load_bench.py --gpus 1024 --clients 200

Two rounds: a cold one (the first computation happens under the load, every scrape waits for it)
and a warm one (the cached page); with ``--cache-seconds 0`` the second round recomputes too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.prometheus_rig import free_port  # noqa: E402


def _round(url: str, clients: int, timeout_s: float) -> tuple[int, float, list[str]]:
    """(answered 200 within the timeout, slowest seconds, what the others got) of ``clients`` at once."""
    gate = __import__("threading").Barrier(clients)

    def scrape(_):
        gate.wait()  # all at once
        began = time.monotonic()
        try:
            answer = requests.get(url, timeout=timeout_s)
            took = time.monotonic() - began
            return (answer.status_code == 200 and took <= timeout_s), took, f"{answer.status_code}"
        except requests.RequestException as exc:
            return False, time.monotonic() - began, type(exc).__name__

    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(scrape, range(clients)))
    return (sum(ok for ok, _, _ in results), max(t for _, t, _ in results),
            sorted({what for ok, _, what in results if not ok}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--cache-seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        warehouse = Path(folder) / "w.duckdb"
        began = time.monotonic()
        subprocess.run([sys.executable, "-m", "gpuledger.cli", "simulate", "warehouse", "--gpus", str(args.gpus),
                        "--days", str(args.days), "-w", str(warehouse)], check=True, cwd=ROOT,
                       capture_output=True)
        print(f"simulated {args.gpus} GPUs x {args.days} days in {time.monotonic() - began:.0f} s", flush=True)
        port = free_port()
        log = Path(folder) / "serve.log"
        with open(log, "w") as err:
            server = subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "metrics", "serve", "--port", str(port),
                                       "--cache-seconds", str(args.cache_seconds), "-w", str(warehouse)],
                                      stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, env={**os.environ})
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                deadline = time.monotonic() + 60
                while "serving" not in log.read_text() and time.monotonic() < deadline:
                    time.sleep(0.1)
                for name in ("cold", "warm"):
                    ok, slowest, other = _round(url, args.clients, args.timeout)
                    print(f"{name}: {ok}/{args.clients} answered 200 within {args.timeout:g} s; slowest {slowest:.2f} s"
                          + (f"; the others: {', '.join(other)}" if other else ""), flush=True)
            finally:
                server.terminate()
                server.wait(timeout=30)
        print("server log:", log.read_text().strip().replace("\n", " | "))


if __name__ == "__main__":
    main()
