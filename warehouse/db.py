"""Opening the warehouse: one writer at a time, readers that never block it.

DuckDB lets one process hold a read-write connection, and that blocks every other process,
readers included (shared/notes/duckdb-here.md). So:

* Writers take an exclusive ``flock`` on ``<file>.lock`` before opening the file, which queues
  writers from any process instead of failing them; they hold the file only for their unit of work.
* When a writer closes, it publishes a consistent copy, ``<file>.snapshot``. Readers open that copy
  read-only, so a dashboard or report never holds the live file and never waits on a writer.
* Schema changes are numbered ``migrations/NNN_name.sql`` files, applied in order on open.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import duckdb

from gpuledger.warehouse.paths import DEFAULT_WAREHOUSE, WAREHOUSE_ENV, resolve_warehouse_path  # noqa: F401
from gpuledger.warehouse.paths import check_reader_path, check_writer_path

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


class WarehouseError(RuntimeError):
    """The warehouse cannot be used as asked; the message says what to run or fix."""


def snapshot_path(path: str | os.PathLike) -> Path:
    return Path(f"{path}.snapshot")


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) for every migration shipped in warehouse/migrations, in order."""
    found = []
    for entry in resources.files("gpuledger.warehouse.migrations").iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {[n for _, n, _ in found]}")
    return found


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """Highest applied migration, 0 for an empty file."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchall()[0][0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]


def apply_migrations(con: duckdb.DuckDBPyConnection, target: int | None = None) -> list[str]:
    """Apply every migration above the file's version (up to ``target``), each in a transaction.

    Returns the names applied. Safe to call on every open.
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    current = schema_version(con)
    applied = []
    for version, name, sql in migrations():
        if version <= current or (target is not None and version > target):
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)", [version, name]
            )
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


# Connections inside a transaction opened by `transaction` (DuckDB cannot be asked, and a failed
# nested BEGIN aborts the outer transaction, so nesting is tracked here).
_IN_TRANSACTION: set[int] = set()


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """A transaction around the block, or the enclosing one when this connection is already in a
    `transaction` block (so a writer can group several writes, e.g. a chunk and its checkpoint,
    and each write still stands alone). Writers open transactions only through this."""
    key = id(con)
    if key in _IN_TRANSACTION:
        yield
        return
    con.execute("BEGIN TRANSACTION")
    _IN_TRANSACTION.add(key)
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    else:
        con.execute("COMMIT")
    finally:
        _IN_TRANSACTION.discard(key)


@contextlib.contextmanager
def _writer_lock(path: Path, timeout_s: float) -> Iterator[None]:
    lock_file = Path(f"{path}.lock")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WarehouseError(
                        f"another gpuledger writer has held {lock_file} for {timeout_s:.0f} s; "
                        "wait for it to finish or raise the timeout"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish_snapshot(path: Path) -> None:
    """Copy the closed (checkpointed) file to <file>.snapshot atomically (write then rename)."""
    target = snapshot_path(path)
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(path, tmp)
    os.replace(tmp, target)


@contextlib.contextmanager
def open_writer(
    path: str | os.PathLike | None = None,
    *,
    publish: bool = True,
    lock_timeout_s: float = 600.0,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection, migrated, held only for the ``with`` block.

    Writers from any process queue on the lock file. On a clean exit the file is closed
    (DuckDB checkpoints it) and, with ``publish``, copied to the reader snapshot.
    """
    path = resolve_warehouse_path(path)
    check_writer_path(path)  # a directory, /dev/null, an unwritable place: one line, not DuckDB's
    path.parent.mkdir(parents=True, exist_ok=True)
    with _writer_lock(path, lock_timeout_s):
        con = duckdb.connect(str(path))
        ok = False
        try:
            con.execute("SET TimeZone = 'UTC'")
            apply_migrations(con)
            yield con
            ok = True
        finally:
            con.close()
        if ok and publish:
            _publish_snapshot(path)


@contextlib.contextmanager
def open_reader(path: str | os.PathLike | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short read-only connection to the published snapshot; never blocks or waits on writers.

    Falls back to the live file (read-only) when no snapshot has been published yet, e.g. a
    warehouse written by another tool.
    """
    path = resolve_warehouse_path(path)
    check_reader_path(path)
    source = snapshot_path(path)
    if not source.exists():
        source = path
    if not source.exists():
        raise WarehouseError(
            f"no warehouse at {path}: run `gpuledger simulate warehouse` or an import first, "
            f"or point --warehouse / ${WAREHOUSE_ENV} at an existing file"
        )
    con = duckdb.connect(str(source), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        have, want = schema_version(con), migrations()[-1][0]
        if have < want:
            raise WarehouseError(
                f"warehouse {path} is at schema version {have}, this gpuledger needs {want}: "
                "run `gpuledger migrate` (readers never change the file)"
            )
        yield con
    finally:
        con.close()
