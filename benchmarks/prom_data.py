"""The Prometheus side of the side-by-side benchmark: the same simulated samples a gpuledger
warehouse holds, as a real Prometheus TSDB.

The warehouse was written by ``gpuledger simulate warehouse`` (seed, GPUs, start, days, 30 s); the
simulator is deterministic, so rebuilding it from the same arguments and the warehouse's stored
config gives the same samples. They are streamed as OpenMetrics one file per day (only the
families the questions read), each loaded with ``promtool tsdb create-blocks-from openmetrics``
into one TSDB directory as one 24 h block, and the text deleted after loading. A ``.done`` marker
(JSON: samples, days, build seconds, size) makes the TSDB a cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The activity signal gpuledger judges by on these devices: SM active (its best signal; the
# simulator reports it on every device, MIG included). One family is all the questions need.
FAMILY = "DCGM_FI_PROF_SM_ACTIVE"
DAY_S = 86_400


def simulated_cluster(warehouse_path: Path, *, gpus: int, start: datetime, days: float, seed: int = 1):
    """The simulator as ``gpuledger simulate warehouse`` built it for ``warehouse_path``."""
    import duckdb

    from gpuledger.ledger.config_versions import stored_config
    from gpuledger.simulator.scenario import build_cluster

    con = duckdb.connect(str(warehouse_path), read_only=True)
    try:
        stored = stored_config(con)
    finally:
        con.close()
    return build_cluster(seed=seed, gpus=gpus, start=start, days=days, interval_s=30,
                         config=stored.config if stored else None, dirt=True)


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def tsdb_size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def build_tsdb(sim, tsdb: Path, *, span_days: float, log=print) -> dict:
    """Write ``span_days`` of ``sim`` from its start into ``tsdb`` (one promtool block per day);
    returns (and stores in ``tsdb/.done``) samples, series, seconds and MiB. Reuses a finished one."""
    from gpuledger.simulator.exposition import write_openmetrics

    done = tsdb / ".done"
    if done.exists():
        return json.loads(done.read_text())
    if tsdb.exists():
        shutil.rmtree(tsdb)  # a half-built one from an interrupted run
    tsdb.mkdir(parents=True)
    began = time.monotonic()
    samples, gen_s, load_s = 0, 0.0, 0.0
    t_end = sim.start_s + int(span_days * DAY_S)
    for t0 in range(sim.start_s, t_end, DAY_S):
        t1 = min(t0 + DAY_S, t_end)
        text = tsdb.parent / f"{tsdb.name}-{t0}.om"
        started = time.monotonic()
        with open(text, "w") as out:
            # Blank readings left out: gpuledger stores them as NULL (no reading); as the sentinel
            # 9.2e18 they would dominate every PromQL sum and max_over_time.
            samples += write_openmetrics(sim, out, t0, t1, metrics=[FAMILY], stream=True, blanks=False)
        gen_s += time.monotonic() - started
        started = time.monotonic()
        ran = subprocess.run(["nice", "-n", "10", "promtool", "tsdb", "create-blocks-from", "openmetrics",
                              "--quiet", "--max-block-duration=24h", str(text), str(tsdb)],
                             capture_output=True, text=True, check=False)
        load_s += time.monotonic() - started
        mib = text.stat().st_size / 2**20
        text.unlink()
        if ran.returncode != 0:
            raise RuntimeError(f"promtool could not load {text.name}: {ran.stderr[-2000:]}")
        log(f"  {tsdb.name}: day {_utc(t0):%Y-%m-%d}: {mib:,.0f} MiB of text loaded "
            f"(so far generate {gen_s:.0f} s, promtool {load_s:.0f} s)")
    meta = {"samples": samples, "days": span_days, "build_s": round(time.monotonic() - began, 1),
            "generate_s": round(gen_s, 1), "promtool_s": round(load_s, 1), "tsdb_mib": round(tsdb_size_mib(tsdb), 1),
            "family": FAMILY, "start": _utc(sim.start_s).isoformat(),
            "end": (_utc(sim.start_s) + timedelta(days=span_days)).isoformat()}
    done.write_text(json.dumps(meta))
    return meta
