"""Production inference in the simulated cluster (issue 34): replicas follow traffic, not a
backlog (demand.Demand.serving_gpus), and start before the rest of their team's work."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl

from gpuledger.config import load_config
from gpuledger.simulator import build_cluster
from gpuledger.simulator.demand import RANKING_SERVING, SERVING_OFFER, Demand, rhythm
from gpuledger.simulator.pools import Placer
from gpuledger.simulator.to_warehouse import jobs_frame

START = datetime(2026, 11, 1)


def test_replicas_are_topped_up_to_traffic_apart_from_the_backlog():
    """One top-up from nothing at 15:00 UTC on a Sunday (rhythm 1.15 x 0.85): the serving team's
    replicas reach SERVING_OFFER x its share x the cluster's GPUs x rhythm, a ranking team's
    RANKING_SERVING x its share x ..., each to within one replica (8 GPUs at most) — counted in
    ``serving``, not in the backlog's ``outstanding``; no other team submits a replica."""
    sim = build_cluster(seed=42, gpus=256, start=START, days=0.01, dirt=False)
    demand = Demand(load_config(), Placer(sim.hardware), 42, np.random.default_rng([42, 7]),
                    sim.start_s, sim.start_s + 86400)
    t = sim.start_s + 15 * 3600
    assert rhythm(t) == 1.15 * 0.85  # 2026-11-01 is a Sunday
    outstanding = {p: 1e9 for p in demand.projects}  # every backlog full: only replicas are submitted
    serving: dict[str, float] = {}
    specs = demand.top_up(t, outstanding, {}, serving)
    assert {s.kind for s in specs} == {"inference"}
    assert {s.project for s in specs} == {"inference-serving", "search-ranking"}
    for project, offer in (("inference-serving", SERVING_OFFER), ("search-ranking", RANKING_SERVING)):
        want = offer * demand.shares[project] * demand.capacity_gpus * rhythm(t)
        got = sum(s.gpus for s in specs if s.project == project)
        assert serving[project] == got and want <= got < want + 8, (project, want, got)
    assert all(v == 1e9 for v in outstanding.values())


def test_replicas_start_first_in_the_demo_shape():
    """The demo's shape (256 GPUs, seed 42) for two days: every replica submitted an hour or more
    before the end started, half of them within a minute (measured: p50 6 s over the demo week)."""
    sim = build_cluster(seed=42, gpus=256, start=START, days=2, dirt=False)
    end = datetime.fromtimestamp(sim.end_s - 3600, UTC).replace(tzinfo=None)
    replicas = jobs_frame(sim).filter((pl.col("kind") == "inference") & (pl.col("submit_time") < end))
    assert replicas.height > 0 and replicas["start_time"].is_not_null().all()
    waits = (replicas["start_time"] - replicas["submit_time"]).dt.total_seconds()
    assert float(waits.median()) <= 60
