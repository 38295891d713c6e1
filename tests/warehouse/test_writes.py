import datetime as dt

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.analytics.attribution import hourly_rollup
from gpuledger.warehouse.rollups import rollup_frame
from gpuledger.warehouse.writes import table_counts


def test_samples_keep_the_first_value_and_reingest_changes_nothing(warehouse_file):
    inv = pl.DataFrame({"cluster": ["c", "c"], "gpu_uuid": ["GPU-a", "GPU-b"], "host": ["n1", "n1"],
                        "model": ["H100", "H100"]})
    t0 = dt.datetime(2026, 11, 1)
    with warehouse.open_writer(warehouse_file) as con:
        ids = warehouse.register_gpus(con, inv)
        assert sorted(ids["gpu_id"].to_list()) == [1, 2]
        samples = ids.select("gpu_id").with_columns(ts=pl.lit(t0), power_w=pl.lit(300.0))
        assert warehouse.write_samples(con, samples, "test") == 2
        later = samples.with_columns(power_w=pl.lit(999.0))
        assert warehouse.write_samples(con, later, "test") == 0
        assert con.execute("SELECT DISTINCT power_w FROM gpu_samples").fetchall() == [(300.0,)]
        # Registering the same devices again returns the same ids and adds no inventory rows.
        again = warehouse.register_gpus(con, inv.with_columns(host=pl.lit("n1-renamed")))
        assert again.sort("gpu_uuid")["gpu_id"].to_list() == ids.sort("gpu_uuid")["gpu_id"].to_list()
        assert table_counts(con, ["gpus"]) == {"gpus": 2}
        assert con.execute("SELECT DISTINCT host FROM gpus").fetchall() == [("n1-renamed",)]


def test_upsert_updates_jobs_by_natural_key(warehouse_file):
    base = {"cluster": ["c"], "job_id": ["7"], "project": ["p"], "gpus": [1.0], "source": ["t"],
            "updated_at": [dt.datetime(2026, 11, 1)], "state": ["RUNNING"]}
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.upsert(con, "jobs", pl.DataFrame(base))
        warehouse.upsert(con, "jobs", pl.DataFrame({**base, "state": ["COMPLETED"]}))
        assert con.execute("SELECT count(*), any_value(state) FROM jobs").fetchone() == (1, "COMPLETED")


def test_upsert_refuses_unknown_tables_and_columns(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        with pytest.raises(ValueError, match="unknown warehouse table"):
            warehouse.upsert(con, "jobs; DROP TABLE jobs", pl.DataFrame({"a": [1]}))
        with pytest.raises(ValueError, match="does not have"):
            warehouse.upsert(con, "org_nodes", pl.DataFrame({"node": ["x"], "shares": [1.0],
                                                             "kind": ["p"], "colour": ["red"]}))


def test_quarantine_stores_the_same_bad_input_once(warehouse_file):
    bad = [warehouse.QuarantineRow("jobs-csv", "f.csv:3", "a,b", "gpus: not a number")]
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.quarantine(con, bad)
        warehouse.quarantine(con, bad)
        assert con.execute("SELECT location, reason FROM quarantine").fetchall() == [
            ("f.csv:3", "gpus: not a number")]


# ---- gpu_hourly kept by folding each batch's new rows in ------------------------------------------

T0 = dt.datetime(2026, 11, 1, 10)


def _rows(gpu_id, minutes, *, sm=0.5, energy=None, hour=T0):
    """One sample a minute at ``minutes`` past ``hour``; ``energy`` maps a minute to its counter value."""
    return [{"gpu_id": gpu_id, "ts": hour + dt.timedelta(minutes=m), "sm_active_ratio": sm,
             "gr_engine_active_ratio": None if m % 7 == 0 else min(1.4, m / 40), "gpu_util_ratio": -0.1 if m == 3 else 0.9,
             "energy_total_j": None if energy is None else energy.get(m)} for m in minutes]


def _frame(rows):
    return pl.DataFrame(rows, schema={"gpu_id": pl.Int32, "ts": pl.Datetime("us"), "sm_active_ratio": pl.Float64,
                                      "gr_engine_active_ratio": pl.Float64, "gpu_util_ratio": pl.Float64,
                                      "energy_total_j": pl.Float64})


def _rollup_equals_aggregating_again(con):
    stored = con.sql("SELECT * FROM gpu_hourly ORDER BY gpu_id, hour").pl()
    again = rollup_frame(con, T0 - dt.timedelta(hours=2), T0 + dt.timedelta(hours=4)).sort("gpu_id", "hour").collect()
    # counts, first / last energy and e_inside exactly; the sums of ratios up to their addition order
    assert_frame_equal(stored, again, check_dtypes=False, check_exact=False, rel_tol=1e-12, abs_tol=1e-12)
    exact = ["gpu_id", "hour", "s_n", "s_n_sm_active", "s_n_gr_engine_active", "s_n_gpu_util", "e_first", "e_last",
             "e_inside"]
    assert_frame_equal(stored.select(exact), again.select(exact), check_dtypes=False)
    samples = con.sql("SELECT * FROM gpu_samples").pl().lazy()
    mine = hourly_rollup(samples).sort("gpu_id", "hour").collect()
    assert_frame_equal(stored, mine.select(stored.columns), check_dtypes=False, abs_tol=1e-9)
    return stored


def test_rollup_of_batches_in_order_late_and_resent_equals_aggregating_again(warehouse_file):
    e1 = {m: 1000.0 + 10 * m for m in range(60)}           # GPU 1: a steady counter
    e2 = {m: 500.0 + 5 * m for m in range(60)} | {40: 520.0}  # GPU 2: a dip to 520, still above its first value
    e3 = {m: 2000.0 + m for m in range(30, 60)}            # GPU 3: energy only from 10:30
    batches = [
        _rows(1, range(0, 10), energy=e1) + _rows(2, range(0, 10), energy=e2) + _rows(3, range(0, 10), energy=e3),
        _rows(1, range(10, 20), energy=e1) + _rows(2, range(10, 20), energy=e2),          # in order: folded
        _rows(1, range(15, 25), energy=e1, sm=0.9) + _rows(3, range(10, 40), energy=e3),  # half re-sent
        _rows(2, range(20, 45), energy=e2, sm=1.7),                                       # the dip: jitter
        _rows(1, [5, 7, 30], energy=e1 | {30: 1300.0}),                                   # late among stored
        _rows(1, range(50, 60), energy=e1) + _rows(1, range(0, 20), hour=T0 + dt.timedelta(hours=1)),  # next hour
        _rows(1, range(0, 60), energy=e1) + _rows(2, range(0, 60), energy=e2) + _rows(3, range(0, 60), energy=e3),
    ]
    # rows new in each batch: keys not offered before (15-19 of GPU 1 and 0-9 of GPU 3 were, so were
    # 5 and 7); the last fills each hour to 60: GPU 1 had 0-24, 30, 50-59 (36), GPU 2 0-44, GPU 3 0-39
    new = [30, 20, 5 + 30, 25, 1, 10 + 20, 24 + 15 + 20]
    with warehouse.open_writer(warehouse_file) as con:
        for batch, want in zip(batches, new, strict=True):
            assert warehouse.write_samples(con, _frame(batch), "test") == want
            _rollup_equals_aggregating_again(con)
        assert warehouse.write_samples(con, _frame(batches[-1]), "test") == 0  # re-ingest: nothing new
        stored = _rollup_equals_aggregating_again(con)
        g1 = stored.filter(gpu_id=1, hour=T0).row(0, named=True)
        # 60 samples; sm 0.5 except 20-24 (0.9, first value of the re-sent 15-19 kept), so
        # Σ = 55·0.5 + 5·0.9 = 32.0; energy 1000 → 1590 without a drop: e_inside 590.
        assert (g1["s_n"], g1["e_first"], g1["e_last"], g1["e_inside"]) == (60, 1000.0, 1590.0, 590.0)
        assert g1["s_sm_active"] == pytest.approx(32.0)
        g2 = stored.filter(gpu_id=2, hour=T0).row(0, named=True)
        # the dip to 520 at 10:40 stays above the first value 500: jitter, e_inside = 795 − 500
        assert (g2["e_first"], g2["e_last"], g2["e_inside"]) == (500.0, 795.0, 295.0)
        # sm 1.7 of minutes 20-44 clipped to 1: Σ = 35·0.5 + 25·1 = 42.5
        assert g2["s_sm_active"] == pytest.approx(42.5)
        g3 = stored.filter(gpu_id=3, hour=T0).row(0, named=True)
        assert (g3["s_n_sm_active"], g3["e_first"], g3["e_last"], g3["e_inside"]) == (60, 2030.0, 2059.0, 29.0)


def test_rollup_walks_a_counter_reset_folded_in_a_later_batch(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.write_samples(con, _frame(_rows(1, [0, 1, 2], energy={0: 100.0, 1: 110.0, 2: 120.0})), "test")
        _rollup_equals_aggregating_again(con)
        warehouse.write_samples(con, _frame(_rows(1, [3, 4], energy={3: 130.0, 4: 5.0})), "test")
        g = _rollup_equals_aggregating_again(con).row(0, named=True)
        # increments 10 + 10 + 10, then the reset counts its new value 5: 35 (= 5 − 100 + 130)
        assert (g["e_first"], g["e_last"], g["e_inside"]) == (100.0, 5.0, 35.0)
        # and after the reset, in order again: the hour stays walked (a later batch does not fold it)
        warehouse.write_samples(con, _frame(_rows(1, [5], energy={5: 8.0})), "test")
        assert _rollup_equals_aggregating_again(con).row(0, named=True)["e_inside"] == 38.0
        # even once the counter climbs past the hour's first value again: 38 + 142 = 180
        warehouse.write_samples(con, _frame(_rows(1, [6], energy={6: 150.0})), "test")
        assert _rollup_equals_aggregating_again(con).row(0, named=True)["e_inside"] == 180.0


def test_rollup_folds_in_order_rows_and_aggregates_late_ones_again(warehouse_file):
    # A probe of which path ran: a sample removed behind write_samples' back stays counted when the
    # next batch is folded in (the hour is not read), and drops out when its hour is aggregated again.
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.write_samples(con, _frame(_rows(1, range(0, 10))), "test")
        con.execute("DELETE FROM gpu_samples WHERE ts = ?", [T0]).fetchall()
        warehouse.write_samples(con, _frame(_rows(1, range(10, 12))), "test")   # in order: folded
        assert con.execute("SELECT s_n FROM gpu_hourly").fetchall() == [(12,)]  # 10 + 2, as stored before
        warehouse.write_samples(con, _frame(_rows(1, [30, 20])), "test")        # in order: folded
        assert con.execute("SELECT s_n FROM gpu_hourly").fetchall() == [(14,)]
        warehouse.write_samples(con, _frame(_rows(1, [15])), "test")            # late: aggregated again
        assert con.execute("SELECT s_n FROM gpu_hourly").fetchall() == [(14,)]  # 13 stored + the late one


def _random_history(draw):
    """Samples of two GPUs over 10:00-12:00 at random minutes: ratios in and out of 0..1 or missing,
    an energy counter that climbs, dips (jitter) or resets, sometimes missing."""
    rows = []
    for gpu_id in (1, 2):
        minutes = sorted(draw(st.sets(st.integers(0, 119), min_size=1, max_size=25)))
        energy = draw(st.floats(0, 1000))
        for m in minutes:
            step = draw(st.sampled_from(["up", "up", "up", "dip", "reset", "none"]))
            energy = {"up": energy + draw(st.floats(0, 500)), "dip": energy - draw(st.floats(0, 50)),
                      "reset": draw(st.floats(0, 100)), "none": energy}[step]
            rows.append({"gpu_id": gpu_id, "ts": T0 + dt.timedelta(minutes=m),
                         "sm_active_ratio": draw(st.one_of(st.none(), st.floats(-0.5, 1.5))),
                         "gr_engine_active_ratio": draw(st.one_of(st.none(), st.floats(0, 1))),
                         "gpu_util_ratio": draw(st.one_of(st.none(), st.floats(0, 1))),
                         "energy_total_j": None if step == "none" else energy})
    return rows


@pytest.mark.slow
def test_rollup_of_any_batches_equals_aggregating_again(warehouse_file):
    # Any split of a history into batches, sent in any order, some rows sent twice (a re-sent copy
    # keeps the first value): gpu_hourly equals aggregating the stored samples again.
    @st.composite
    def histories(draw):
        rows = _random_history(draw)
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=5)))
        batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True) if rows[a:b]]
        order = draw(st.permutations(range(len(batches))))
        resent = draw(st.lists(st.integers(0, len(batches) - 1), max_size=2))
        return [batches[i] for i in order] + [batches[i] for i in resent], rows

    with warehouse.open_writer(warehouse_file) as con:
        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(histories())
        def check(case):
            batches, rows = case
            con.execute("DELETE FROM gpu_samples").fetchall()
            con.execute("DELETE FROM gpu_hourly").fetchall()
            new = sum(warehouse.write_samples(con, _frame(b), "test") for b in batches)
            assert new == len(rows)  # every key stored once, the re-sent copies add nothing
            _rollup_equals_aggregating_again(con)

        check()
