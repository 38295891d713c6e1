"""A read-only connection a warm process keeps between calls, given up as soon as a writer wants the file.

Opening the DuckDB file (lock, connect, schema check) costs 20-40 ms; a dashboard question
answered from the materialized tables costs 2-5 ms (BENCHMARKS.md, "Side by side with
Prometheus"). So a process that asks many questions (the dashboards, a benchmark) keeps one
``open_reader`` open in a holder thread and hands out cursors of it. The lock protocol is
unchanged: the holder holds the file shared like any reader, so no writer can commit while it is
kept (what it reads is the newest committed data), and it lets go within ``poll_s`` of a writer
taking the gate (``<file>.gate``), or once the calls in flight finish. Callers arriving while it
lets go take a plain ``open_reader``, which waits behind the writer: writers keep their preference.
The holder thread opened the reader, so ``open_writer`` in a caller's thread is not refused as a
writer nested in a reader.

Each thread keeps its cursor (one DuckDB connection of the kept database) for as long as the file
is kept: a new cursor plus its ``SET TimeZone`` costs ~0.2 ms, as much as a small question itself.
A nested call in the same thread gets a cursor of its own. Calls leave their cursor as they found
it (they read; what they register they unregister).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
from gpuledger.warehouse.access import held_against
from gpuledger.warehouse.db import open_reader, unreadable
from gpuledger.warehouse.paths import check_reader_path, resolve_warehouse_path

POLL_S = 0.05  # how soon the kept reader notices a waiting writer (one flock probe per poll)
IDLE_S = 30.0  # unused this long, the file is let go (nothing is held by a quiet process)


def _writer_wants(gate_fd: int | None) -> bool:
    """Does a writer hold or wait for the file? A writer holds the gate exclusively for its whole
    turn; a reader passing through holds it for a moment (then this errs on letting go)."""
    return gate_fd is not None and held_against(gate_fd, fcntl.LOCK_SH)


class KeptReader:
    """One warehouse file's kept reader. Use :func:`kept_reader` (one per file and process)."""

    def __init__(self, path: Path, *, poll_s: float = POLL_S, idle_s: float = IDLE_S) -> None:
        self.path = path
        self.poll_s, self.idle_s = poll_s, idle_s
        self._guard = threading.Lock()
        self._con = None  # the holder's connection while it is open and not letting go
        self._users = 0
        self._last_used = 0.0
        self._gate_fd: int | None = None
        self._cursors: dict[int, object] = {}  # thread ident -> its idle cursor of the kept connection
        self.opened = 0  # how many times the file was opened (tests, benchmarks)
        self.cursors_made = 0  # tests: cursors are reused within a thread

    def _gate(self) -> int | None:
        if self._gate_fd is None:
            try:
                self._gate_fd = os.open(f"{self.path}.gate", os.O_RDONLY)
            except OSError:
                return None  # no gate yet: no writer has used this file
        return self._gate_fd

    def _hold(self, handed: queue.Queue) -> None:
        try:
            with open_reader(self.path) as con:
                with self._guard:
                    self._con, self._last_used = con, time.monotonic()
                    self.opened += 1
                handed.put(con)
                while True:
                    time.sleep(self.poll_s)
                    with self._guard:
                        if self._con is not None and (_writer_wants(self._gate())
                                                      or time.monotonic() - self._last_used > self.idle_s):
                            self._con = None  # no new callers; the ones in flight finish first
                        if self._con is None and self._users == 0:
                            cursors, self._cursors = list(self._cursors.values()), {}
                            break
                for cursor in cursors:  # before the connection closes: nobody is using them
                    cursor.close()
        except BaseException as exc:  # noqa: BLE001 - the caller waiting for the connection raises it
            with self._guard:
                self._con = None
            handed.put(exc)

    def _take(self):
        """A connection for one call: the kept one, a newly kept one, or None (a writer wants the
        file, or the holder is letting go: the caller opens a plain reader)."""
        with self._guard:
            if self._con is not None:
                self._users += 1
                return self._con
            if self._users or _writer_wants(self._gate()):
                return None
            self._users += 1  # counted before the holder starts, so it cannot let go under us
        handed: queue.Queue = queue.Queue()
        threading.Thread(target=self._hold, args=(handed,), name=f"kept-reader {self.path.name}",
                         daemon=True).start()
        got = handed.get()
        if isinstance(got, BaseException):
            with self._guard:
                self._users -= 1
            raise got
        return got

    def _give_back(self) -> None:
        with self._guard:
            self._users -= 1
            self._last_used = time.monotonic()

    @contextlib.contextmanager
    def reader(self) -> Iterator:
        con = self._take()
        if con is None:
            with open_reader(self.path) as plain:
                yield plain
            return

        ident = threading.get_ident()
        cursor = None
        try:
            with self._guard:  # this thread's idle cursor, taken out while in use (nested calls)
                cursor = self._cursors.pop(ident, None)
            if cursor is None:
                cursor = con.cursor()  # threads never share one
                self.cursors_made += 1
                cursor.execute("SET TimeZone = 'UTC'")  # a cursor does not inherit the session's
            try:
                yield cursor
            except duckdb.Error as exc:  # a damaged block can surface in any query, as in open_reader
                problem = unreadable(self.path, exc)
                if problem is None:
                    raise
                raise problem from exc
        finally:
            with self._guard:
                if cursor is not None and ident not in self._cursors:
                    self._cursors[ident], cursor = cursor, None  # kept for this thread's next call
            if cursor is not None:
                cursor.close()  # a nested call's own cursor
            self._give_back()

    def release(self) -> None:
        """Let the file go as soon as the calls in flight finish (tests, shutdown)."""
        with self._guard:
            self._con = None


_KEPT: dict[str, KeptReader] = {}
_KEPT_GUARD = threading.Lock()


def kept_reader(path=None) -> contextlib.AbstractContextManager:
    """``with kept_reader(path) as con:`` — like ``open_reader``, but the file stays open between
    calls of this process until a writer wants it (see the module's docstring)."""
    resolved = resolve_warehouse_path(path)
    check_reader_path(resolved)
    key = os.path.realpath(resolved)
    with _KEPT_GUARD:
        kept = _KEPT.get(key)
        if kept is None:
            kept = _KEPT[key] = KeptReader(resolved)
    return kept.reader()
