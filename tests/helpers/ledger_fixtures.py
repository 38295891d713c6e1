"""A tiny warehouse for the ledger tests: config text, devices on named hosts, jobs on them."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.config import parse_config_text
from gpuledger.ledger.config_versions import load_version

CONFIG_V1 = """
currency: USD
org:
  name: acme
  children:
    - {name: alpha, shares: 50}
    - {name: beta, shares: 50}
budgets:
  - {node: alpha, period: 2026-10, gpu_hours: 1000}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
  - {gpu_model: H100, tier: on-demand, price_per_gpu_hour: "4.00", effective_from: 2026-01-01}
  - {gpu_model: H100, tier: spot, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
"""


def load(con, text: str, *, by: str = "alice", at: datetime | None = None, source: str = "test.yaml"):
    return load_version(con, parse_config_text(text), text=text, source=source, by=by, now=at)


def devices(con, rows: list[tuple[str, str, str]], *, cluster: str = "c1") -> dict[str, int]:
    """Register one whole GPU per (uuid, host, model), seen all of Sep–Nov 2026; uuid → gpu_id."""
    inv = pl.DataFrame(
        {"cluster": [cluster] * len(rows), "gpu_uuid": [r[0] for r in rows], "host": [r[1] for r in rows],
         "model": [r[2] for r in rows], "first_seen": [datetime(2026, 9, 1)] * len(rows),
         "last_seen": [datetime(2026, 12, 1)] * len(rows)},
        schema_overrides={"first_seen": pl.Datetime("us"), "last_seen": pl.Datetime("us")},
    )
    registered = warehouse.register_gpus(con, inv)
    return dict(zip(registered["gpu_uuid"], registered["gpu_id"], strict=True))


def job(con, job_id: str, project: str, gpu_id: int | None, start: datetime, end: datetime, *,
        cluster: str = "c1", model: str = "H100", partition: str | None = None, gpus: float = 1.0) -> None:
    warehouse.upsert(con, "jobs", pl.DataFrame(
        {"cluster": [cluster], "job_id": [job_id], "project": [project], "user_name": ["u"], "gpu_model": [model],
         "gpus": [gpus], "start_time": [start], "end_time": [end], "state": ["COMPLETED"], "source": ["test"],
         "updated_at": [end], "partition": [partition]},
        schema_overrides={"start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"),
                          "updated_at": pl.Datetime("us"), "partition": pl.String}))
    if gpu_id is not None:
        warehouse.upsert(con, "job_allocations", pl.DataFrame(
            {"cluster": [cluster], "job_id": [job_id], "gpu_id": [gpu_id], "start_time": [start], "end_time": [end],
             "gpu_fraction": [1.0]},
            schema_overrides={"gpu_id": pl.Int32, "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")}))
