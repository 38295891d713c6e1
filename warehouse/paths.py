"""Where the warehouse file is: the option, else $GPULEDGER_WAREHOUSE, else ./data/gpuledger.duckdb.
Light on purpose (no DuckDB import): every CLI command resolves the path before doing anything."""

from __future__ import annotations

import os
from pathlib import Path

from gpuledger.errors import UsageError

WAREHOUSE_ENV = "GPULEDGER_WAREHOUSE"
DEFAULT_WAREHOUSE = Path("data/gpuledger.duckdb")


def resolve_warehouse_path(path: str | os.PathLike | None = None) -> Path:
    """The warehouse file: the argument, else $GPULEDGER_WAREHOUSE, else ./data/gpuledger.duckdb."""
    chosen = path or os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE
    return Path(chosen)


class WarehousePathError(UsageError):
    """The warehouse path cannot be the file asked for: a directory, a device, a place we cannot
    write. The message names the path and says to choose another with --warehouse."""


_CHOOSE = f"point --warehouse (or ${WAREHOUSE_ENV}) at a DuckDB file in a writable directory"


def _not_a_file(path: Path) -> str | None:
    if path.is_dir():
        return f"warehouse {path} is a directory; {_CHOOSE}, e.g. {path / 'gpuledger.duckdb'}"
    if path.exists() and not path.is_file():
        return (f"warehouse {path} is not a regular file (a device or pipe such as /dev/null cannot "
                f"hold a database); {_CHOOSE}")
    return None


def check_writer_path(path: Path) -> None:
    """Before a writer opens ``path``: it must be (or become) a regular file in a directory we can
    write (the lock file and the reader snapshot live beside it). Creates missing directories, as
    the writer always has. Raises WarehousePathError naming the path and the fix."""
    problem = _not_a_file(path)
    if problem:
        raise WarehousePathError(problem)
    parent = path.parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise WarehousePathError(f"{existing} is a file, so the warehouse {path} cannot be made under "
                                 f"it; {_CHOOSE}")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WarehousePathError(
            f"cannot create the warehouse directory {parent} ({exc.strerror or exc}); {_CHOOSE}") from None
    import tempfile  # lazy: writers only; its import (random, shutil) is ~1-4 ms of every reader's start

    try:  # a real probe: os.access says yes to root on a read-only mount or /sys
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise WarehousePathError(
            f"cannot write in the warehouse directory {parent} ({exc.strerror or exc}); {_CHOOSE}") from None
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise WarehousePathError(f"warehouse {path} is not writable (permission denied); {_CHOOSE}")


def check_reader_path(path: Path) -> None:
    """Before a reader opens ``path``: when it exists it must be a readable regular file (a missing
    one is the caller's "no warehouse yet" message). Raises WarehousePathError."""
    problem = _not_a_file(path)
    if problem:
        raise WarehousePathError(problem)
    if path.exists() and not os.access(path, os.R_OK):
        raise WarehousePathError(f"warehouse {path} is not readable (permission denied); {_CHOOSE}")
