"""A simulated month for the statement tests: October 2026 (31 days = 744 h), org acme with two
business units, three GPUs on three hosts, Slurm partitions on the jobs.

  acme ── research ── alpha, gamma
       └─ product  ── beta
  devices: GPU-h1 on node-h1 (H100), GPU-h2 on node-h2 (H100), GPU-a on node-a (A100); reserved
  rates:   H100 2.00 /h, A100 1.00 /h

  job      project  device  held                    partition  GPU-hours  charge
  alpha-1  alpha    GPU-h1  Oct 1 00:00 – Oct 11    gpu        240        480.00
  gamma-1  gamma    GPU-h2  Oct 1 00:00 – Oct 2     debug       24         48.00
  beta-1   beta     GPU-a   Oct 1 00:00 – Oct 11    gpu        240        240.00
  beta-2   beta     GPU-a   Nov 2 – Nov 3 (only so the data reaches past October: not provisional)

  idle H100: 2 × 744 − 264 = 1224 h × 2.00 = 2448.00;  idle A100: 744 − 240 = 504 h × 1.00 = 504.00
  total 480 + 48 + 240 + 2448 + 504 = 3720.00 = capacity (1488 h × 2.00 + 744 h × 1.00 = 2976 + 744)
  research 528.00, product 240.00, the org's idle 2952.00
  budgets: alpha 1000 for October; beta 100 for November (as of the data's end, Nov 3: 24 used, 76 left)
  GPU-h2 reports sm_active 0.5 all of Oct 1 (every 30 s): gamma-1 is active 12 of 24 h, 50 %;
  the other jobs have no samples: activity unknown, efficiency not stated.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl

from gpuledger import warehouse
from tests.helpers.ledger_fixtures import devices, job, load

CONFIG = """
currency: USD
org:
  name: acme
  children:
    - name: research
      shares: 60
      children:
        - {name: alpha, shares: 50}
        - {name: gamma, shares: 50}
    - name: product
      shares: 40
      children:
        - {name: beta, shares: 1}
budgets:
  - {node: alpha, period: 2026-10, gpu_hours: 1000}
  - {node: beta, period: 2026-11, gpu_hours: 100}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
"""
OCT1, OCT2, OCT11 = datetime(2026, 10, 1), datetime(2026, 10, 2), datetime(2026, 10, 11)


def october(path) -> None:
    with warehouse.open_writer(path) as con:
        load(con, CONFIG, at=datetime(2026, 9, 30))
        ids = devices(con, [("GPU-h1", "node-h1", "H100"), ("GPU-h2", "node-h2", "H100"),
                            ("GPU-a", "node-a", "A100")])
        job(con, "alpha-1", "alpha", ids["GPU-h1"], OCT1, OCT11, partition="gpu")
        job(con, "gamma-1", "gamma", ids["GPU-h2"], OCT1, OCT2, partition="debug")
        job(con, "beta-1", "beta", ids["GPU-a"], OCT1, OCT11, model="A100", partition="gpu")
        job(con, "beta-2", "beta", ids["GPU-a"], datetime(2026, 11, 2), datetime(2026, 11, 3), model="A100",
            partition="gpu")
        n = 24 * 120  # one day of 30 s samples
        t0 = np.datetime64("2026-10-01T00:00:00", "us")
        warehouse.write_samples(con, pl.DataFrame({
            "gpu_id": np.full(n, ids["GPU-h2"], dtype=np.int32),
            "ts": t0 + np.arange(n) * np.timedelta64(30, "s"),
            "sm_active_ratio": np.full(n, 0.5),
        }), "test")
