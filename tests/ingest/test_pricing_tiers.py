"""Pricing tiers are real (issue 8, item 7): devices and Slurm jobs get their tier from config
rules and the cloud providers' capacity-type node labels; a day shows reserved, on-demand and spot
lines, each at its own price.

Prices (per GPU-hour, H100): reserved 2.00, on-demand 4.00, spot 1.00. Rules: hosts "burst-*" are
on-demand; Slurm partitions "preempt*" are spot; default tier reserved.

Cluster c1, five whole H100s, the day 2026-10-01 (24 h):
  node-r   no capacity label               -> reserved   job r-1 (alpha) 10 h
  node-s   karpenter.sh/capacity-type=spot -> spot       job s-1 (beta)  10 h
  burst-1  host rule (arrives by the NVML agent)  -> on-demand  job b-1 (alpha) 10 h
  node-e   eks.amazonaws.com/capacityType=ON_DEMAND -> on-demand   idle
  node-g   cloud.google.com/gke-spot=true  -> spot       idle
Cluster hpc (Slurm, job records only, no inventory: no idle):
  700 (alpha) partition preempt-gpu, 2 GPUs × 5 h = 10 GPU-h -> spot
  701 (beta)  partition main,        1 GPU  × 6 h =  6 GPU-h -> reserved

Charges: alpha reserved 10 × 2.00 = 20.00; alpha on-demand 10 × 4.00 = 40.00;
         alpha spot 10 × 1.00 = 10.00 (hpc); beta spot 10 × 1.00 = 10.00; beta reserved 6 × 2.00 = 12.00.
Idle (c1 only): reserved node-r 14 h × 2.00 = 28.00; spot (node-s 14 + node-g 24) 38 h × 1.00 = 38.00;
                on-demand (burst-1 14 + node-e 24) 38 h × 4.00 = 152.00.
Today every device and job is reserved: one reserved line at 2.00 for all of it.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import polars as pl

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.config import ChargebackPolicy, TierRule
from gpuledger.ingest.jobs.slurm import parse_sacct, write_batch
from gpuledger.ingest.metrics.nvml import DeviceReading, readings_frames, write_readings
from gpuledger.ingest.tiers import device_tier, job_tier, node_label_rows, store_node_labels
from tests.helpers.ledger_fixtures import devices, job, load

CONFIG = """
currency: USD
org:
  name: acme
  children: [{name: alpha}, {name: beta}]
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
  - {gpu_model: H100, tier: on-demand, price_per_gpu_hour: "4.00", effective_from: 2026-01-01}
  - {gpu_model: H100, tier: spot, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
policy:
  chargeback:
    default_tier: reserved
    tier_rules:
      - {host: "burst-*", tier: on-demand}
      - {partition: "preempt*", tier: spot}
"""
DAY = datetime(2026, 10, 1)
SACCT = """JobID|JobName|Cluster|Account|User|AllocTRES|ReqTRES|Submit|Start|End|State|QOS|Partition|Priority|TimelimitRaw
700|train|hpc|alpha|ann|billing=2,cpu=8,gres/gpu:h100=2,node=1|gres/gpu:h100=2|2026-10-01T00:00:00|2026-10-01T00:00:00|2026-10-01T05:00:00|COMPLETED|normal|preempt-gpu|100|600
701|eval|hpc|beta|bob|billing=1,cpu=4,gres/gpu:h100=1,node=1|gres/gpu:h100=1|2026-10-01T00:00:00|2026-10-01T00:00:00|2026-10-01T06:00:00|COMPLETED|normal|main|100|600
"""


def _node(name: str, labels: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def test_rules_labels_and_default_decide_the_tier():
    policy = ChargebackPolicy(tier_rules=[TierRule(host="burst-*", tier="on-demand"),
                                          TierRule(cluster="aws-*", node_labels={"pool": "cheap"}, tier="spot"),
                                          TierRule(partition="preempt*", tier="spot")])
    assert device_tier(policy, cluster="c1", host="burst-7") == "on-demand"
    assert device_tier(policy, cluster="aws-1", host="n1", labels={"pool": "cheap"}) == "spot"
    assert device_tier(policy, cluster="gcp-1", host="n1", labels={"pool": "cheap"}) == "reserved"
    assert device_tier(policy, cluster="c", host="n", labels={"eks.amazonaws.com/capacityType": "SPOT"}) == "spot"
    assert device_tier(policy, cluster="c", host="n",
                       labels={"eks.amazonaws.com/capacityType": "ON_DEMAND"}) == "on-demand"
    assert device_tier(policy, cluster="c", host="n", labels={"karpenter.sh/capacity-type": "on-demand"}) == "on-demand"
    assert device_tier(policy, cluster="c", host="n", labels={"cloud.google.com/gke-spot": "true"}) == "spot"
    assert device_tier(ChargebackPolicy(default_tier="on-demand"), cluster="c", host="n") == "on-demand"
    assert job_tier(policy, cluster="hpc", partition="preempt-a100") == "spot"
    assert job_tier(policy, cluster="hpc", partition="main") is None
    assert node_label_rows([_node("Ip-10-0-1-7.ec2.internal", {"a": "b"})], cluster="c1", now=DAY)["host"].to_list() \
        == ["ip-10-0-1-7"]


def test_a_day_with_reserved_on_demand_and_spot_lines_each_priced_right(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG)
        ids = devices(con, [("GPU-r", "node-r", "H100"), ("GPU-s", "node-s", "H100"),
                            ("GPU-e", "node-e", "H100"), ("GPU-g", "node-g", "H100")])
        # The Kubernetes ingest stores its nodes' labels (and re-tiers their devices).
        store_node_labels(con, node_label_rows(
            [_node("node-r", {}), _node("node-s", {"karpenter.sh/capacity-type": "spot"}),
             _node("node-e", {"eks.amazonaws.com/capacityType": "ON_DEMAND"}),
             _node("node-g", {"cloud.google.com/gke-spot": "true"})], cluster="c1", now=DAY))
        # A device that arrives by the NVML agent gets its tier at registration (host rule).
        reading = DeviceReading("GPU-b", -1, 0, None, "NVIDIA H100 80GB HBM3", None, 1.0, 0.5, None, None, None, None)
        inv, samples = readings_frames([(datetime(2026, 9, 1), [reading]), (datetime(2026, 12, 1), [reading])],
                                       cluster="c1", host="burst-1")
        write_readings(con, inv, samples)
        burst = con.execute("SELECT gpu_id FROM gpus WHERE host = 'burst-1'").fetchall()[0][0]
        job(con, "r-1", "alpha", ids["GPU-r"], DAY, datetime(2026, 10, 1, 10))
        job(con, "s-1", "beta", ids["GPU-s"], DAY, datetime(2026, 10, 1, 10))
        job(con, "b-1", "alpha", burst, DAY, datetime(2026, 10, 1, 10))
        write_batch(con, parse_sacct(SACCT, fmt="parsable", origin="sacct.txt"))
        tiers = dict(con.execute("SELECT host, pricing_tier FROM gpus").fetchall())
        job_tiers = dict(con.execute("SELECT job_id, pricing_tier FROM jobs WHERE cluster = 'hpc'").fetchall())
    assert tiers == {"node-r": "reserved", "node-s": "spot", "node-e": "on-demand", "node-g": "spot",
                     "burst-1": "on-demand"}
    assert job_tiers == {"700": "spot", "701": None}
    with warehouse.open_reader(warehouse_file) as con:
        lines = queries.chargeback_report(con, "2026-10-01", now=datetime(2026, 10, 2))
    got = {(r["line_kind"], r["project"], r["tier"]): r["amount"]
           for r in lines.filter(pl.col("line_kind").is_in(["charge", "idle"])).iter_rows(named=True)}
    assert got == {
        ("charge", "alpha", "reserved"): Decimal("20.00"), ("charge", "alpha", "on-demand"): Decimal("40.00"),
        ("charge", "alpha", "spot"): Decimal("10.00"), ("charge", "beta", "spot"): Decimal("10.00"),
        ("charge", "beta", "reserved"): Decimal("12.00"),
        ("idle", "(idle)", "reserved"): Decimal("28.00"), ("idle", "(idle)", "spot"): Decimal("38.00"),
        ("idle", "(idle)", "on-demand"): Decimal("152.00"),
    }


def test_changing_the_rules_by_config_load_re_tiers_the_devices(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG)
        devices(con, [("GPU-x", "burst-9", "H100")])
        from gpuledger.ingest.tiers import apply_tier_rules

        apply_tier_rules(con)
        assert con.execute("SELECT pricing_tier FROM gpus").fetchall() == [("on-demand",)]
        result = load(con, CONFIG.replace('{host: "burst-*", tier: on-demand}', '{host: "burst-*", tier: spot}'))
        assert any(c.startswith("tier rules changed") for c in result.changes)
        assert con.execute("SELECT pricing_tier FROM gpus").fetchall() == [("spot",)]


def test_the_simulator_labels_some_nodes_spot_and_on_demand(example_config):
    from gpuledger.simulator.labels import node_labels
    from gpuledger.simulator.scenario import build_cluster

    sim = build_cluster(seed=1, gpus=128, start=DAY, days=0.01, interval_s=30, cluster="sim",
                        config=example_config, dirt=False)
    policy = example_config.policy.chargeback
    tiers = {host: device_tier(policy, cluster="sim", host=host, labels=labels)
             for host, labels in node_labels(sim).items()}
    # 16 nodes: node-005 and node-013 are spot, node-006 and node-014 on-demand where priced.
    assert {t for t in tiers.values()} == {"reserved", "spot", "on-demand"}
    assert sum(t == "spot" for t in tiers.values()) >= 1 and sum(t == "on-demand" for t in tiers.values()) >= 1
