import datetime as dt

import duckdb
import polars as pl

import warehouse
from warehouse.db import apply_migrations, migrations


def _tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_migrations_apply_to_an_empty_file(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == migrations()[-1][0]
        assert {"gpus", "gpu_samples", "jobs", "job_allocations", "org_nodes", "budgets",
                "rate_card", "quarantine", "ingest_checkpoints"} <= _tables(con)
        applied = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
    assert applied == [v for v, _, _ in migrations()]


def test_migrations_upgrade_a_file_at_the_previous_version_keeping_its_rows(warehouse_file):
    versions = [v for v, _, _ in migrations()]
    previous = versions[-2]
    warehouse_file.parent.mkdir(parents=True)
    con = duckdb.connect(str(warehouse_file))
    apply_migrations(con, target=previous)
    assert warehouse.schema_version(con) == previous
    assert "ingest_checkpoints" not in _tables(con)
    warehouse.upsert(con, "jobs", pl.DataFrame({
        "cluster": ["c1"], "job_id": ["42"], "project": ["p"], "gpus": [2.0], "source": ["test"],
        "updated_at": [dt.datetime(2026, 11, 1)],
    }))
    con.close()

    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == versions[-1]
        assert "ingest_checkpoints" in _tables(con)
        assert con.execute("SELECT job_id, gpus FROM jobs").fetchall() == [("42", 2.0)]
    # Opening again applies nothing more.
    with warehouse.open_writer(warehouse_file) as con:
        assert apply_migrations(con) == []


def test_reader_sees_published_snapshot_not_the_live_file(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.quarantine(con, [warehouse.QuarantineRow("t", "f:1", "x", "bad")])
    assert warehouse.snapshot_path(warehouse_file).exists()
    with warehouse.open_reader(warehouse_file) as con:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
