"""Issue 35's guards around migrations: a whole-file backup before every migration that restores
as it was, and older code refusing to write a warehouse a newer gpuledger migrated."""

import shutil
import subprocess
import sys

import duckdb
import pytest
from gpuledger.warehouse import migration_backup
from gpuledger.warehouse.db import apply_migrations, migrations

from gpuledger import warehouse

LATEST = migrations()[-1][0]


def _older_file(path, version):
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    apply_migrations(con, target=version)
    con.execute("INSERT INTO jobs (cluster, job_id, project, gpus, source, updated_at) "
                "VALUES ('c1', '42', 'p', 2.0, 'test', TIMESTAMP '2026-11-01 00:00:00')")
    con.close()


def test_a_migration_leaves_a_backup_that_restores_the_file_as_it_was(warehouse_file):
    previous = migrations()[-2][0]
    _older_file(warehouse_file, previous)
    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == LATEST
        con.execute("INSERT INTO jobs (cluster, job_id, project, gpus, source, updated_at) "
                    "VALUES ('c1', '43', 'p', 1.0, 'test', TIMESTAMP '2026-11-02 00:00:00')")
    backup = migration_backup.backup_path(warehouse_file, previous)
    assert con.backup_path == backup and backup.exists()
    # README "Restoring a backup": every writer stopped, the copy put back in place of the file
    shutil.copyfile(backup, warehouse_file)
    restored = duckdb.connect(str(warehouse_file), read_only=True)
    assert warehouse.schema_version(restored) == previous
    assert restored.execute("SELECT job_id FROM jobs").fetchall() == [("42",)]  # before the write
    restored.close()
    # and the restored file migrates again as it did the first time
    with warehouse.open_writer(warehouse_file) as con:
        assert warehouse.schema_version(con) == LATEST
        assert con.execute("SELECT job_id FROM jobs").fetchall() == [("42",)]


def test_nothing_to_migrate_takes_no_backup_and_a_new_file_none(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        assert con.backup_path is None  # a new file: nothing to keep
    with warehouse.open_writer(warehouse_file) as con:
        assert con.backup_path is None
    assert not migration_backup.backup_dir(warehouse_file).exists()


def test_only_the_newest_backups_are_kept(warehouse_file):
    versions = [v for v, _, _ in migrations()][-4:-1]  # three older schemas, migrated one by one
    _older_file(warehouse_file, versions[0])
    for target in versions[1:] + [LATEST]:
        con = duckdb.connect(str(warehouse_file))
        have = warehouse.schema_version(con)
        migration_backup.take_backup(con, warehouse_file, have)
        apply_migrations(con, target=target)
        con.close()
    kept = sorted(p.name for p in migration_backup.backup_dir(warehouse_file).iterdir())
    assert kept == [migration_backup.backup_path(warehouse_file, v).name
                    for v in versions[-migration_backup.KEEP:]]


def _newer_file(path):
    with warehouse.open_writer(path):
        pass
    con = duckdb.connect(str(path))  # what a gpuledger with one more migration would have left
    con.execute("INSERT INTO schema_migrations VALUES (?, '999_from_the_future.sql', now()::TIMESTAMP)",
                [LATEST + 1])
    con.close()


def test_older_code_refuses_to_write_a_newer_schema_and_says_what_to_do(warehouse_file):
    _newer_file(warehouse_file)
    with pytest.raises(warehouse.WarehouseNewerSchemaError) as refused:
        with warehouse.open_writer(warehouse_file):
            pytest.fail("the writer opened")
    message = str(refused.value)
    assert "\n" not in message
    assert f"schema version {LATEST + 1}, newer than this gpuledger knows ({LATEST})" in message
    assert "restore the backup" in message
    # readers still read it (they never write)
    with warehouse.open_reader(warehouse_file) as con:
        assert warehouse.schema_version(con) == LATEST + 1


def test_the_migrate_command_refuses_it_in_one_line(warehouse_file):
    _newer_file(warehouse_file)
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "warehouse", "migrate", "--warehouse",
                           str(warehouse_file)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "newer than this gpuledger knows" in lines[0], lines


def test_the_writer_refuses_a_statefulset_ordinal_other_than_0(warehouse_file):
    from gpuledger.warehouse import writer_guard

    env = {"GPULEDGER_STATEFULSET": "gpuledger"}
    writer_guard.check_ordinal("gpuledger-0", env)  # the one writer
    writer_guard.check_ordinal("admin-2", {})  # no StatefulSet named: a Slurm admin node's name means nothing
    with pytest.raises(writer_guard.WriterRefused, match="ordinal 1 of the StatefulSet gpuledger.*replicas: 1"):
        writer_guard.check_ordinal("gpuledger-1", env)
    with pytest.raises(writer_guard.WriterRefused, match="not a replica of the StatefulSet"):
        writer_guard.check_ordinal("other-0", env)
    # the init container's `warehouse migrate` at replica 1: one line, exit 1, no warehouse made
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "warehouse", "migrate", "--warehouse",
                           str(warehouse_file)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, **env, "HOSTNAME": "gpuledger-1"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "ordinal 1" in lines[0], lines
    assert not warehouse_file.exists()


def test_a_second_writer_lease_is_refused_while_the_first_lives(warehouse_file, tmp_path):
    import os

    from gpuledger.warehouse import writer_guard

    first = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from gpuledger.warehouse import writer_guard\n"
        f"writer_guard.take_lease(Path({str(warehouse_file)!r}), role='dagster-daemon')\n"
        "print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(writer_guard.WriterRefused, match=f"another gpuledger writer holds .*PID {first.pid}"):
            writer_guard.take_lease(warehouse_file, role="dagster-daemon")
    finally:
        first.stdin.close()
        first.wait(timeout=30)
    # the kernel let go with the holder: the next writer takes it
    os.close(writer_guard.take_lease(warehouse_file, role="dagster-daemon"))


def test_no_room_for_the_backup_means_no_migration_and_one_line(warehouse_file):
    previous = migrations()[-2][0]
    _older_file(warehouse_file, previous)
    migration_backup.backup_dir(warehouse_file).write_text("a file where the backups folder goes")
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "warehouse", "migrate", "--warehouse",
                           str(warehouse_file)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot back up warehouse" in lines[0] and "nothing was migrated" in lines[0], lines
    con = duckdb.connect(str(warehouse_file), read_only=True)
    assert warehouse.schema_version(con) == previous  # the file as it was
    con.close()
