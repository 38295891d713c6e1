"""Properties of the rules kernel (issue 40), over random inputs (Hypothesis): rounding to the cent,
the largest-remainder split, MIG shares, periods, the billed-line rule in polars and SQL, the
clock's writer and reader. Each names the law it checks; hand-picked cases live in the kernel's own
test files beside this one."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import duckdb
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.rules.billing import BILLED_KINDS, CORRECTION_KINDS, LINE_KINDS, billed_expr, billed_sql
from gpuledger.rules.clock import epoch_iso_z, iso_z, parse_iso, parse_utc
from gpuledger.rules.mig import find_profile, mig_fraction, mig_slices, total_slices
from gpuledger.rules.money import cents, half_up_cents, largest_remainder
from gpuledger.rules.periods import month_bounds, months_between, next_month, week_bounds

AMOUNTS = st.decimals(min_value=Decimal("-1000000"), max_value=Decimal("1000000"), places=6,
                      allow_nan=False, allow_infinity=False)
MOMENTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31))


@settings(max_examples=300, deadline=None)
@given(AMOUNTS)
def test_cents_is_half_away_from_zero_and_the_column_rule_agrees(amount):
    c = cents(amount)
    assert c == c.quantize(Decimal("0.01"))
    assert abs(c - amount) <= Decimal("0.005")  # within half a cent
    assert cents(-amount) == -c  # symmetric: half away from zero, never to even
    if abs(amount * 100 - (amount * 100).to_integral_value(rounding=ROUND_HALF_EVEN)) == Decimal("0.5"):
        assert abs(c) > abs(amount)  # an exact half goes away from zero
    col = pl.DataFrame({"a": [amount]}, schema={"a": pl.Decimal(38, 12)}).select(half_up_cents(pl.col("a")))
    assert col.item() == c


@settings(max_examples=300, deadline=None)
@given(st.decimals(min_value=0, max_value=Decimal("100000"), places=2),
       st.lists(st.decimals(min_value=0, max_value=Decimal("1000"), places=3), min_size=1, max_size=12))
def test_largest_remainder_adds_up_exactly_and_each_part_is_within_a_cent(total, weights):
    parts = largest_remainder(total, weights)
    assert len(parts) == len(weights) and sum(parts) == total  # to the cent, always
    whole = sum(weights)
    if whole > 0:
        for part, w in zip(parts, weights, strict=True):
            assert abs(part - total * w / whole) < Decimal("0.01")  # the floor, or one cent more
            assert part >= 0


PROFILES = st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb", "1c.3g.40gb",
                            "1g.10gb+me", "1g.6gb", "2g.12gb", "4g.24gb", "1g.23gb", "7g.180gb"])
MODELS = st.sampled_from([None, "A100", "H100", "H200", "B200", "A30", "NVIDIA H100 80GB HBM3"])


@settings(max_examples=200, deadline=None)
@given(PROFILES, MODELS, st.sampled_from(["", "nvidia.com/mig-", "nvidia_a100_", "NVIDIA A100-SXM4-40GB MIG "]))
def test_a_profile_is_the_same_share_whatever_the_source_calls_it(profile, model, prefix):
    found = find_profile(prefix + profile)
    assert found == profile
    share = mig_fraction(found, model)
    slices, total = mig_slices(profile), total_slices(model, profile)
    if slices > total:
        assert share is None  # more slices than the model has: a typo, never a share above 1
    else:
        assert share == slices / total and 0 < share <= 1


@settings(max_examples=200, deadline=None)
@given(st.integers(2000, 2098), st.integers(1, 12))
def test_months_tile_time_without_gap_or_overlap(year, month):
    start, end = month_bounds(f"{year:04d}-{month:02d}")
    assert start == datetime(year, month, 1) and end == next_month(start)
    after, _ = month_bounds(f"{end.year:04d}-{end.month:02d}")
    assert after == end  # the next month starts where this one ends
    assert months_between(start, end) == [f"{year:04d}-{month:02d}"]
    assert 28 <= (end - start).days <= 31


@settings(max_examples=200, deadline=None)
@given(MOMENTS)
def test_every_moment_is_in_exactly_one_iso_week_from_monday(moment):
    year, week, _ = moment.isocalendar()
    start, end = week_bounds(f"{year}-W{week:02d}")
    assert start <= moment < end and end - start == timedelta(days=7) and start.weekday() == 0


@settings(max_examples=300, deadline=None)
@given(MOMENTS.map(lambda m: m.replace(microsecond=0)))
def test_the_clock_writes_what_it_reads(moment):
    text = iso_z(moment)
    assert text.endswith("Z") and parse_iso(text) == moment and parse_utc(text) == moment
    epoch = (moment - datetime(1970, 1, 1)).total_seconds()
    assert epoch_iso_z(epoch) == text and parse_utc(str(int(epoch))) == moment


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINE_KINDS + CORRECTION_KINDS), st.sampled_from([None, *LINE_KINDS])),
                min_size=1, max_size=20))
def test_the_billed_rule_is_the_same_in_polars_and_sql(lines):
    # a correction names the kind it corrects; an original line names none
    rows = [(kind, corrects if kind in CORRECTION_KINDS else None) for kind, corrects in lines]
    frame = pl.DataFrame(rows, schema={"line_kind": pl.String, "correction_of": pl.String}, orient="row")
    in_polars = frame.select(billed_expr()).to_series().to_list()
    con = duckdb.connect()
    con.register("lines", frame.to_arrow())
    in_sql = [r[0] for r in con.execute(f"SELECT {billed_sql()} FROM lines").fetchall()]
    assert in_polars == in_sql
    for (kind, corrects), is_billed in zip(rows, in_polars, strict=True):
        assert is_billed == ((corrects or kind) in BILLED_KINDS)  # a correction billed as what it corrects
