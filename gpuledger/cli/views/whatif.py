"""Terminal tables of `gpuledger whatif` (gpuledger.cli.views.tables Views), and the procurement frames."""

from __future__ import annotations

from gpuledger.cli.views.tables import Column, View
from gpuledger.whatif.model import POLICY_TITLES
from gpuledger.whatif.outcome import TARGET_NOTE


def summary_view(policies: tuple[str, ...]) -> View:
    return View(
        columns=(
            Column("label", "figure (unit)", key=True),
            *(Column(p, POLICY_TITLES[p].replace(" ", "\n", 1)) for p in policies),
        ),
        notes=(
            (
                "",
                (
                    "GPU-h = one whole GPU held for one hour; useful = active GPU-hours of work kept "
                    "(work lost to preemptions left out); small = ≤ 1 GPU and ≤ 2 h; a job never started "
                    "counts its wait so far"
                ),
            ),
        ),
    )


def outcome_view(policies: tuple[str, ...]) -> View:
    """The outcome table (gpuledger.whatif.outcome.table_frame): figure, target, a column per policy."""
    return View(
        columns=(
            Column("label", "figure (unit)", key=True),
            Column("target", "target\n(issue 34)"),
            *(Column(p, POLICY_TITLES[p].replace(" ", "\n", 1)) for p in policies),
        ),
        notes=(
            (
                "",
                (
                    "median [min–max] over the seeds; owed = share of capacity capped hour by hour at demand, "
                    "delivered settled per usage window; burst = allocated GPU-h above owed ÷ allocated; "
                    "ceiling = Σ min(owed, occupied) ÷ Σ owed per settlement week; with exempt work where it "
                    "ran: the best the occupied GPU-h left beside exempt work (on top, never preempted) could "
                    "deliver; a job never started counts its wait so far"
                ),
            ),
            ("target", TARGET_NOTE),
        ),
    )


def projects_view(policies: tuple[str, ...]) -> View:
    cols = [Column("project", "project", key=True)]
    for p in policies:
        short = POLICY_TITLES[p].split(" ")[0]
        cols += [
            Column(f"{p}_owed_gpu_hours", f"{short} owed\nGPU-h", "num"),
            Column(f"{p}_delivered_gpu_hours", f"{short} delivered\nGPU-h", "num", default=False),
            Column(f"{p}_delivery_ratio", f"{short} delivered\n÷ owed", "num", decimals=3),
        ]
    return View(
        columns=tuple(cols),
        notes=(
            (
                "",
                (
                    "owed = the project's share of capacity capped hour by hour at its demand; "
                    "delivered = allocated up to owed, settled per usage window "
                    "(analytics.fairshare.delivery)"
                ),
            ),
        ),
    )


def sweep_view() -> View:
    return View(
        columns=(
            Column("value", "value", key=True),
            Column("worst_delivery_ratio", "worst\ndelivered÷owed", "num", decimals=3),
            Column("worst_project", "worst\nproject"),
            Column("delivery_ratio", "all\ndelivered÷owed", "num", decimals=3),
            Column("occupancy_ratio", "occupancy", "num", decimals=3),
            Column("useful_gpu_hours", "useful\nGPU-h", "num"),
            Column("wait_p90_hours_small", "p90 wait\nsmall, h", "num", decimals=2),
            Column("wait_p90_hours_large", "p90 wait\nlarge, h", "num", decimals=2),
            Column("preemptions", "preemp-\ntions", "int"),
            Column("lost_gpu_hours", "lost\nGPU-h", "num"),
            Column("squatted_gpu_hours", "squatted\nGPU-h", "num"),
        )
    )


def mixes_frame(mixes):
    """(per model and mix, totals per mix) with the saving against on-demand only."""
    from decimal import Decimal

    import polars as pl

    from gpuledger.rules.money import cents
    from gpuledger.whatif.procurement import MIXES, ON_DEMAND

    rows = []
    base = {m.model: m.cost for m in mixes if m.mix == ON_DEMAND}
    for m in mixes:
        od = base.get(m.model) or Decimal(0)
        rows.append(
            {
                "model": m.model,
                "mix": m.mix,
                "reserved_gpus": m.reserved_gpus,
                "reserved_gpu_hours": m.reserved_gpu_hours,
                "on_demand_gpu_hours": m.on_demand_gpu_hours,
                "spot_gpu_hours": m.spot_gpu_hours,
                "spot_interruptions": m.spot_interruptions,
                "spot_lost_gpu_hours": m.spot_lost_gpu_hours,
                "cost": m.cost,
                "currency": m.currency,
                "saving": cents(od - m.cost),
                "saving_ratio": float((od - m.cost) / od) if od else None,
            }
        )
    schema = {
        "model": pl.String,
        "mix": pl.String,
        "reserved_gpus": pl.Int64,
        "reserved_gpu_hours": pl.Float64,
        "on_demand_gpu_hours": pl.Float64,
        "spot_gpu_hours": pl.Float64,
        "spot_interruptions": pl.Int64,
        "spot_lost_gpu_hours": pl.Float64,
        "cost": pl.Decimal(18, 2),
        "currency": pl.String,
        "saving": pl.Decimal(18, 2),
        "saving_ratio": pl.Float64,
    }
    frame = pl.DataFrame(rows, schema=schema)
    totals = []
    od_total = sum((m.cost for m in mixes if m.mix == ON_DEMAND), Decimal(0))
    for mix in MIXES:
        part = [m for m in mixes if m.mix == mix]
        cost = sum((m.cost for m in part), Decimal(0))
        totals.append(
            {
                "model": "(all)",
                "mix": mix,
                "reserved_gpus": sum(m.reserved_gpus for m in part),
                "reserved_gpu_hours": sum(m.reserved_gpu_hours for m in part),
                "on_demand_gpu_hours": sum(m.on_demand_gpu_hours for m in part),
                "spot_gpu_hours": sum(m.spot_gpu_hours for m in part),
                "spot_interruptions": sum(m.spot_interruptions for m in part),
                "spot_lost_gpu_hours": sum(m.spot_lost_gpu_hours for m in part),
                "cost": cost,
                "currency": part[0].currency if part else None,
                "saving": cents(od_total - cost),
                "saving_ratio": float((od_total - cost) / od_total) if od_total else None,
            }
        )
    return frame, pl.DataFrame(totals, schema=schema)


def mixes_view(total: bool = False) -> View:
    return View(
        columns=(
            Column("model", "model", key=True),
            Column("mix", "mix", key=True),
            Column("reserved_gpus", "reserved\nGPUs", "int"),
            Column("on_demand_gpu_hours", "on-demand\nGPU-h", "num"),
            Column("spot_gpu_hours", "spot\nGPU-h", "num"),
            Column("spot_interruptions", "spot\ninterrupts", "int"),
            Column("spot_lost_gpu_hours", "lost to\nspot GPU-h", "num"),
            Column("cost", "cost\n{currency}", "money"),
            Column("saving", "saving vs\non-demand", "money"),
            Column("saving_ratio", "saving\nratio", "num", decimals=3),
            Column("reserved_gpu_hours", "reserved\nGPU-h", "num", default=False),
        ),
        notes=(
            (
                "",
                (
                    "reserved GPU-hours are paid whether used or not; spot GPU-hours include the work "
                    "re-run after interruptions"
                ),
            ),
        )
        if not total
        else (),
    )


def break_even_view() -> View:
    return View(
        columns=(
            Column("model", "model", key=True),
            Column("gpus_owned", "GPUs\nowned", "int"),
            Column("purchase", "purchase\n{currency}", "money"),
            Column("running_per_month", "running\n/month", "money"),
            Column("rent_per_month", "renting\n/month", "money"),
            Column("rent_mix", "cheapest\nmix"),
            Column("month", "break-even\nmonth", "int"),
            Column("currency", "currency", default=False),
        ),
        notes=(("month", "month 1 = the first; blank: owning never catches up within 10 years"),),
    )
