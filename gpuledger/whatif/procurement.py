"""Procurement what-if: price the same demand under capacity mixes, and the break-even month of
owning hardware against renting. Money is exact Decimal, rounded half-up to the cent at the end of
each line; GPU-hours are floats (whole-GPU equivalents × hours).

Demand: per job, the GPU-hours it held hour by hour (a schedule run's segments, or the recorded
allocations of a trace). Mixes, per GPU model, priced from the rate card in force at the start:

* ``on-demand`` — every GPU-hour at the on-demand price;
* ``reserved+on-demand`` — a reserved baseline of R GPUs, paid every hour whether used or not,
  and on-demand for each hour's demand above R. R is given, or the cheapest level: the hourly
  demand's (1 − reserved ÷ on-demand price) quantile, above which a reserved GPU is busy less
  often than its price ratio;
* ``reserved+spot+on-demand`` — the same baseline (filled by work that cannot checkpoint first);
  the burst of checkpointable jobs on spot, the rest on-demand. A spot interruption loses the work
  since the job's last checkpoint, which runs again on spot: interruptions come at
  ``interruptions_per_hour`` per job as a Poisson process seeded by (seed, job id), or exactly at
  the offsets given (``interruptions``: job id -> seconds into its spot time).

Owning: N GPUs (the peak hourly demand, or given) bought at ``purchase_price_per_gpu`` and run at
``running_cost_per_gpu_hour`` (config ``hardware``); the break-even month is the first month
whose cumulative cost of owning is at most the cumulative cost of the cheapest rental mix, the
demand repeated every 30-day month.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from gpuledger.rules.clock import iso_z
from gpuledger.rules.money import cents

MONTH_HOURS = 30 * 24
ON_DEMAND, RESERVED_OD, RESERVED_SPOT = "on-demand", "reserved+on-demand", "reserved+spot+on-demand"
MIXES = (ON_DEMAND, RESERVED_OD, RESERVED_SPOT)


def _dec(x: float) -> Decimal:
    """A float GPU-hour figure as a Decimal (to the micro-GPU-hour: figures, not money)."""
    return Decimal(repr(round(x, 6)))


@dataclass(frozen=True)
class DemandPiece:
    """``gpus`` held by a job over [start_s, end_s) of its model."""

    job_id: str
    model: str
    gpus: float
    start_s: int
    end_s: int
    checkpointable: bool


@dataclass
class MixCost:
    model: str
    mix: str
    reserved_gpus: int = 0
    reserved_gpu_hours: float = 0.0  # paid, used or not
    on_demand_gpu_hours: float = 0.0
    spot_gpu_hours: float = 0.0  # including work re-run after interruptions
    spot_interruptions: int = 0
    spot_lost_gpu_hours: float = 0.0
    cost: Decimal = Decimal("0.00")
    currency: str = "USD"
    unpriced: list[str] = field(default_factory=list)


def hourly_demand(pieces: list[DemandPiece], horizon_s: int) -> dict[str, list[tuple[float, float]]]:
    """Model -> per clock hour (all GPU-hours, checkpointable GPU-hours)."""
    hours = max(1, math.ceil(horizon_s / 3600))
    out: dict[str, list[list[float]]] = {}
    for p in pieces:
        rows = out.setdefault(p.model, [[0.0, 0.0] for _ in range(hours)])
        t = max(0, p.start_s)
        end = min(p.end_s, horizon_s)
        while t < end:
            h = t // 3600
            edge = min(end, (h + 1) * 3600)
            gh = p.gpus * (edge - t) / 3600
            rows[h][0] += gh
            if p.checkpointable:
                rows[h][1] += gh
            t = edge
    return {m: [(a, c) for a, c in rows] for m, rows in out.items()}


def optimal_reserved(demand: list[float], reserved: Decimal, on_demand: Decimal) -> int:
    """The cheapest whole number of reserved GPUs for these hourly demands (GPU-hours per hour)."""
    if on_demand <= 0 or not demand:
        return 0
    q = 1 - float(reserved / on_demand)
    if q <= 0:
        return 0
    v = sorted(demand)
    best, best_cost = 0, None
    # the optimum is the q-quantile; check the whole numbers around it
    centre = v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]
    for r in sorted(
        {0, math.floor(centre), math.ceil(centre), math.floor(centre) - 1, math.ceil(centre) + 1}
    ):
        if r < 0:
            continue
        cost = Decimal(r * len(v)) * reserved + _dec(sum(max(0.0, d - r) for d in v)) * on_demand
        if best_cost is None or cost < best_cost:
            best, best_cost = r, cost
    return best


def prices_at(rate_card, at: date) -> dict[tuple[str, str], tuple[Decimal, str | None]]:
    """(model, tier) -> (price per GPU-hour, currency) in force at ``at``."""
    out: dict[tuple[str, str], tuple[date, Decimal, str | None]] = {}
    for r in rate_card:
        k = (r.gpu_model, r.tier)
        if r.effective_from <= at and (k not in out or out[k][0] <= r.effective_from):
            out[k] = (r.effective_from, r.price_per_gpu_hour, r.currency)
    return {k: (p, c) for k, (_, p, c) in out.items()}


def spot_interruptions(job_id: str, spot_s: float, rate_per_hour: float, seed: int) -> list[float]:
    """Interruption offsets (seconds into the job's spot time) of a Poisson process, seeded by
    (seed, job id) so a run is deterministic."""
    if rate_per_hour <= 0 or spot_s <= 0:
        return []
    rng = random.Random(f"{seed}:{job_id}")
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate_per_hour / 3600)
        if t >= spot_s:
            return out
        out.append(t)


def spot_loss(spot_s: float, offsets: list[float], checkpoint_s: float) -> tuple[float, int]:
    """(seconds of work lost, interruptions) for ``spot_s`` seconds of work on spot, interrupted at
    ``offsets`` (seconds of wall time on spot); each loses the work since its last checkpoint
    (checkpoints every ``checkpoint_s`` of work, counted from the job's start on spot), which is
    then done again. Offsets past the (lengthened) end do not happen."""
    done, wall, lost, n = 0.0, 0.0, 0.0, 0
    for off in sorted(offsets):
        if off <= wall:
            continue
        progress = done + (off - wall)
        if progress >= spot_s:
            break
        kept = math.floor(progress / checkpoint_s) * checkpoint_s if checkpoint_s > 0 else 0.0
        lost += progress - kept
        done, wall, n = kept, off, n + 1
    return lost, n


def price_mixes(
    pieces: list[DemandPiece],
    horizon_s: int,
    rate_card,
    *,
    at: date,
    currency: str = "USD",
    reserved_gpus: dict[str, int] | None = None,
    interruptions_per_hour: float = 0.0,
    checkpoint_interval_minutes: float = 60.0,
    seed: int = 1,
    interruptions: dict[str, list[float]] | None = None,
) -> list[MixCost]:
    """Cost of each mix per model (module docstring)."""
    prices = prices_at(rate_card, at)
    demand = hourly_demand(pieces, horizon_s)
    out: list[MixCost] = []
    for model in sorted(demand):
        hours = demand[model]
        od = prices.get((model, "on-demand"))
        rs = prices.get((model, "reserved"))
        sp = prices.get((model, "spot"))
        cur = (od or rs or sp or (None, currency))[1] or currency
        total = sum(a for a, _ in hours)
        # on-demand only
        m = MixCost(model, ON_DEMAND, on_demand_gpu_hours=total, currency=cur)
        if od is None:
            m.unpriced.append(f"{model} has no on-demand price")
        m.cost = cents(_dec(total) * (od[0] if od else Decimal(0)))
        out.append(m)
        r = (reserved_gpus or {}).get(model)
        if r is None:
            r = optimal_reserved([a for a, _ in hours], rs[0], od[0]) if (rs and od) else 0
        burst = [max(0.0, a - r) for a, _ in hours]
        m = MixCost(
            model,
            RESERVED_OD,
            reserved_gpus=r,
            reserved_gpu_hours=float(r * len(hours)),
            on_demand_gpu_hours=sum(burst),
            currency=cur,
        )
        if rs is None and r > 0:
            m.unpriced.append(f"{model} has no reserved price")
        m.cost = cents(
            Decimal(r * len(hours)) * (rs[0] if rs else Decimal(0))
            + _dec(sum(burst)) * (od[0] if od else Decimal(0))
        )
        out.append(m)
        # spot for the checkpointable burst: reserved is filled by work that cannot checkpoint first
        spot_h = [min(max(0.0, a - r), c) if a - c < r else c for a, c in hours]
        od_h = [max(0.0, a - r) - s for (a, _), s in zip(hours, spot_h, strict=True)]
        share = _spot_share(pieces, model, horizon_s, spot_h, hours)
        lost_h, n_int = 0.0, 0
        for job_id, gpus, spot_gh in share:
            spot_s = spot_gh / gpus * 3600
            offsets = (interruptions or {}).get(job_id)
            if offsets is None:
                offsets = spot_interruptions(job_id, spot_s * 2, interruptions_per_hour, seed)
            lost_s, k = spot_loss(spot_s, offsets, checkpoint_interval_minutes * 60)
            lost_h += gpus * lost_s / 3600
            n_int += k
        m = MixCost(
            model,
            RESERVED_SPOT,
            reserved_gpus=r,
            reserved_gpu_hours=float(r * len(hours)),
            on_demand_gpu_hours=sum(od_h),
            spot_gpu_hours=sum(spot_h) + lost_h,
            spot_interruptions=n_int,
            spot_lost_gpu_hours=lost_h,
            currency=cur,
        )
        if sp is None and sum(spot_h) > 1e-6:
            m.unpriced.append(f"{model} has no spot price")
        m.cost = cents(
            Decimal(r * len(hours)) * (rs[0] if rs else Decimal(0))
            + _dec(sum(od_h)) * (od[0] if od else Decimal(0))
            + _dec(sum(spot_h) + lost_h) * (sp[0] if sp else Decimal(0))
        )
        out.append(m)
    return out


def _spot_share(pieces, model, horizon_s, spot_h, hours) -> list[tuple[str, float, float]]:
    """(job id, GPUs, spot GPU-hours) per checkpointable job: each hour's spot GPU-hours spread
    over that hour's checkpointable jobs in proportion to what they held."""
    per_job: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for p in pieces:
        if p.model != model or not p.checkpointable:
            continue
        t, end = max(0, p.start_s), min(p.end_s, horizon_s)
        while t < end:
            h = t // 3600
            edge = min(end, (h + 1) * 3600)
            ck = hours[h][1]
            if ck > 0 and spot_h[h] > 0:
                per_job[p.job_id][1] += spot_h[h] * (p.gpus * (edge - t) / 3600) / ck
            per_job[p.job_id][0] = max(per_job[p.job_id][0], p.gpus)
            t = edge
    return [(j, g, s) for j, (g, s) in sorted(per_job.items()) if s > 0]


@dataclass
class BreakEven:
    model: str
    gpus_owned: int
    purchase: Decimal
    running_per_month: Decimal
    rent_per_month: Decimal  # the cheapest mix, for a 30-day month
    rent_mix: str
    month: int | None  # first month (1 = the first) owning costs no more than renting; None: never
    currency: str


def break_even(
    mixes: list[MixCost],
    pieces: list[DemandPiece],
    horizon_s: int,
    hardware,
    *,
    owned_gpus: dict[str, int] | None = None,
    max_months: int = 120,
) -> list[BreakEven]:
    """Per model with a ``hardware`` entry: when owning N GPUs (the peak hourly demand, or given)
    costs no more in total than renting the same demand with the cheapest mix."""
    demand = hourly_demand(pieces, horizon_s)
    scale = Decimal(MONTH_HOURS) / Decimal(max(1, math.ceil(horizon_s / 3600)))
    out = []
    for hw in hardware:
        model = hw.gpu_model
        if model not in demand:
            continue
        n = (owned_gpus or {}).get(model) or math.ceil(max(a for a, _ in demand[model]) - 1e-9)
        cheapest = min(
            (m for m in mixes if m.model == model and not m.unpriced), key=lambda m: m.cost, default=None
        )
        if cheapest is None:
            continue
        rent = cents(cheapest.cost * scale)
        purchase = cents(hw.purchase_price_per_gpu * n)
        running = cents(hw.running_cost_per_gpu_hour * n * MONTH_HOURS)
        month = None
        for k in range(1, max_months + 1):
            if purchase + running * k <= rent * k:
                month = k
                break
        out.append(
            BreakEven(
                model, n, purchase, running, rent, cheapest.mix, month, hw.currency or cheapest.currency
            )
        )
    return out


def pieces_from_run(result) -> list[DemandPiece]:
    """The demand a schedule run served: one piece per segment."""
    return [
        DemandPiece(o.job.job_id, o.job.pool[1], o.job.gpus, s.start_s, s.end_s, o.job.resumable)
        for o in result.outcomes
        for s in o.segments
    ]


def start_date(origin: datetime) -> date:
    return origin.date()


FORMAT = "gpuledger.whatif.procurement/1"


def to_json(
    mixes: list[MixCost],
    even: list[BreakEven],
    totals,
    *,
    start: datetime,
    end: datetime,
    policy: str,
    interruptions_per_hour: float,
    checkpoint_interval_minutes: float,
) -> str:
    """``gpuledger.whatif.procurement/1``: {"format", "start", "end", "policy", "spot_interruptions_per_hour",
    "checkpoint_interval_minutes", "mixes": [per model and mix], "totals": [per mix], "break_even": [...]};
    money as decimal strings, GPU-hours as numbers."""
    def plain(d):
        return {k: (str(v) if isinstance(v, Decimal) else v) for k, v in d.items()}

    doc = {
        "format": FORMAT,
        "start": iso_z(start),
        "end": iso_z(end),
        "policy": policy,
        "spot_interruptions_per_hour": interruptions_per_hour,
        "checkpoint_interval_minutes": checkpoint_interval_minutes,
        "mixes": [plain(m.__dict__) for m in mixes],
        "totals": [plain(r) for r in totals.to_dicts()],
        "break_even": [plain(e.__dict__) for e in even],
    }
    return json.dumps(doc, indent=1) + "\n"
