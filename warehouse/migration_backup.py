"""Guards around schema migrations: a backup of the file before every migration, and no writes to
a file whose schema is newer than this gpuledger knows (after a rollback of the code).

The backup is a whole-file copy taken by the writer that is about to migrate, under the writer's
lock and after a CHECKPOINT (DuckDB's WAL folded into the file): no other process can change the
file while it is copied, and the copy opens on its own. Copies go to ``backups/`` beside the
warehouse, named by the schema version they hold; the newest ``KEEP`` are kept (a copy is as big
as the warehouse). Restoring is copying one back with every writer stopped (README "Restoring a
backup")."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from gpuledger.errors import RunError

KEEP = 2  # backups kept per warehouse: the one before this migration and the one before that


class BackupFailed(RunError):
    """The copy before a migration could not be made (a full disk, an unwritable folder): the
    migration is not run; the message says what to free or fix."""


def newer_schema_message(path: Path, have: int, known: int) -> str:
    return (f"warehouse {path} is at schema version {have}, newer than this gpuledger knows "
            f"({known}): run the gpuledger that migrated it, or stop every writer and restore "
            f"the backup taken before that migration ({backup_dir(path)}/, README \"Restoring a backup\")")


def backup_dir(path: Path) -> Path:
    return path.parent / "backups"


def backup_path(path: Path, version: int) -> Path:
    """Where the copy of ``path`` at schema ``version`` goes, e.g. backups/gpuledger.duckdb.schema-021."""
    return backup_dir(path) / f"{path.name}.schema-{version:03d}"


def take_backup(con, path: Path, version: int) -> Path:
    """Copy the live file (held by ``con``, a writer under the lock) to its backup path; returns
    it. Written to a temporary name and renamed, so a half-written copy never looks like a backup."""
    con.execute("CHECKPOINT")
    target = backup_path(path, version)
    partial = target.with_name(target.name + ".partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, partial)
        with open(partial, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(partial, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        size_mib = path.stat().st_size / 2**20
        raise BackupFailed(
            f"cannot back up warehouse {path} to {target} before migrating it "
            f"({exc.strerror or type(exc).__name__}): nothing was migrated; make room for a "
            f"{size_mib:,.0f} MiB copy in {target.parent} (or fix that folder) and run "
            "`gpuledger warehouse migrate` again") from None
    _prune(path)
    return target


def _prune(path: Path) -> None:
    copies = sorted(backup_dir(path).glob(f"{path.name}.schema-[0-9][0-9][0-9]"))
    for old in copies[:-KEEP]:
        old.unlink(missing_ok=True)
