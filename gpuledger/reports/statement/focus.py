"""A statement's lines as a FinOps FOCUS 1.2 cost and usage dataset: one row per statement line,
so finance loads GPU time in the shape it already loads its cloud bills in.

The mapping (FOCUS column ← statement):

* BillingPeriodStart/End ← the month; ChargePeriodStart/End ← the month up to the data's end
  (``billed_through``) — all ISO 8601 UTC with ``Z``.
* BilledCost = EffectiveCost = ListCost = ContractedCost ← ``amount`` of a billed line (charge,
  idle and their corrections): an internal rate card has no discount, commitment amortization or
  negotiated price, so the four agree; Σ BilledCost is the statement's total to the cent.
  Memo lines (over-allocated, capacity-unknown, unpriced) are owed by nobody: their costs are 0.00
  and their amount is kept in ``x_MemoAmount``.
* ChargeCategory ``Usage`` for every line (GPU time used, or capacity nobody used); ChargeClass
  ``Correction`` on a closed month's credit / debit lines (the revision that made them in
  ``x_Revision``), null otherwise.
* PricingCategory ← tier: reserved → ``Committed``, on-demand → ``Standard``, spot → ``Dynamic``,
  no tier → ``Other``. PricingQuantity / ConsumedQuantity ← GPU-hours, unit ``GPU-Hours``.
* Unallocated cost: FOCUS states capacity that was paid for and not used as an *unused capacity
  reservation*: CapacityReservationId names the GPU pool (model / tier), CapacityReservationStatus is
  ``Unused`` on the idle lines and ``Used`` on the charges; idle lines have no SubAccount and no
  project tags (nobody's).
* SubAccountId / SubAccountName ← the org tree node the line bills (the project), SubAccountType
  ``Project``; Tags ← ``{"business_unit": ..., "project": ...}``; ResourceId / ResourceName ←
  the GPU pool.
* ``x_`` columns (FOCUS's prefix for provider-defined columns): allocated / active / idle /
  unknown GPU-hours, the MIG profiles of the line's hours, the line kind, what a correction
  corrects, the statement's revision and state.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import polars as pl

from gpuledger.reports.statement.build import ORG_LINES, UNASSIGNED, Statement
from gpuledger.rules.billing import BILLED_KINDS, billed_expr
from gpuledger.rules.clock import iso_z

PRICING_CATEGORY = {"reserved": "Committed", "on-demand": "Standard", "spot": "Dynamic"}
SERVICE_NAME = "GPU compute"
SERVICE_CATEGORY, SERVICE_SUBCATEGORY = "Compute", "Other (Compute)"
PRICING_UNIT = "GPU-Hours"
_MONEY = pl.Decimal(38, 2)
_HOURS = pl.Decimal(38, 6)

# The FOCUS columns in the file, in the specification's (alphabetical) order, then the x_ columns.
FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "CapacityReservationId", "CapacityReservationStatus", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity",
    "ConsumedUnit", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ResourceId", "ResourceName",
    "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
]
X_COLUMNS = ["x_GpuHoursAllocated", "x_GpuHoursActive", "x_GpuHoursIdle", "x_GpuHoursUnknown", "x_MigProfiles",
             "x_LineKind", "x_CorrectionOf", "x_MemoAmount", "x_Revision", "x_StatementStatus", "x_BusinessUnit",
             "x_Project", "x_EnergyKwhFacility", "x_KgCO2e"]


def _tags(unit: str | None, project: str | None) -> str | None:
    """FOCUS Tags: a JSON object of the line's owner (keys sorted, so files are byte-stable)."""
    tags = {}
    if unit and unit not in (ORG_LINES, UNASSIGNED):
        tags["business_unit"] = unit
    if project and not project.startswith("("):
        tags["project"] = project
    return json.dumps(tags, sort_keys=True, separators=(",", ":")) if tags else None


def _description(kind: str, correction_of: str | None, project: str | None, model: str | None,
                 tier: str | None, revision, note: str | None) -> str:
    pool = f"{model or 'unknown model'} ({tier or 'no tier'})"
    base = correction_of or kind
    if base == "charge":
        text = f"GPU time of {project} on {pool}, allocated GPU-hours × rate card price"
    elif base == "idle":
        text = f"Idle capacity: {pool} GPU-hours nobody held (unused, billed to the org)"
    else:
        text = f"Memo, not billed ({base}): {project or ''} {pool}".replace("  ", " ")
    if correction_of:
        text = f"Correction ({kind}, revision {revision}) of {text[0].lower()}{text[1:]}"
    if note:
        text += f" — {note}"
    return text


def focus_rows(st: Statement) -> pl.DataFrame:
    """The statement's lines as FOCUS rows (FOCUS_COLUMNS + X_COLUMNS), in the statement's order."""
    lines = st.lines
    profiles = _mig_profiles(st)
    energy = _line_energy(st)
    root = st.parent or st.scope
    through = min(st.period_end, st.billed_through)
    rows = []
    billed = lines.select(billed_expr(has_corrections=True).alias("b"))["b"].to_list()
    for line, is_billed in zip(lines.iter_rows(named=True), billed, strict=True):
        kind, fixes = line["line_kind"], line["correction_of"]
        base = fixes or kind
        amount = line["amount"] if line["amount"] is not None else Decimal("0.00")
        cost = amount if is_billed else Decimal("0.00")
        model, tier, project, unit = line["gpu_model"], line["tier"], line["project"], line["business_unit"]
        owned = base == "charge" and project is not None and not project.startswith("(")
        pool = f"gpu-pool/{model}/{tier}" if model and tier else None
        hours = line["gpu_hours"] or 0.0
        active, unknown = line["gpu_hours_active"], line["gpu_hours_unknown"]
        idle_hours = (hours if base == "idle" else
                      max(hours - (active or 0.0) - (unknown or 0.0), 0.0) if base == "charge" and active is not None
                      else None)
        kwh, co2 = energy.get((project, model, tier), (None, None)) if base == "charge" and not fixes else (None, None)
        rows.append({
            "BilledCost": cost, "BillingAccountId": root, "BillingAccountName": root,
            "BillingCurrency": line["currency"], "BillingPeriodEnd": iso_z(st.period_end),
            "BillingPeriodStart": iso_z(st.period_start),
            "CapacityReservationId": pool if base in BILLED_KINDS else None,
            "CapacityReservationStatus": ("Unused" if base == "idle" else "Used") if pool and base in BILLED_KINDS
            else None,
            "ChargeCategory": "Usage", "ChargeClass": "Correction" if fixes else None,
            "ChargeDescription": _description(kind, fixes, project, model, tier, line["revision"], line["note"]),
            "ChargeFrequency": "Usage-Based",
            "ChargePeriodEnd": iso_z(through), "ChargePeriodStart": iso_z(st.period_start),
            "ConsumedQuantity": hours, "ConsumedUnit": PRICING_UNIT,
            "ContractedCost": cost, "EffectiveCost": cost, "InvoiceIssuerName": root, "ListCost": cost,
            "PricingCategory": PRICING_CATEGORY.get(tier or "", "Other"),
            "PricingQuantity": hours, "PricingUnit": PRICING_UNIT,
            "ProviderName": root, "PublisherName": root,
            "ResourceId": pool, "ResourceName": f"{model} GPUs, {tier}" if pool else None,
            "ResourceType": "GPU pool" if pool else None,
            "ServiceCategory": SERVICE_CATEGORY, "ServiceName": SERVICE_NAME, "ServiceSubcategory": SERVICE_SUBCATEGORY,
            "SubAccountId": project if owned else None, "SubAccountName": project if owned else None,
            "SubAccountType": "Project" if owned else None,
            "Tags": _tags(unit, project) if owned else None,
            "x_GpuHoursAllocated": hours if base == "charge" else None,
            "x_GpuHoursActive": active, "x_GpuHoursIdle": idle_hours, "x_GpuHoursUnknown": unknown,
            "x_MigProfiles": profiles.get((project, model, tier)) if base == "charge" else None,
            "x_LineKind": kind, "x_CorrectionOf": fixes,
            "x_MemoAmount": None if is_billed else line["amount"],
            "x_Revision": line["revision"], "x_StatementStatus": line["status"],
            "x_BusinessUnit": None if unit in (ORG_LINES,) else unit, "x_Project": project,
            "x_EnergyKwhFacility": kwh, "x_KgCO2e": co2,
        })
    schema = {c: pl.String for c in [*FOCUS_COLUMNS, *X_COLUMNS]}
    schema.update({c: _MONEY for c in ("BilledCost", "ContractedCost", "EffectiveCost", "ListCost", "x_MemoAmount")})
    schema.update({c: pl.Float64 for c in ("ConsumedQuantity", "PricingQuantity", "x_GpuHoursAllocated",
                                           "x_GpuHoursActive", "x_GpuHoursIdle", "x_GpuHoursUnknown",
                                           "x_EnergyKwhFacility", "x_KgCO2e")})
    schema["x_Revision"] = pl.Int64
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    # quantities as exact decimals (FOCUS's Decimal: no exponent, '.' separator), to the microhour
    return frame.with_columns(pl.col("ConsumedQuantity", "PricingQuantity").round(6).cast(_HOURS))


def _mig_profiles(st: Statement) -> dict[tuple, str]:
    """(project, model, tier) -> the MIG profiles its hours ran on, sorted and comma-joined."""
    usage = st.usage
    if not usage.height or "mig_profile" not in usage.columns:
        return {}
    got = (usage.filter(pl.col("mig_profile").is_not_null())
           .group_by("project", "model", "tier").agg(pl.col("mig_profile").unique().sort().str.join(", ")))
    return {(p, m, t): v for p, m, t, v in got.iter_rows()}


def _line_energy(st: Statement) -> dict[tuple, tuple[float | None, float | None]]:
    """(project, model, tier) -> (facility kWh, kgCO2e) of the charge line, None where unknown."""
    usage = st.usage
    if not usage.height or "energy_kwh_facility" not in usage.columns:
        return {}
    got = usage.group_by("project", "model", "tier").agg(
        pl.col("energy_kwh_facility").sum(), pl.col("kg_co2e").sum(),
        pl.col("energy_kwh_facility").is_not_null().any().alias("_e"), pl.col("kg_co2e").is_not_null().any().alias("_c"))
    return {(p, m, t): (round(e, 6) if has_e else None, round(c, 6) if has_c else None)
            for p, m, t, e, c, has_e, has_c in got.iter_rows()}


def write_focus(st: Statement, path: Path) -> Path:
    """The FOCUS rows as CSV: UTF-8, a header row, decimals exact, empty for null."""
    path.write_text(focus_rows(st).write_csv(float_precision=6, null_value=""))
    return path
