import datetime as dt

import polars as pl
import pytest

from gpuledger import warehouse
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
