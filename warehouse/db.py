"""Opening the warehouse: one writer at a time, readers that queue briefly instead of failing.

DuckDB lets one process hold a read-write connection, and that blocks every other process,
readers included (shared/notes/duckdb-here.md). So readers and writers share the live file under a
reader/writer lock across processes (warehouse/access.py):

* A writer takes the file exclusively (waiting writers are preferred over new readers, so a stream
  of readers cannot starve it) and holds it only for its unit of work; a long writer lets waiting
  readers in between chunks (:func:`yield_to_readers`) within a turn budget (``TURN_BUDGET_S``,
  counted from when it shut new readers out, its close included), so a reader waits about one
  chunk, and at most about the budget where the writer sizes its chunks to it.
* Readers open the live file read-only under a shared lock: they see every committed write as soon
  as its writer lets go, never a partial one (DuckDB replays a crashed writer's WAL), never a
  DuckDB lock error. Nothing is copied, so no write costs time in proportion to the file's size.
* A damaged file ends in one line naming it and the fix; there is no older copy to fall back on.
* Schema changes are numbered ``migrations/NNN_name.sql`` files, applied in order on open.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import json
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from gpuledger.sql import package_folder
from gpuledger.warehouse import migration_backup
from gpuledger.warehouse.access import WarehouseLocks
from gpuledger.warehouse.engine import duckdb
from gpuledger.warehouse.memory import MemoryLimitError, memory_limit
from gpuledger.warehouse.paths import DEFAULT_WAREHOUSE, WAREHOUSE_ENV, resolve_warehouse_path  # noqa: F401
from gpuledger.warehouse.paths import check_reader_path, check_writer_path
from gpuledger.warehouse.snapshot import mark_reader

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


class WarehouseError(RuntimeError):
    """The warehouse cannot be used as asked; the message says what to run or fix."""


class WarehouseBusyError(WarehouseError):
    """A writer held the file longer than the caller would wait (or is still creating it)."""

    exit_code = 1


class WarehouseNewerSchemaError(WarehouseError):
    """The file was migrated by a newer gpuledger: this one refuses to write it (a rollback)."""

    exit_code = 1


class WarehouseCorruptError(WarehouseError):
    """The file is not a readable DuckDB database: damaged, truncated, or not a database."""

    exit_code = 1


def snapshot_path(path: str | os.PathLike) -> Path:
    """Where gpuledger before the reader/writer lock published whole-file copies for readers.
    Nothing reads it any more; writers delete a leftover one (it could be as big as the file)."""
    return Path(f"{path}.snapshot")


def migrations(*, text: bool = True) -> list[tuple[int, str, str]]:
    """(version, file name, SQL) for every migration shipped in warehouse/migrations, in order
    (``text=False``: SQL "" — a reader checks the versions only, without reading 30 files)."""
    found = []
    package = "gpuledger.warehouse.migrations"
    folder = package_folder(package)
    if folder is None:  # a zip's files: importlib.resources, whose import costs every reader ~5 ms
        from importlib import resources  # lazy: see above

        folder = resources.files(package)
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text() if text else ""))
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
    """Apply every migration the file has not had (up to ``target``), in order, each in a
    transaction. A missing lower number is applied too (numbers are reserved per change and may
    land out of order). Returns the names applied. Safe to call on every open.
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in migrations():
        if version in done or (target is not None and version > target):
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


# Phrases of DuckDB's errors for a file it cannot read as a database. Matched on the message:
# DuckDB raises them as IOException or plain Error, beside unrelated errors of the same types.
_DAMAGED = ("not a valid DuckDB database file", "Could not read enough bytes", "Corrupt database file",
            "does not match stored checksum")
_OTHER_VERSION = "version number"
_LOCK_CONFLICT = "Could not set lock on file"
_REINGEST = ("`gpuledger simulate warehouse`, `gpuledger ingest …` and `gpuledger ingest jobs-csv …` "
             "write a new one")


def unreadable(path: Path, exc: BaseException) -> WarehouseError | None:
    """The one-line error for a damaged file (or one of another DuckDB storage version); None
    when ``exc`` is something else."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    reason = message.removeprefix("IO Error: ").replace(f'"{path}"', "the file")
    if any(phrase in message for phrase in _DAMAGED):
        return WarehouseCorruptError(
            f"warehouse {path} is damaged ({reason[:120]}): restore it from a backup, or move it "
            f"aside and re-ingest ({_REINGEST})")
    if _OTHER_VERSION in message and "database file" in message:
        return WarehouseCorruptError(
            f"warehouse {path} was written by another DuckDB storage version ({reason[:120]}): "
            "open it with the gpuledger / DuckDB that wrote it, or restore or re-ingest it")
    return None


_HEADERS_SIZE = 3 * 4096  # DuckDB's main header and its two alternating database headers


def _truncation(path: Path) -> str | None:
    """Why ``path`` looks cut short, or None. DuckDB files are the headers plus whole blocks of
    the size each database header records; a copy or a disk that stopped early leaves a ragged
    tail, which DuckDB itself only notices when a query reaches it (a writer might never). A cheap
    check (reads 12 KiB); skipped when the headers are not laid out as DuckDB 1.x/2.x writes them."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(_HEADERS_SIZE)
    except OSError:
        return None
    if len(head) < _HEADERS_SIZE or head[8:12] != b"DUCK":
        return None  # DuckDB says what is wrong with that
    # (checksum, iteration, meta block, free list, block count, block size)
    headers = [struct.unpack_from("<QQqqQQ", head, offset) for offset in (4096, 8192)]
    _, _, _, _, block_count, block_alloc = max(headers, key=lambda h: h[1])  # the newer iteration is live
    if not (16384 <= block_alloc <= 1 << 30 and block_alloc & (block_alloc - 1) == 0):
        return None
    needed = _HEADERS_SIZE + block_count * block_alloc
    # A ragged tail past the blocks the live header counts is a write that stopped while the file
    # grew (a full disk during a checkpoint): DuckDB treats blocks past the count as free, so the
    # file is whole. Only a file shorter than its counted blocks was cut short.
    if size < needed and (size - _HEADERS_SIZE) % block_alloc:
        return (f"its {size:,} bytes are not whole {block_alloc // 1024} KiB DuckDB blocks and fewer than the "
                f"{block_count:,} its header counts: the file was cut short")
    return None


_DISK_FULL = ("No space left on device", "Disk quota exceeded", "File too large")


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path.parent if not path.is_dir() else path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class WarehouseDiskFullError(WarehouseError):
    """A write found no room on the warehouse's disk (ENOSPC, a quota): it was rolled back, the data
    before it is intact. Not damage: the file opens as before."""

    exit_code = 1


def disk_full(path: Path, exc: BaseException, *, stage: str = "write") -> WarehouseDiskFullError | None:
    """The one-line error for a write that ran out of disk (``exc`` from DuckDB or the OS); None for
    anything else. ``stage``: "write" (the write failed and was rolled back), "fold" (the write was
    committed to the write-ahead log and only folding it into the file failed), "open" (opening for
    writing had to fold an earlier write's log in first; this command wrote nothing)."""
    chain, seen = exc, 0  # the full disk may hide behind what its clean-up raised ("transaction aborted")
    while chain is not None and seen < 8:
        message = str(chain)
        if (isinstance(chain, OSError) and chain.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)) \
                or any(phrase in message for phrase in _DISK_FULL):
            exc = chain
            break
        chain, seen = chain.__cause__ or chain.__context__, seen + 1
    else:
        return None
    named = re.search(r'file "([^"]+)"', message)
    what = next((p for p in _DISK_FULL if p in message), None) or (getattr(exc, "strerror", None) or "disk full")
    where = named.group(1) if named else (getattr(exc, "filename", None) or str(path))
    free = _free_bytes(path)
    room = f"{free / 2**20:,.1f} MiB free" if free is not None else "free space unknown"
    said = f"warehouse {path}: the disk is full ({what} writing {where}; {room} there)"
    if stage == "fold":
        return WarehouseDiskFullError(
            f"{said}: the write was committed to the write-ahead log {path}.wal but not folded into the file; "
            "the data is intact and readable. Free space on that disk (or move the warehouse to a bigger "
            "one); the next write folds it in")
    if stage == "open":
        return WarehouseDiskFullError(
            f"{said}: nothing was written; the data (with the write-ahead log {path}.wal of an earlier write) is "
            "intact and readable. Free space on that disk (or move the warehouse to a bigger one), then rerun")
    return WarehouseDiskFullError(
        f"warehouse {path}: the disk is full ({what} writing {where}; {room} there): this write was rolled "
        "back, nothing of it was stored and the data before it is intact. Free space on that disk (or move "
        "the warehouse to a bigger one), then rerun")


def _connect(path: Path, *, read_only: bool, deadline: float) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` under our lock. A DuckDB lock conflict then means a process outside the
    protocol (an older gpuledger, a duckdb shell) holds the file: retried until ``deadline``."""
    cut = _truncation(path)
    if cut is not None:
        raise WarehouseCorruptError(
            f"warehouse {path} is damaged ({cut}): restore it from a backup, or move it aside and "
            f"re-ingest ({_REINGEST})")
    try:
        limit = memory_limit()
    except MemoryLimitError as exc:
        raise WarehouseError(str(exc)) from None
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            con.execute("SET TimeZone = 'UTC'")
            if limit is not None:  # DuckDB's cache bounded beside polars (warehouse/memory.py)
                con.execute(f"SET memory_limit = '{limit}'")
            return con
        except duckdb.Error as exc:
            if _LOCK_CONFLICT not in str(exc):
                problem = unreadable(path, exc) or (None if read_only else disk_full(path, exc, stage="open"))
                if problem is not None:
                    raise problem from exc
                raise
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", str(exc))
                raise WarehouseBusyError(
                    f"warehouse {path} is held by a process that does not take gpuledger's lock"
                    f"{f' (PID {holder.group(1)})' if holder else ''}: close it (a duckdb shell?) "
                    "and try again") from None
            time.sleep(0.05)


# Which thread of this process holds the writer of a file (resolved path), and how many readers
# each thread has open: a reader or writer of that file opened inside a writer in the same thread,
# or a writer inside a reader, would wait for itself, so it is refused at once.
_HELD: dict[str, int] = {}
_READING: dict[tuple[str, int], int] = {}
_HELD_GUARD = threading.Lock()


def _refuse_nested(path: Path, what: str) -> str:
    key = os.path.realpath(path)
    with _HELD_GUARD:
        if _HELD.get(key) == threading.get_ident():
            raise WarehouseError(
                f"{what} of {path} inside an open_writer of the same file in the same thread would "
                "wait for itself: use the writer's connection")
        if what == "open_writer" and _READING.get((key, threading.get_ident())):
            raise WarehouseError(
                f"open_writer of {path} inside an open_reader of the same file in the same thread "
                "would wait for itself: close the reader first")
    return key


_LAST = threading.local()  # this thread's last open_reader: seconds it waited for the lock


def last_reader_wait_s() -> float | None:
    """How long this thread's last ``open_reader`` waited for writers (benchmarks, diagnostics)."""
    return getattr(_LAST, "wait_s", None)


def last_reader_wait_span() -> tuple[float, float, float] | None:
    """This thread's last ``open_reader``: (when it asked, on time.monotonic(); seconds at the
    gate, i.e. behind writers; seconds then waiting for the file itself, which is 0 but against a
    writer that does not take the gate)."""
    return getattr(_LAST, "span", None)


@contextlib.contextmanager
def _reading(key: str) -> Iterator[None]:
    me = (key, threading.get_ident())
    with _HELD_GUARD:
        _READING[me] = _READING.get(me, 0) + 1
    try:
        yield
    finally:
        with _HELD_GUARD:
            _READING[me] -= 1
            if not _READING[me]:
                del _READING[me]


# How long one writer's turn may keep new readers out, from the moment it takes the gate (when new
# readers start to wait) to the moment it has let go, its own close (DuckDB's checkpoint)
# included. Issue 9 asks that readers wait at most about 2 s; 1.5 s leaves room for the error of
# the estimates on a loaded machine (a chunk's COMMIT alone varied 2x there). Long writers yield
# before it is spent (estimating their next chunk and close from the last ones) and may size
# their chunks to what is left (WriterConnection.turn_left_s). Measured in BENCHMARKS.md
# ("Storage"): the close is ~20-100 ms of a turn, so DuckDB's checkpoint settings cannot help.
TURN_BUDGET_S = 1.5

# This process's writer phases, newest last: (phase, start, end) on time.monotonic(), which is
# one clock for every process on Linux, so a benchmark can lay readers' waits over them. Phases:
# "gate" (waiting for another writer), "drain" (gate held, waiting for the readers already in),
# "open" (DuckDB connect), "work" (the caller's chunks), "close" (DuckDB's checkpoint on close),
# "let_in" (waiting for the waiting readers to take the file). Bounded: a diagnostic, not a log.
_PHASES: collections.deque[tuple[str, float, float]] = collections.deque(maxlen=8192)


def writer_phases() -> list[tuple[str, float, float]]:
    """The writer phases this process recorded (see _PHASES), oldest first."""
    return list(_PHASES)


def _dump_phases_at_exit(target: str) -> None:
    """$GPULEDGER_LOCK_TRACE=FILE: a process (a CLI command a benchmark runs) writes its writer
    phases to FILE as JSON when it exits, so where readers waited can be read from outside."""
    def dump() -> None:
        with contextlib.suppress(OSError):
            Path(target).write_text(json.dumps(writer_phases()))

    atexit.register(dump)


if os.environ.get("GPULEDGER_LOCK_TRACE"):
    _dump_phases_at_exit(os.environ["GPULEDGER_LOCK_TRACE"])


def _recent_max(values: collections.deque[float]) -> float:
    return max(values) if values else 0.0


class WriterConnection:
    """What open_writer yields: its DuckDB connection (every attribute is the connection's) plus
    :meth:`yield_to_readers`, which may replace the connection underneath between chunks."""

    def __init__(self, path: Path, locks: WarehouseLocks, lock_timeout_s: float) -> None:
        self._path, self._locks, self._lock_timeout_s = path, locks, lock_timeout_s
        self._con: duckdb.DuckDBPyConnection | None = None
        self.backup_path: Path | None = None  # the copy taken before this open migrated the file
        self._held_since = 0.0  # DuckDB open: the writer's work starts
        self._turn_start = 0.0  # gate taken: new readers wait from here
        self._last_mark = 0.0  # the previous yield point (or the open)
        # The last few chunk (between yield points) and close durations: what the next will cost.
        self._chunks: collections.deque[float] = collections.deque(maxlen=3)
        self._closes: collections.deque[float] = collections.deque(maxlen=3)

    def __getattr__(self, name: str):
        con = self.__dict__.get("_con")
        if con is None:
            raise WarehouseError(f"the writer of {self.__dict__.get('_path')} is closed; open a new one")
        return getattr(con, name)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The current DuckDB connection itself (valid until the next yield_to_readers)."""
        return self._con

    def _take(self) -> None:
        """Wait for the file (writers before new readers), then open it read-write."""
        asked = time.monotonic()
        if not self._locks.acquire_writer(asked + self._lock_timeout_s):
            info = self._locks.writer_info()
            raise WarehouseBusyError(
                f"another gpuledger writer{f' (PID {info.pid})' if info else ''} has held "
                f"{self._path} for {self._lock_timeout_s:.0f} s; wait for it to finish or raise the timeout")
        locks = self._locks
        _PHASES.append(("gate", asked, locks.gate_at))
        _PHASES.append(("drain", locks.gate_at, locks.locked_at))
        self._turn_start = locks.gate_at
        try:
            self._con = _connect(self._path, read_only=False,
                                 deadline=time.monotonic() + min(self._lock_timeout_s, 30.0))
        except BaseException:
            self._locks.release_writer()
            raise
        self._held_since = self._last_mark = time.monotonic()
        _PHASES.append(("open", locks.locked_at, self._held_since))

    def _let_go(self, *, check: bool = True) -> None:
        """Close the connection (DuckDB checkpoints: cost ~ what this writer changed) and unlock.
        The checkpoint is asked for explicitly first: DuckDB's close swallows its failure, and one
        that found the disk full must be told (``check``), not left as a silently ragged file."""
        if self._con is not None:
            con, self._con = self._con, None
            t0 = time.monotonic()
            _PHASES.append(("work", self._held_since, t0))
            folded: BaseException | None = None
            try:
                try:
                    con.execute("CHECKPOINT")
                except duckdb.Error as exc:  # other transactions open (a cursor): close checkpoints
                    folded = disk_full(self._path, exc, stage="fold")
                con.close()
            finally:
                self._locks.release_writer()
                t1 = time.monotonic()
                self._closes.append(t1 - t0)
                _PHASES.append(("close", t0, t1))
            if folded is not None and check:
                raise folded

    def turn_left_s(self, budget_s: float = TURN_BUDGET_S) -> float:
        """Seconds of this turn's budget left for work before the writer must close (its likely
        close cost kept back): a long writer whose chunks can be any size sizes the next one to
        this, so a reader queued at the turn's start still gets in within the budget. At least
        0; a chunk must still be written each turn (writers are not starved)."""
        spent = time.monotonic() - self._turn_start
        return max(0.0, budget_s - spent - _recent_max(self._closes))

    def yield_to_readers(self, *, after_s: float = 0.5, max_wait_s: float = 0.5,
                         budget_s: float = TURN_BUDGET_S) -> bool:
        """Between the chunks of a long write: when readers are waiting, close the file
        (committed chunks become visible), let those readers in (up to ``max_wait_s`` for them to
        start), then take it back, if either this writer has held the file ``after_s`` seconds or
        more, or one more chunk like the last ones plus the close would take the turn past
        ``budget_s`` from when it shut new readers out (so a reader that queued at the turn's
        start, behind the readers then in, still gets in within about ``budget_s``). Otherwise
        nothing happens (two system calls). Never inside a transaction. Returns whether it
        yielded. One chunk is always written per turn, so no budget starves the writer."""
        if id(self) in _IN_TRANSACTION:
            raise RuntimeError("yield_to_readers inside a transaction would split it; call it between transactions")
        now = time.monotonic()
        self._chunks.append(now - self._last_mark)
        self._last_mark = now
        held = now - self._held_since
        projected = now - self._turn_start + _recent_max(self._chunks) + _recent_max(self._closes)
        if (held < after_s and projected <= budget_s) or not self._locks.readers_waiting():
            return False
        self._let_go()
        t = time.monotonic()
        self._locks.let_readers_in(max_wait_s)
        _PHASES.append(("let_in", t, time.monotonic()))
        self._take()
        self._last_mark = time.monotonic()
        return True


@contextlib.contextmanager
def open_writer(
    path: str | os.PathLike | None = None,
    *,
    lock_timeout_s: float = 600.0,
) -> Iterator[WriterConnection]:
    """A read-write connection to the live file, migrated, held only for the ``with`` block.

    Writers from any process queue (as do readers, behind a waiting writer); on exit the file is
    closed and readers see everything committed. Long writers call ``con.yield_to_readers()``
    between chunks.
    """
    path = resolve_warehouse_path(path)
    check_writer_path(path)  # a directory, /dev/null, an unwritable place: one line, not DuckDB's
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _refuse_nested(path, "open_writer")
    locks = WarehouseLocks(path)
    writer = WriterConnection(path, locks, lock_timeout_s)
    failed = False  # an error is on its way out: a failed checkpoint at close must not replace it
    try:
        writer._take()
        if schema_version(writer.connection) == 0:
            locks.mark_state(creating=True)  # readers that cannot wait say so
        with _HELD_GUARD:
            _HELD[key] = threading.get_ident()
        try:
            writer.backup_path = _guard_migration(writer.connection, path)
            apply_migrations(writer.connection)
            with contextlib.suppress(FileNotFoundError):
                snapshot_path(path).unlink()  # a whole-file copy from before; nothing reads it
            yield writer
        except (duckdb.Error, OSError) as exc:  # a damaged block can surface in any later statement
            failed = True
            problem = (unreadable(path, exc) if isinstance(exc, duckdb.Error) else None) or disk_full(path, exc)
            if problem is None:
                raise
            raise problem from exc
        except BaseException:
            failed = True
            raise
        finally:
            with _HELD_GUARD:
                _HELD.pop(key, None)
            writer._let_go(check=not failed)
    finally:
        locks.close()


def _guard_migration(con: duckdb.DuckDBPyConnection, path: Path) -> Path | None:
    """Before a writer migrates: refuse a file whose schema is newer than this code knows (one
    line, what to do), and copy a file that is about to be migrated (warehouse/migration_backup.py).
    Returns the backup's path, or None when nothing is migrated (or the file is new)."""
    have = schema_version(con)
    if not have:
        return None
    done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
    shipped = [v for v, _, _ in migrations()]
    if max(done) > shipped[-1]:
        raise WarehouseNewerSchemaError(migration_backup.newer_schema_message(path, max(done), shipped[-1]))
    if not set(shipped) - done:
        return None
    return migration_backup.take_backup(con, path, have)


def yield_to_readers(con, *, after_s: float = 0.5, max_wait_s: float = 0.5,
                     budget_s: float = TURN_BUDGET_S) -> bool:
    """``con.yield_to_readers(...)`` for a connection from open_writer; False (nothing to do) for
    a bare DuckDB connection, which no other gpuledger process can be waiting for."""
    if isinstance(con, WriterConnection):
        return con.yield_to_readers(after_s=after_s, max_wait_s=max_wait_s, budget_s=budget_s)
    return False


@contextlib.contextmanager
def open_reader(
    path: str | os.PathLike | None = None,
    *,
    wait_s: float = 30.0,
    creating_wait_s: float = 2.0,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short read-only connection to the live file under a shared lock: it sees every committed
    write, never a partial one. Waits for a writer that holds the file (writers hold it for one
    unit of work, long ones let readers in after every chunk within ``TURN_BUDGET_S``), up to ``wait_s`` seconds; for a warehouse
    whose first write is still running, up to ``creating_wait_s``. Hold it briefly: a writer
    waits for the readers that are in. Raises WarehouseError with one line for what it cannot read.
    """
    path = resolve_warehouse_path(path)
    check_reader_path(path)
    key = _refuse_nested(path, "open_reader")
    locks = WarehouseLocks(path)
    if not path.exists() and not locks.gate_file.exists():  # no file and no writer making one
        raise WarehouseError(
            f"no warehouse at {path}: run `gpuledger simulate warehouse` or an import first, "
            f"or point --warehouse / ${WAREHOUSE_ENV} at an existing file")
    try:
        started = time.monotonic()
        got = locks.acquire_reader(started + min(wait_s, creating_wait_s))
        if not got:
            info = locks.writer_info()
            if info is not None and (info.creating or not path.exists()):
                raise WarehouseBusyError(
                    f"the warehouse {path} is being created by PID {info.pid}; try again in a moment")
            got = locks.acquire_reader(started + wait_s)
        if not got:
            info = locks.writer_info()
            raise WarehouseBusyError(
                f"warehouse {path} has been held by a writer{f' (PID {info.pid})' if info else ''} "
                f"for more than {wait_s:.0f} s; try again when it finishes")
        _LAST.wait_s = time.monotonic() - started
        _LAST.span = (started, _LAST.wait_s - locks.lock_wait_s, locks.lock_wait_s)
        try:
            if not path.exists():
                raise WarehouseError(
                    f"no warehouse at {path}: run `gpuledger simulate warehouse` or an import first, "
                    f"or point --warehouse / ${WAREHOUSE_ENV} at an existing file")
            con = _connect(path, read_only=True, deadline=started + wait_s)
            try:
                # one statement (information_schema costs ~5 ms a query: every read command pays it)
                try:
                    done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
                except duckdb.CatalogException:  # an empty file: no migration yet
                    done = set()
                have, shipped = max(done, default=0), [v for v, _, _ in migrations(text=False)]
                missing = [v for v in shipped if v not in done]
                if missing:
                    raise WarehouseError(
                        f"warehouse {path} is at schema version {have} without migration(s) "
                        f"{', '.join(map(str, missing))}, this gpuledger needs {shipped[-1]}: "
                        "run `gpuledger warehouse migrate` (readers never change the file)")
                mark_reader(con)  # at the shipped schema, unchanged while open: read the config once
                with _reading(key):
                    yield con
            except duckdb.Error as exc:  # a damaged block can surface in any later query
                problem = unreadable(path, exc)
                if problem is None:
                    raise
                raise problem from exc
            finally:
                con.close()
        finally:
            locks.release_reader()
    finally:
        locks.close()
