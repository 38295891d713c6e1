"""Showback of activity: an option beside the statement, never the ledger of record.

Per GPU pool (currency, GPU model, tier) the pool's billed amount (its charges, its idle and the
corrections of both, exactly as the statement bills them) is shown re-weighted by what each
project measurably used, so the idle capacity is redistributed to who used the GPUs and the pool's
total is unchanged: Σ showback = Σ billed per pool, to the cent (largest remainder).

Bases:

* ``active``: active GPU-hours (Σ allocated × the best activity signal);
* ``energy``: kWh from the DCGM energy counter (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, resets
  handled: analytics/energy.py), per holder.

Hours the basis cannot measure are *marked* and keep their allocated share, never discounted by
accident and never loaded with idle on a guess: hours on a time-sliced GPU (several holders at once:
whose activity or energy it is cannot be told) and hours without a signal (no activity samples for
``active``; no energy reading, or a MIG slice whose energy is its GPU's split by slice, marked
"MIG slice", for ``energy``). A line's kept amount is its billed amount × marked / allocated GPU-hours; the rest of
the pool (the measured lines' charges and the pool's idle) is shared by the measured lines in
proportion to their measure. The pool's idle line shows what left it (``idle_redistributed``
negative), so Σ idle_redistributed = 0 per pool. When nothing in a pool was measurably used, its
idle stays idle and the lines keep their charges.

Units: GPU-hours, kWh, money in exact decimals (cents).
"""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from gpuledger.errors import UsageError
from gpuledger.reports.statement.build import ORG_LINES, Statement
from gpuledger.reports.table_files import html_rows
from gpuledger.rules.billing import billed as is_billed
from gpuledger.rules.billing import billed_kind
from gpuledger.rules.money import cents, largest_remainder

BASES = ("active", "energy")
MEASURE_UNIT = {"active": "active GPU-hours", "energy": "kWh"}
_H = Decimal("0.000001")  # GPU-hours and kWh to the micro-unit before the Decimal arithmetic
POOL = ["currency", "gpu_model", "tier"]
COLUMNS = ["business_unit", "project", *POOL, "basis", "gpu_hours", "gpu_hours_time_sliced", "gpu_hours_no_signal",
           "gpu_hours_measured", "measure", "measure_unit", "billed", "kept_allocated", "showback",
           "idle_redistributed", "marked"]


def _dec(x) -> Decimal:
    return Decimal(str(round(float(x or 0.0), 6))).quantize(_H)


def showback_lines(st: Statement, basis: str = "active") -> pl.DataFrame:
    """One row per (business_unit, project, pool) with charges, and one ``(idle)`` row per pool
    with idle. Columns: business_unit, project, currency, gpu_model, tier, basis, gpu_hours
    (allocated), gpu_hours_time_sliced, gpu_hours_no_signal (for this basis), gpu_hours_measured,
    measure (active GPU-hours or kWh of the measured hours), measure_unit, billed (the ledger's
    charge with its corrections), kept_allocated (the marked hours' share of billed, unchanged),
    showback, idle_redistributed (showback − billed), marked (what is marked: "time-sliced",
    "no activity signal" / "no energy reading", joined by "; "; empty when all measured)."""
    if basis not in BASES:
        raise UsageError(f"--showback {basis!r}: choose one of {', '.join(BASES)}")
    charges, idle = pool_money(st)
    pools = sorted(set(charges.select(POOL).unique().iter_rows()) | set(idle.select(POOL).unique().iter_rows()),
                   key=lambda k: tuple("" if v is None else v for v in k))
    rows: list[dict] = []
    for key in pools:
        mine = [measured_line(r, basis) for r in charges.iter_rows(named=True) if _pool_of(r) == key]
        idle_row = next((r for r in idle.iter_rows(named=True) if _pool_of(r) == key), None)
        rows.extend(pool_showback(key, mine, idle_row, basis))
    return pl.DataFrame([[r[c] for c in COLUMNS] for r in rows], schema={c: _SCHEMA[c] for c in COLUMNS},
                        orient="row")


_SCHEMA = {"business_unit": pl.String, "project": pl.String, "currency": pl.String, "gpu_model": pl.String,
           "tier": pl.String, "basis": pl.String, "gpu_hours": pl.Float64, "gpu_hours_time_sliced": pl.Float64,
           "gpu_hours_no_signal": pl.Float64, "gpu_hours_measured": pl.Float64, "measure": pl.Float64,
           "measure_unit": pl.String, "billed": pl.Decimal(38, 2), "kept_allocated": pl.Decimal(38, 2),
           "showback": pl.Decimal(38, 2), "idle_redistributed": pl.Decimal(38, 2), "marked": pl.String}


def _pool_of(row: dict) -> tuple:
    return row["currency"], row["gpu_model"], row["tier"]


# --- the stages of showback_lines, each on its own (tests/reports/test_showback_stages.py) ---

def pool_money(st: Statement) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(charges, idle) as the statement bills them, corrections included: per business unit,
    project and pool the charged amount (``billed``), its allocated GPU-hours and the project's
    measured usage in the pool; per pool the idle amount and idle GPU-hours."""
    lines = st.lines.with_columns(kind=billed_kind())
    money = lines.filter(is_billed(lines) & pl.col("currency").is_not_null())
    usage = st.usage.group_by("project", pl.col("model").alias("gpu_model"), "tier").agg(
        pl.col("gpu_hours_active", "gpu_hours_unknown", "gpu_hours_time_sliced", "gpu_hours_no_energy",
               "gpu_hours_mig", "energy_kwh").fill_null(0.0).sum())
    charges = (money.filter(pl.col("kind") == "charge")
               .group_by("business_unit", "project", *POOL)
               .agg(pl.col("amount").sum().alias("billed"),
                    pl.col("gpu_hours").filter(pl.col("line_kind") == "charge").sum())
               .join(usage, on=["project", "gpu_model", "tier"], how="left", nulls_equal=True)
               .sort(*POOL, "business_unit", "project"))
    idle = (money.filter(pl.col("kind") == "idle").group_by(*POOL)
            .agg(pl.col("amount").sum().alias("billed"), pl.col("gpu_hours").filter(pl.col("line_kind") == "idle")
                 .sum()))
    return charges, idle


def measured_line(r: dict, basis: str) -> dict:
    """One charge line (a row of :func:`pool_money`'s charges) split into its marked hours
    (time-sliced, then no signal for ``basis``) and its measured ones: ``kept_allocated`` is the
    marked hours' share of ``billed`` (exact), ``measure`` the basis' measure, ``marked`` why."""
    hours = _dec(r["gpu_hours"])
    sliced = min(_dec(r["gpu_hours_time_sliced"]), hours)
    if basis == "active":
        no_signal = _dec((r["gpu_hours_unknown"] or 0.0) - (r["gpu_hours_time_sliced"] or 0.0))
        measure = _dec(r["gpu_hours_active"])
    else:
        no_signal = _dec(r["gpu_hours_no_energy"])
        measure = _dec(r["energy_kwh"])
    no_signal = max(min(no_signal, hours - sliced), Decimal(0))
    billed = Decimal(r["billed"])
    marked = sliced + no_signal
    # a line without hours (only a correction's amount) keeps it: nothing measures it
    kept = billed * marked / hours if hours > 0 else billed
    mig = min(_dec(r["gpu_hours_mig"]), no_signal) if basis == "energy" else Decimal(0)
    no_signal_label = "no activity signal" if basis == "active" else "no energy reading"
    labels = [lab for lab, h in (("time-sliced", sliced), (no_signal_label, no_signal - mig),
                                 ("MIG slice (energy is its GPU's)", mig)) if h > 0]
    return {"business_unit": r["business_unit"], "project": r["project"], "gpu_hours": float(hours),
            "gpu_hours_time_sliced": float(sliced), "gpu_hours_no_signal": float(no_signal),
            "gpu_hours_measured": float(hours - marked), "measure": float(measure), "billed": billed,
            "kept_allocated": kept, "marked": "; ".join(labels)}


def redistributed(lines: list[dict], idle_billed: Decimal) -> tuple[Decimal, list[Decimal], Decimal]:
    """(pool total, each line's exact showback, the idle line's): the pool's total less the kept
    amounts is shared by the measured lines in proportion to their measure; with nothing
    measured every line keeps its charge and the idle stays idle."""
    total = sum((r["billed"] for r in lines), idle_billed)
    weight = sum(Decimal(str(r["measure"])) for r in lines if r["gpu_hours_measured"] > 0)
    shared = total - sum((r["kept_allocated"] for r in lines), Decimal(0))
    exact = []
    for r in lines:
        if weight > 0:
            mine_w = Decimal(str(r["measure"])) if r["gpu_hours_measured"] > 0 else Decimal(0)
            exact.append(r["kept_allocated"] + shared * mine_w / weight)
        else:
            exact.append(r["billed"])
    return total, exact, Decimal(0) if weight > 0 else idle_billed


def pool_showback(key: tuple, lines: list[dict], idle_row: dict | None, basis: str) -> list[dict]:
    """A pool's showback rows: its measured lines (:func:`measured_line`) and its idle line, each
    in cents by largest remainder of the exact shares, so they add up to the pool's billed total."""
    idle_billed = Decimal(idle_row["billed"]) if idle_row else Decimal("0.00")
    total, exact, idle_exact = redistributed(lines, idle_billed)
    shown = largest_remainder(total, [*exact, idle_exact]) if (lines or idle_row) else []
    out = [{**r, "showback": c, "kept_allocated": cents(r["kept_allocated"])}  # half-up, as every amount
           for r, c in zip(lines, shown, strict=False)]
    if idle_row is not None:
        out.append({"business_unit": ORG_LINES, "project": "(idle)", "gpu_hours": float(_dec(idle_row["gpu_hours"])),
                    "gpu_hours_time_sliced": 0.0, "gpu_hours_no_signal": 0.0, "gpu_hours_measured": 0.0,
                    "measure": 0.0, "billed": idle_billed, "kept_allocated": Decimal("0.00"),
                    "showback": shown[-1], "marked": ""})
    return [{**r, "currency": key[0], "gpu_model": key[1], "tier": key[2], "basis": basis,
             "measure_unit": MEASURE_UNIT[basis], "idle_redistributed": r["showback"] - r["billed"]} for r in out]


def showback_sentences(frame: pl.DataFrame) -> list[str]:
    """Per pool, one line a reader checks the showback by: the idle redistributed, the marked
    hours kept at their allocated share, and Σ showback = Σ billed."""
    out = []
    for (cur, model, tier), g in frame.group_by(POOL, maintain_order=True):
        billed, shown = sum(g["billed"].to_list(), Decimal(0)), sum(g["showback"].to_list(), Decimal(0))
        moved = -sum((d for d, p in zip(g["idle_redistributed"], g["project"], strict=True) if p == "(idle)"),
                     Decimal(0))
        sliced, no_sig = g["gpu_hours_time_sliced"].sum(), g["gpu_hours_no_signal"].sum()
        unit = g["measure_unit"][0]
        out.append(f"{cur} {model} / {tier}: billed {billed:,.2f}, shown {shown:,.2f} by {unit} "
                   f"({'equal' if billed == shown else 'DIFFERENT'}); idle redistributed {moved:,.2f}; "
                   f"kept at their allocated share: {sliced:,.3f} GPU-hours time-sliced, {no_sig:,.3f} GPU-hours "
                   f"{'without an activity signal' if unit.startswith('active') else 'without an energy reading of their own (none, or a MIG slice)'}")
    return out


SHOWBACK_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:"DejaVu Sans",sans-serif;margin:24px;max-width:1200px}
table{border-collapse:collapse;font-size:12px;width:100%}th,td{border:1px solid #ddd;padding:3px 6px;
vertical-align:top}th{background:#f2f2f2;text-align:left}td.num{text-align:right;white-space:nowrap}
p.small{color:#555;font-size:12px}@page{size:A4 landscape;margin:12mm}
@media print{body{margin:0;max-width:none}table{font-size:9px}}</style></head>
<body><h1>{{ title }}</h1><p><b>Not the ledger of record:</b> the statement's amounts stand; this view re-weights
each GPU pool's billed amount by {{ unit }}. {{ state }}</p>
<ul>{% for s in sentences %}<li>{{ s }}</li>{% endfor %}</ul>
<table><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for v in row %}<td{% if v.num %} class="num"{% endif %}>{{ v.text }}</td>{% endfor %}</tr>
{% endfor %}</table>
<p class="small">Marked hours keep their allocated share (billed × marked ÷ allocated GPU-hours): hours on a
time-sliced GPU (several holders at once: whose activity or energy it is cannot be told) and hours the basis cannot
measure. The rest of each pool, its idle included, is shared by the measured lines in proportion to {{ unit }}; the
pool's idle line shows what left it. Every column, by its machine name, is in the CSV beside this page.</p>
</body></html>
"""
HEADERS = {"business_unit": "Business unit", "project": "Project", "gpu_model": "GPU model", "tier": "Tier",
           "gpu_hours": "Allocated (GPU-h)", "gpu_hours_time_sliced": "Time-sliced (GPU-h)",
           "gpu_hours_no_signal": "Unmeasured (GPU-h)", "measure": "Measure ({unit})", "billed": "Billed ({cur})",
           "showback": "Showback ({cur})", "idle_redistributed": "Idle redistributed ({cur})", "marked": "Marked"}


def render_showback_html(st: Statement, frame: pl.DataFrame, basis: str) -> str:
    """The showback as a reader opens it: human headers with units, the per-pool sentences."""
    from jinja2 import Environment, select_autoescape  # lazy: optional extra gpuledger[reports]

    cur = ", ".join(sorted(set(frame["currency"].drop_nulls().to_list()))) or "?"
    unit = MEASURE_UNIT[basis]
    cols = list(HEADERS)
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    return env.from_string(SHOWBACK_TEMPLATE).render(
        title=f"GPU showback by {unit}, {st.period} — {st.scope}", unit=unit, state=st.status_sentence,
        sentences=showback_sentences(frame), columns=[HEADERS[c].format(unit=unit, cur=cur) for c in cols],
        rows=html_rows(frame.select(cols)))
