
import duckdb
import pytest

from gpuledger import warehouse
from gpuledger.warehouse.db import apply_migrations, migrations


def _tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_migrations_apply_to_an_empty_file(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == migrations()[-1][0]
        assert {"gpus", "gpu_samples", "jobs", "job_allocations", "org_nodes", "budgets",
                "rate_card", "quarantine", "ingest_checkpoints"} <= _tables(con)
        applied = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
    assert applied == [v for v, _, _ in migrations()]


def _job_columns(con):
    return {r[0] for r in con.execute("DESCRIBE jobs").fetchall()}


@pytest.mark.parametrize("previous", [v for v, _, _ in migrations()][:-1])
def test_migrations_upgrade_an_older_file_keeping_its_rows(warehouse_file, previous):
    latest = migrations()[-1][0]
    warehouse_file.parent.mkdir(parents=True)
    con = duckdb.connect(str(warehouse_file))
    apply_migrations(con, target=previous)
    assert warehouse.schema_version(con) == previous
    assert ("qos" in _job_columns(con)) == (previous >= 3)  # added by 003
    con.execute("INSERT INTO jobs (cluster, job_id, project, gpus, source, updated_at) "
                "VALUES ('c1', '42', 'p', 2.0, 'test', TIMESTAMP '2026-11-01 00:00:00')")
    con.close()

    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == latest
        assert {"ingest_checkpoints", "gpu_hourly"} <= _tables(con)
        assert {"qos", "partition", "time_limit_s", "priority_class"} <= _job_columns(con)
        assert con.execute("SELECT job_id, gpus, qos FROM jobs").fetchall() == [("42", 2.0, None)]
    # Opening again applies nothing more.
    with warehouse.open_writer(warehouse_file) as con:
        assert apply_migrations(con) == []


def test_reader_reads_the_live_file_and_no_copy_is_made(warehouse_file):
    # An older gpuledger's whole-file copy: the next writer removes it, nothing reads it.
    warehouse_file.parent.mkdir(parents=True)
    warehouse.snapshot_path(warehouse_file).write_bytes(b"stale copy")
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.quarantine(con, [warehouse.QuarantineRow("t", "f:1", "x", "bad")])
    assert not warehouse.snapshot_path(warehouse_file).exists()
    with warehouse.open_reader(warehouse_file) as con:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1


def test_a_reader_refuses_an_older_schema_and_says_what_to_run(warehouse_file):
    warehouse_file.parent.mkdir(parents=True)
    con = duckdb.connect(str(warehouse_file))
    apply_migrations(con, target=migrations()[0][0])
    con.close()
    with pytest.raises(warehouse.WarehouseError, match="run `gpuledger warehouse migrate`"):
        with warehouse.open_reader(warehouse_file):
            pass


def test_a_reader_of_a_missing_warehouse_says_how_to_make_one(tmp_path):
    with pytest.raises(warehouse.WarehouseError, match="gpuledger simulate warehouse"):
        with warehouse.open_reader(tmp_path / "absent.duckdb"):
            pass
    assert list(tmp_path.iterdir()) == []  # and leaves no lock files beside a mistyped path
