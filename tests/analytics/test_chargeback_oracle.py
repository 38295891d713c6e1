"""Chargeback against an independent oracle (issue 8, "Done when"): random org trees, jobs (on
devices, MIG slices, unknown devices, or job records only), devices (first seen, last seen,
retired), tiers and price changes, on a cluster with an inventory and one without, any period,
before or after "now". The oracle below computes every exact amount in Python fractions from
the job records, hour by hour, without polars; every chargeback level must then be:

* within one cent of exact on every job, project, idle and over-allocated line;
* children summing exactly to their parent: the job lines of a project × model × tier to its
  project line, a node's children and own project lines to the node, everything to the total;
* per (cluster, model, tier): charges + idle = capacity × price + over-allocated (exact in the
  oracle; the rounded lines within a cent each); pool first: each pool (model × tier) its exact
  total rounded half-up, the total the sum of its pools, a node within a cent per pool;
* unpriced hours (no rate, no model, unknown device) listed apart with their reasons.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuledger.analytics.chargeback import NO_JOB_RECORD, chargeback_lines
from tests.helpers.analytics_frames import allocations, gpus, jobs, org, rate_card

BASE = datetime(2026, 10, 1)
HOUR = timedelta(hours=1)
GRACE = timedelta(hours=6)
CENT = Fraction(1, 100)
MIG_SLICES = {"1g": Fraction(1, 7), "2g": Fraction(2, 7), "3g": Fraction(3, 7)}


# --- the oracle -----------------------------------------------------------------------------

def _price(rates, model, tier, at):
    """Latest rate of (model, tier) effective at or before ``at``; None when there is none."""
    found = [(eff, p) for m, t, eff, p in rates if m == model and t == tier and eff <= at]
    return Fraction(Decimal(max(found)[1])) if found else None


def _hour_pieces(lo, hi):
    """[(hour start, seconds)] of [lo, hi) cut at clock hours."""
    out, t = [], lo
    while t < hi:
        nxt = min(t.replace(minute=0, second=0, microsecond=0) + HOUR, hi)
        out.append((t.replace(minute=0, second=0, microsecond=0), Fraction(int((nxt - t).total_seconds()))))
        t = nxt
    return out


def oracle(world, start, end, now, idle_mode):
    """Exact amounts (Fractions) from the records: job lines, idle, over-allocation, unpriced."""
    devices, physical, allocs, job_rows, rates = (world[k] for k in ("devices", "physical", "allocs", "jobs", "rates"))
    billed_end = min(end, max(now, start))
    known = {d["cluster"] for d in devices}
    by_id = {d["gpu_id"]: d for d in devices}
    cap = defaultdict(Fraction)            # (cluster, model, tier, hour) -> GPU-hours
    for g in physical:
        until = g["retired_at"] or (g["last_seen"] + GRACE if g["last_seen"] else None)
        first = g["first_seen"].replace(minute=0) if g["first_seen"] else None
        for hour, secs in _hour_pieces(start, billed_end):
            if (first is None or hour >= first) and (until is None or hour < until):
                cap[(g["cluster"], g["model"], g["tier"], hour)] += secs / 3600
    pieces = []                            # (cluster, job, model, tier, hour, GPU-hours, unpriced reason)
    with_devices = {(a["cluster"], a["job_id"]) for a in allocs}
    intervals = [(a["cluster"], a["job_id"], a["start"], a["end"], Fraction(a["fraction"]), a["gpu_id"]) for a in allocs]
    intervals += [(j["cluster"], j["job_id"], j["start"], j["end"], Fraction(j["gpus"]), None) for j in job_rows
                  if j["start"] is not None and j["gpus"] > 0 and (j["cluster"], j["job_id"]) not in with_devices]
    for cluster, job, s, e, fraction, gpu_id in intervals:
        lo, hi = max(s, start), min(e or now, now, end)
        if gpu_id is not None and gpu_id in by_id:
            d = by_id[gpu_id]
            model, tier, fraction = d["model"], d["tier"], fraction * d["share"]
            reason = None
        elif gpu_id is not None:
            model, tier, reason = None, "reserved", f"device {gpu_id} not in the inventory"
        else:
            model, tier = next(j["model"] for j in job_rows if (j["cluster"], j["job_id"]) == (cluster, job)), "reserved"
            reason = None if model else "job record names no GPU model"
        for hour, secs in _hour_pieces(lo, hi) if hi > lo else []:
            price = _price(rates, model, tier, max(hour, start)) if model else None
            if model and price is None:
                reason = f"no price for {model}/{tier} in the rate card"
            pieces.append((cluster, job, model, tier, hour, secs / 3600 * fraction, price, reason))
    charge = defaultdict(Fraction)         # (cluster, job, model, tier) -> exact charge
    unpriced = defaultdict(Fraction)       # (job or None, reason) -> GPU-hours
    alloc = defaultdict(Fraction)
    for cluster, job, model, tier, hour, gh, price, reason in pieces:
        if price is not None:
            charge[(cluster, job, model, tier)] += gh * price
        else:
            unpriced[(job, reason)] += gh
        if model is not None and cluster in known:
            alloc[(cluster, model, tier, hour)] += gh
    idle, over, over_h, cap_cost = (defaultdict(Fraction) for _ in range(4))
    for key in set(cap) | set(alloc):
        cluster, model, tier, hour = key
        c, a = cap.get(key, Fraction(0)), alloc.get(key, Fraction(0))
        price = _price(rates, model, tier, max(hour, start))
        if a - c > Fraction(1, 10**9):
            over_h[key[:3]] += a - c
            over[key[:3]] += (a - c) * (price or 0)
        if price is None:
            if c > a:
                unpriced[(None, f"no price for {model}/{tier} in the rate card (idle capacity)")] += c - a
            continue
        idle[key[:3]] += max(c - a, Fraction(0)) * price
        cap_cost[key[:3]] += c * price
    lines = dict(charge)                   # the billed job-level lines, spread or not
    idle_lines = dict(idle)
    if idle_mode == "spread":
        for group, amount in idle.items():
            members = {k: v for k, v in charge.items() if (k[0], k[2], k[3]) == group}
            total = sum(members.values())
            if amount and total > 0:
                for k, v in members.items():
                    lines[k] += amount * v / total
                idle_lines.pop(group)
    project = {(c, j): p for c, j, p in ((r["cluster"], r["job_id"], r["project"]) for r in job_rows)}
    return {"lines": lines, "idle": idle_lines, "idle_all": idle, "over": over, "over_h": over_h, "cap": cap_cost,
            "charge": charge, "unpriced": unpriced,
            "project": lambda c, j: project.get((c, j), NO_JOB_RECORD)}


# --- random worlds --------------------------------------------------------------------------

@st.composite
def worlds(draw):
    n_nodes = draw(st.integers(1, 6))
    parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, n_nodes)]
    nodes = [f"n{i}" for i in range(n_nodes)]
    tree = [(nodes[i], None if p is None else nodes[p], 1) for i, p in enumerate(parents)]
    devices, physical, gid = [], [], 1
    for k in range(draw(st.integers(0, 4))):
        model = draw(st.sampled_from(["H100", "H100", "B200", "B300"]))
        tier = draw(st.sampled_from(["reserved", "reserved", "spot"]))
        seen = {
            "first_seen": draw(st.one_of(st.none(), st.integers(0, 48).map(lambda m: BASE + timedelta(minutes=30 * m)))),
            "last_seen": draw(st.one_of(st.none(), st.integers(0, 96).map(lambda m: BASE + timedelta(minutes=30 * m)))),
            "retired_at": draw(st.one_of(st.none(), st.integers(0, 72).map(lambda h: BASE + timedelta(hours=h)))),
        }
        physical.append({"cluster": "c1", "model": model, "tier": tier, **seen})
        slices = draw(st.one_of(st.none(), st.lists(st.sampled_from(sorted(MIG_SLICES)), min_size=1, max_size=3)))
        for i, profile in enumerate(slices or [None]):
            share = MIG_SLICES[profile] if profile else Fraction(1)
            devices.append({"gpu_id": gid, "uuid": f"G{k}", "cluster": "c1", "model": model, "tier": tier,
                            "mig": i + 1 if profile else -1, "fraction": float(share), "share": share,
                            "profile": profile, **seen})
            gid += 1
    projects = [*nodes, "stray"]  # "stray" names no node of the tree: its own root
    allocs, job_rows = [], []
    for j in range(draw(st.integers(1, 8))):
        s = BASE + timedelta(minutes=draw(st.integers(0, 48 * 60)))
        e = draw(st.one_of(st.none(), st.integers(1, 36 * 60).map(lambda d, s=s: s + timedelta(minutes=d))))
        job = {"job_id": f"j{j}", "project": draw(st.sampled_from(projects)), "start": s, "end": e,
               "cluster": "c1", "gpus": 1.0, "model": "H100"}
        if devices and draw(st.booleans()):  # on devices (or an unknown one)
            for gpu_id in draw(st.lists(st.sampled_from([d["gpu_id"] for d in devices] + [99]), min_size=1,
                                        max_size=2, unique=True)):
                allocs.append({"cluster": "c1", "job_id": job["job_id"], "gpu_id": gpu_id, "start": s, "end": e,
                               "fraction": draw(st.sampled_from([1.0, 0.5, 0.46]))})
            if draw(st.integers(0, 5)) == 0:
                continue  # allocations of a job with no job record
        else:  # a job record only: a count of GPUs of a model, perhaps on a cluster without inventory
            job.update(cluster=draw(st.sampled_from(["c1", "c2"])), gpus=draw(st.sampled_from([1.0, 2.0, 0.46])),
                       model=draw(st.sampled_from(["H100", "B200", None])))
        job_rows.append(job)
    change = BASE + timedelta(hours=draw(st.integers(0, 96)))
    price = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("9.999999"), places=6).map(str)
    rates = [("H100", "reserved", datetime(2026, 1, 1), draw(price)), ("H100", "reserved", change, draw(price)),
             ("H100", "spot", datetime(2026, 1, 1), draw(price)), ("B200", "reserved", datetime(2026, 1, 1), draw(price))]
    return {"tree": tree, "devices": devices, "physical": physical, "allocs": allocs, "jobs": job_rows,
            "rates": rates}


def _frames(world):
    dev = gpus([{k: v for k, v in d.items() if k != "share"} for d in world["devices"]])
    al = allocations([(a["job_id"], a["gpu_id"], a["start"], a["end"], a["fraction"]) for a in world["allocs"]])
    by_cluster = [jobs([j for j in world["jobs"] if j["cluster"] == c]).with_columns(cluster=pl.lit(c))
                  for c in ("c1", "c2")]
    return al, dev, pl.concat(by_cluster), rate_card(world["rates"]), org(world["tree"])


def _near(amount, exact, cents=1):
    """A rounded Decimal line within ``cents`` cents of its exact Fraction."""
    return abs(Fraction(amount) - exact) <= cents * CENT


def _half_up(exact: Fraction) -> Decimal:
    cents, rest = divmod(exact * 100, 1)
    return (Decimal(int(cents) + (rest >= Fraction(1, 2))) / 100).quantize(Decimal("0.01"))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(0, 48 * 60), st.integers(1, 96 * 60),
       st.one_of(st.integers(0, 160 * 60), st.just(160 * 60)),  # "now" inside the data, or after it all
       st.sampled_from(["line", "spread"]))
def test_every_level_matches_the_oracle(world, start_min, len_min, now_min, idle_mode):
    start = BASE + timedelta(minutes=start_min)
    end = start + timedelta(minutes=len_min)
    now = BASE + timedelta(minutes=now_min)
    al, dev, jb, rates, tree = _frames(world)
    want = oracle(world, start, end, now, idle_mode)
    run = {level: chargeback_lines(al, dev, jb, rates, start=start, end=end, now=now, level=level, org_nodes=tree,
                                   idle_cost=idle_mode, retire_grace=GRACE).collect()
           for level in ("job", "project", "node")}
    job = run["job"]
    for label, seen in (("over-allocated", any(want["over_h"].values())), ("unpriced", bool(want["unpriced"])),
                        ("spread idle", idle_mode == "spread" and any(want["idle_all"].values())),
                        ("provisional", end > now), ("capacity unknown", any(k[0] == "c2" for k in want["charge"])),
                        ("MIG", any(d["mig"] >= 0 for d in world["devices"])), ("charges", bool(want["charge"]))):
        if seen:
            event(label)  # --hypothesis-show-statistics: how often each case is exercised
    assert job.is_empty() or (job["provisional"].all() == (end > now)
                              and job["billed_through"][0] == min(end, max(now, start)))
    kind = pl.col("line_kind")

    # Job level: every billed line within a cent of exact; nothing extra, nothing missing.
    got = {(r["cluster"], r["job_id"], r["gpu_model"], r["tier"]): r["amount"]
           for r in job.filter(kind == "charge").to_dicts()}
    assert set(got) == set(want["lines"])
    assert all(_near(got[k], v) for k, v in want["lines"].items())
    idle = {(r["cluster"], r["gpu_model"], r["tier"]): r["amount"] for r in job.filter(kind == "idle").to_dicts()}
    for key in set(idle) | {k for k, v in want["idle"].items() if v}:
        assert _near(idle.get(key, Decimal(0)), want["idle"].get(key, Fraction(0)))
    # Pool first: each GPU pool (model × tier, one currency here) bills its exact total rounded
    # half-up, and the total is the sum of its pools; billed lines are charge and idle lines.
    pool_exact = defaultdict(Fraction)
    for (_, _, m, t), v in want["lines"].items():
        pool_exact[(m, t)] += v
    for (_, m, t), v in want["idle"].items():
        pool_exact[(m, t)] += v
    billed = job.filter(pl.col("billed"))
    pool_got = defaultdict(Decimal)
    for r in billed.to_dicts():
        pool_got[(r["gpu_model"], r["tier"])] += r["amount"]
    assert all(pool_got.get(k, Decimal(0)) == _half_up(v) for k, v in pool_exact.items())
    assert billed["amount"].sum() == sum((_half_up(v) for v in pool_exact.values()), Decimal(0)) \
        if billed.height else all(v < CENT / 2 for v in pool_exact.values())
    # Over-allocated: its own memo line, within a cent; the hours beyond capacity.
    over = job.filter(kind == "over-allocated")
    over_amount = {(r["cluster"], r["gpu_model"], r["tier"]): r["amount"] for r in over.to_dicts() if r["currency"]}
    over_hours = defaultdict(float)
    for r in over.to_dicts():
        over_hours[(r["cluster"], r["gpu_model"], r["tier"])] += r["gpu_hours_allocated"]
    assert set(over_hours) == set(want["over_h"])
    assert all(abs(over_hours[k] - float(v)) < 1e-6 for k, v in want["over_h"].items())
    assert all(_near(over_amount.get(k, Decimal(0)), v) for k, v in want["over"].items())
    # c2 has no inventory (nor c1 without devices): its charges stand, and its memo lines
    # (outside the total) state them.
    unknown = {(r["cluster"], r["gpu_model"], r["tier"]): r["amount"]
               for r in job.filter(kind == "capacity-unknown").to_dicts()}
    unknown_exact = defaultdict(Fraction)
    for (c, _, m, t), v in want["charge"].items():
        if c not in {d["cluster"] for d in world["devices"]}:
            unknown_exact[(c, m, t)] += v
    assert set(unknown) == set(unknown_exact) and all(_near(unknown[k], v) for k, v in unknown_exact.items())
    assert not job.filter(kind.is_in(["over-allocated", "capacity-unknown", "unpriced"]))["billed"].any()
    # Per (cluster, model, tier) of a cluster with an inventory: charges + idle = capacity × price
    # + over-allocated, exactly in the oracle and within a cent per rounded line in the result.
    groups = defaultdict(list)
    for (c, _, m, t), amount in got.items():
        groups[(c, m, t)].append(amount)
    for (c, m, t), amount in idle.items():
        groups[(c, m, t)].append(amount)
    for key in set(want["cap"]) | set(want["over"]):
        charged = sum(v for k, v in want["charge"].items() if (k[0], k[2], k[3]) == key)
        exact = want["cap"].get(key, 0) + want["over"].get(key, 0)
        assert abs(charged + want["idle_all"].get(key, 0) - exact) < Fraction(1, 10**6)
        lines = groups.get(key, [])
        assert _near(sum(lines, Decimal(0)), want["cap"].get(key, 0) + want["over"].get(key, 0), max(1, len(lines)))
    # Unpriced: the hours of every reason, apart from the money.
    unpriced = defaultdict(float)
    for r in job.filter(kind == "unpriced").to_dicts():
        unpriced[(r["job_id"], r["note"])] += r["gpu_hours_allocated"]
        assert r["amount"] is None and not r["billed"]
    assert set(unpriced) == {k for k, v in want["unpriced"].items() if v > Fraction(1, 10**9)}
    assert all(abs(unpriced[k] - float(v)) < 1e-6 for k, v in want["unpriced"].items() if k in unpriced)

    # Project level: within a cent of exact, and exactly the sum of its job lines.
    proj_exact = defaultdict(Fraction)
    for (c, j, m, t), v in want["lines"].items():
        proj_exact[(want["project"](c, j), m, t)] += v
    proj = {(r["project"], r["gpu_model"], r["tier"]): r["amount"]
            for r in run["project"].filter(kind == "charge").to_dicts()}
    assert set(proj) == set(proj_exact)
    assert all(_near(proj[k], v) for k, v in proj_exact.items())
    job_sums = defaultdict(Decimal)
    for r in job.filter(kind == "charge").to_dicts():
        job_sums[(r["project"], r["gpu_model"], r["tier"])] += r["amount"]
    assert job_sums == proj

    # Node level: each node within a cent per pool of its subtree's exact amount (its parts in
    # every pool, each within a cent); children (and the node's own project lines) add up to it;
    # roots and the idle line add up to the total.
    parent = {n: p for n, p, _ in world["tree"]}
    node_exact = defaultdict(Fraction)
    node_pools = defaultdict(set)
    for (p, m, t), v in proj_exact.items():
        while p is not None:
            node_exact[p] += v
            node_pools[p].add((m, t))
            p = parent.get(p)
    node = {r["node"]: r["amount"] for r in run["node"].filter(kind == "charge").to_dicts()}
    assert set(node) == {n for n in node_exact}
    assert all(_near(node[n], v, len(node_pools[n])) for n, v in node_exact.items())
    for n in parent:
        if n in node:
            own = sum((a for (p, _, _), a in proj.items() if p == n), Decimal(0))
            assert node[n] == own + sum(node.get(c, Decimal(0)) for c, p in parent.items() if p == n)
    roots = [n for n in node if parent.get(n) is None]
    node_idle = run["node"].filter(kind == "idle")["amount"].sum()
    assert sum((node[n] for n in roots), Decimal(0)) + node_idle == billed["amount"].sum()
