"""The FOCUS export (issue 39 §1): a statement's lines as a FinOps FOCUS 1.2 dataset that passes the
specification's column rules and adds up to the statement's total to the cent, a corrected month
included. Figures as in tests/helpers/statement_fixtures.py (October 2026, 3720.00 USD).

The official validator (PyPI ``focus-validator``) validates FOCUS 1.1/1.2 only from 2.0 on, which
needs Python 3.12 (this project runs 3.11), and its 1.0.0 checks the pre-release 1.0 column names
(``Provider``, ``InvoiceIssuer``, ``ResourceID``) and no longer imports with a current
``multimethod``. So the column rules are derived here from the published specification's column
definitions (FOCUS_Spec ``specification/columns/*.md``, 1.2): type, whether null is allowed, allowed
values, and the conditional rules that bind this data.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.ledger import periods
from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.files import write_statement_set
from tests.helpers.statement_fixtures import october

D = Decimal

# column -> (data type, nulls allowed, allowed values or None). Mandatory columns of FOCUS 1.2 and
# the conditional ones this dataset carries (a provider with capacity reservations, sub accounts,
# resources, tags and pricing categories must present them).
SPEC = {
    "BilledCost": ("Decimal", False, None),
    "BillingAccountId": ("String", False, None),
    "BillingAccountName": ("String", True, None),
    "BillingCurrency": ("Currency", False, None),
    "BillingPeriodEnd": ("DateTime", False, None),
    "BillingPeriodStart": ("DateTime", False, None),
    "CapacityReservationId": ("String", True, None),
    "CapacityReservationStatus": ("String", True, {"Used", "Unused"}),
    "ChargeCategory": ("String", False, {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}),
    "ChargeClass": ("String", True, {"Correction"}),
    "ChargeDescription": ("String", True, None),
    "ChargeFrequency": ("String", False, {"One-Time", "Recurring", "Usage-Based"}),
    "ChargePeriodEnd": ("DateTime", False, None),
    "ChargePeriodStart": ("DateTime", False, None),
    "ConsumedQuantity": ("Decimal", True, None),
    "ConsumedUnit": ("String", True, None),
    "ContractedCost": ("Decimal", False, None),
    "EffectiveCost": ("Decimal", False, None),
    "InvoiceIssuerName": ("String", False, None),
    "ListCost": ("Decimal", False, None),
    "PricingCategory": ("String", True, {"Standard", "Dynamic", "Committed", "Other"}),
    "PricingQuantity": ("Decimal", True, None),
    "PricingUnit": ("String", True, None),
    "ProviderName": ("String", False, None),
    "PublisherName": ("String", False, None),
    "ResourceId": ("String", True, None),
    "ResourceName": ("String", True, None),
    "ResourceType": ("String", True, None),
    "ServiceCategory": ("String", False, {
        "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases", "Developer Tools",
        "Multicloud", "Identity", "Integration", "Internet of Things", "Management and Governance", "Media",
        "Migration", "Mobile", "Networking", "Security", "Storage", "Web", "Other"}),
    "ServiceName": ("String", False, None),
    # each subcategory has one parent category; the Compute ones
    "ServiceSubcategory": ("String", False, {"Containers", "End User Computing", "Quantum", "Serverless Compute",
                                             "Virtual Machines", "Other (Compute)"}),
    "SubAccountId": ("String", True, None),
    "SubAccountName": ("String", True, None),
    "SubAccountType": ("String", True, None),
    "Tags": ("KeyValue", True, None),
}
# DateTime: ISO 8601 in UTC, "YYYY-MM-DDTHH:mm:ssZ"; Decimal: digits, optional sign and '.', no
# exponent or thousands separator; Currency: ISO 4217 (three capital letters)
FORMATS = {"DateTime": re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"),
           "Decimal": re.compile(r"^-?\d+(\.\d+)?$"), "Currency": re.compile(r"^[A-Z]{3}$")}


def violations(path) -> list[str]:
    """Every breach of the column rules in the FOCUS CSV at ``path`` (empty: it conforms)."""
    frame = pl.read_csv(path, infer_schema=False)
    out = [f"missing column {c}" for c in SPEC if c not in frame.columns]
    # custom columns: only with the x_ prefix (FOCUS column naming: provider-defined columns)
    out += [f"column {c} is neither FOCUS nor x_-prefixed" for c in frame.columns if c not in SPEC and
            not c.startswith("x_")]
    for col, (kind, nullable, allowed) in SPEC.items():
        if col not in frame.columns:
            continue
        for i, value in enumerate(frame[col].to_list()):
            where = f"row {i + 2} {col}"
            if value is None:
                if not nullable:
                    out.append(f"{where}: null in a column that allows none")
                continue
            if kind in FORMATS and not FORMATS[kind].match(value):
                out.append(f"{where}: {value!r} is not a {kind}")
            if kind == "KeyValue":
                parsed = json.loads(value)
                if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                    out.append(f"{where}: not a JSON object of strings")
            if allowed is not None and value not in allowed:
                out.append(f"{where}: {value!r} not an allowed value")
    for i, r in enumerate(frame.iter_rows(named=True)):
        where = f"row {i + 2}"
        # ChargeClass: not null exactly on corrections
        if (r["ChargeClass"] == "Correction") != (r["x_CorrectionOf"] is not None):
            out.append(f"{where}: ChargeClass does not match the correction")
        # PricingQuantity / PricingUnit / PricingCategory: not null for Usage that is not a correction
        if r["ChargeCategory"] == "Usage" and r["ChargeClass"] is None:
            for c in ("PricingQuantity", "PricingUnit", "PricingCategory"):
                if r[c] is None:
                    out.append(f"{where}: {c} null on a usage charge")
        # ConsumedUnit with ConsumedQuantity; CapacityReservationStatus with CapacityReservationId
        if (r["ConsumedQuantity"] is None) != (r["ConsumedUnit"] is None):
            out.append(f"{where}: ConsumedQuantity and ConsumedUnit disagree on null")
        if (r["CapacityReservationId"] is None) != (r["CapacityReservationStatus"] is None):
            out.append(f"{where}: a capacity reservation without a status, or the reverse")
        # no discount, commitment or negotiation: all four costs are the billed amount
        if len({r["BilledCost"], r["EffectiveCost"], r["ListCost"], r["ContractedCost"]}) != 1:
            out.append(f"{where}: the four costs differ")
        if r["ChargePeriodStart"] < r["BillingPeriodStart"] or r["ChargePeriodEnd"] > r["BillingPeriodEnd"]:
            out.append(f"{where}: charge period outside the billing period")
    return out


@pytest.fixture
def month(warehouse_file):
    october(warehouse_file)
    return warehouse_file


def _statement(path, out):
    with warehouse.open_reader(path) as con:
        st = build_statement(con, "2026-10")
    return st, write_statement_set(st, out)


def test_focus_file_passes_the_column_rules_and_adds_up_to_the_statement(month, tmp_path):
    out = tmp_path / "oct"
    st, manifest = _statement(month, out)
    focus = out / "statement-2026-10-acme-focus.csv"
    assert "statement-2026-10-acme-focus.csv" in {f["path"] for f in manifest["files"]}
    assert "units/research/statement-2026-10-research-focus.csv" in {f["path"] for f in manifest["files"]}
    assert violations(focus) == []
    rows = pl.read_csv(focus, infer_schema=False)
    # one row per statement line, Σ BilledCost = 480 + 48 + 240 + 2448 + 504 = 3720.00 = the total
    assert rows.height == st.lines.height == 5
    assert sum(D(v) for v in rows["BilledCost"]) == D(manifest["totals"]["USD"]) == D("3720.00")
    by = {(r["x_LineKind"], r["x_Project"], r["ResourceId"]): r for r in rows.iter_rows(named=True)}
    alpha = by[("charge", "alpha", "gpu-pool/H100/reserved")]
    # alpha: 240 GPU-hours of reserved H100 at 2.00: a used committed capacity, its project's sub account
    assert (alpha["BilledCost"], alpha["PricingQuantity"], alpha["PricingUnit"], alpha["PricingCategory"]) == \
        ("480.00", "240.000000", "GPU-Hours", "Committed")
    assert (alpha["SubAccountId"], alpha["CapacityReservationStatus"], json.loads(alpha["Tags"])) == \
        ("alpha", "Used", {"business_unit": "research", "project": "alpha"})
    assert (alpha["BillingPeriodStart"], alpha["BillingPeriodEnd"]) == ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z")
    # gamma: 24 h allocated, 12 active (sm_active 0.5 all day), so 12 idle, none unknown
    gamma = by[("charge", "gamma", "gpu-pool/H100/reserved")]
    assert [float(gamma[c]) for c in ("x_GpuHoursAllocated", "x_GpuHoursActive", "x_GpuHoursIdle",
                                      "x_GpuHoursUnknown")] == [24.0, 12.0, 12.0, 0.0]
    # idle H100: 1224 h nobody held, the unused part of the org's capacity, nobody's sub account or tags
    idle = by[("idle", "(idle)", "gpu-pool/H100/reserved")]
    assert (idle["BilledCost"], idle["CapacityReservationStatus"], idle["SubAccountId"], idle["Tags"]) == \
        ("2448.00", "Unused", None, None)
    assert float(idle["x_GpuHoursIdle"]) == 1224.0


def test_the_rules_catch_a_broken_file(month, tmp_path):
    """The checker fails on what the specification forbids (so a passing file means something)."""
    out = tmp_path / "oct"
    _statement(month, out)
    rows = pl.read_csv(out / "statement-2026-10-acme-focus.csv", infer_schema=False)
    broken = rows.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("Reserved"))
                               .otherwise(pl.col("PricingCategory")).alias("PricingCategory"),
                               pl.lit("2026-10-01 00:00").alias("BillingPeriodStart")).drop("ServiceName")
    broken.write_csv(tmp_path / "broken.csv")
    found = violations(tmp_path / "broken.csv")
    assert "missing column ServiceName" in found
    assert "row 2 PricingCategory: 'Reserved' not an allowed value" in found
    assert any("BillingPeriodStart" in f and "DateTime" in f for f in found)


def test_tiers_map_to_pricing_categories(month):
    from dataclasses import replace

    from gpuledger.reports.statement.focus import focus_rows

    with warehouse.open_reader(month) as con:
        st = build_statement(con, "2026-10")
    tiers = ["reserved", "on-demand", "spot", None, "reserved"]
    st = replace(st, lines=st.lines.with_columns(tier=pl.Series(tiers, dtype=pl.String)))
    assert focus_rows(st)["PricingCategory"].to_list() == ["Committed", "Standard", "Dynamic", "Other", "Committed"]


def test_a_corrected_month_carries_its_corrections_as_their_own_charge_class(month, tmp_path):
    """As test_statement's corrected month: closed at 3720.00, re-priced from Oct 6 and corrected by
    +499.20 (4219.20 in all). The FOCUS rows: the issued lines unchanged, each correction its own row
    with ChargeClass "Correction", and Σ BilledCost = 4219.20 to the cent."""
    from tests.helpers.ledger_fixtures import load
    from tests.helpers.statement_fixtures import CONFIG

    with warehouse.open_writer(month) as con:
        periods.close_period(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
        load(con, CONFIG + '  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.50", effective_from: '
             '2026-10-06}\n  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "0.80", effective_from: '
             '2026-10-06}\n', at=datetime(2026, 11, 10))
        periods.correct_period(con, "2026-10", reason="October prices", by="finance", now=datetime(2026, 11, 10))
    out = tmp_path / "oct"
    _, manifest = _statement(month, out)
    focus = out / "statement-2026-10-acme-focus.csv"
    assert violations(focus) == []
    rows = pl.read_csv(focus, infer_schema=False)
    assert sum(D(v) for v in rows["BilledCost"]) == D(manifest["totals"]["USD"]) == D("4219.20")
    fixes = rows.filter(pl.col("ChargeClass") == "Correction")
    issued = rows.filter(pl.col("ChargeClass").is_null())
    assert sum(D(v) for v in fixes["BilledCost"]) == D("499.20")
    assert sum(D(v) for v in issued["BilledCost"]) == D("3720.00")
    assert set(fixes["x_Revision"].to_list()) == {"1"} and set(issued["x_Revision"].to_list()) == {"0"}
    # alpha's correction: 120 h at 2.50 instead of 2.00 = +60.00, a charge corrected
    alpha = fixes.filter(pl.col("x_Project") == "alpha").row(0, named=True)
    assert (alpha["BilledCost"], alpha["x_CorrectionOf"], alpha["ChargeCategory"]) == ("60.00", "charge", "Usage")


def test_report_statement_format_focus_writes_the_focus_file_alone(month, tmp_path):
    from typer.testing import CliRunner

    from gpuledger.cli import app

    out = tmp_path / "focus"
    result = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(out), "--format",
                                      "focus", "--warehouse", str(month)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["statement-2026-10-acme-focus.csv"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "statement-2026-10-acme-focus.csv"]
    bad = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(out), "--format",
                                   "xml", "--warehouse", str(month)])
    assert bad.exit_code == 2 and "--format" in bad.output


def test_a_simulated_months_focus_file_passes_the_rules_and_sums_to_the_statement(dashboard_warehouse, tmp_path):
    """The simulator's November (two clusters, the dashboards' rig): every row conforms, one row per
    line, Σ BilledCost = the statement's total per currency to the cent, and every billed line's
    tier maps to its pricing category."""
    from gpuledger.reports.statement.focus import PRICING_CATEGORY

    with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
        st = build_statement(con, "2026-11")
    manifest = write_statement_set(st, tmp_path / "nov", per_unit=False, focus_only=True)
    focus = tmp_path / "nov" / "statement-2026-11-acme-focus.csv"
    assert violations(focus) == []
    rows = pl.read_csv(focus, infer_schema=False)
    assert rows.height == st.lines.height > 5
    for currency, total in manifest["totals"].items():
        mine = rows.filter(pl.col("BillingCurrency") == currency)
        assert sum(D(v) for v in mine["BilledCost"]) == D(total)
    tiers = dict(zip(st.lines["tier"].to_list(), rows["PricingCategory"].to_list(), strict=True))
    assert all(PRICING_CATEGORY.get(t or "", "Other") == c for t, c in tiers.items())
