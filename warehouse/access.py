"""Who may hold the live DuckDB file: a reader/writer lock across processes, writers preferred.

DuckDB lets one process hold a read-write connection and that blocks every other process, readers
included; read-only connections from many processes coexist (shared/notes/duckdb-here.md). So
every process agrees, through ``flock`` on three small side files, before it touches the file:

``<file>.lock``
    held shared by each reader while its read-only connection is open, exclusively by the writer
    while its read-write connection is open (the same file older gpuledger writers locked).
``<file>.gate``
    held exclusively by a writer from the moment it wants the file until it lets go; a reader
    passes through it (takes it for a moment) before taking ``.lock`` shared. A waiting writer so
    stops new readers from coming in and gets the file as soon as the readers already in finish:
    a steady stream of readers cannot starve it. It holds the writer's PID and whether it is
    creating the warehouse, for the messages readers give when they cannot wait longer.
``<file>.readers``
    held shared by each reader while it waits; a long writer checks it between chunks
    (:meth:`WarehouseLocks.readers_waiting`) and lets them in (``warehouse.yield_to_readers``).

``flock`` locks belong to an open file description, so two threads (or two ``with`` blocks) of
one process exclude each other as two processes do, and the kernel drops them when a process dies.
Waiting is polling with a short back-off and a deadline (a blocking ``flock`` cannot time out).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

_POLL_FIRST_S = 0.001
_POLL_MAX_S = 0.01


def _poll(fd: int, op: int, deadline: float) -> bool:
    """Take ``flock(op)`` before ``deadline`` (monotonic); False when it passed."""
    delay = _POLL_FIRST_S
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            now = time.monotonic()
            if now >= deadline:
                return False
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _POLL_MAX_S)


def held_against(fd: int, op: int) -> bool:
    """Does another open file hold a lock that ``op`` on ``fd`` would wait for? A momentary
    non-blocking try, let go at once (two system calls)."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _open_side_file(path: Path, *, create: bool) -> int | None:
    """An fd for a side file; None when it does not exist and cannot be made (a read-only place:
    then no writer can be at work there either)."""
    try:
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666)
    except FileNotFoundError:
        return None
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY)  # flock works on a read-only descriptor too
        except OSError:
            return None
    except OSError:
        return None


@dataclass(frozen=True)
class WriterInfo:
    """Who holds (or last held) the writer gate."""

    pid: int
    creating: bool

    @property
    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class WarehouseLocks:
    """The side files of one warehouse file, for one reader or one writer (not shared)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_file = Path(f"{path}.lock")
        self.gate_file = Path(f"{path}.gate")
        self.readers_file = Path(f"{path}.readers")
        self._fds: dict[str, int] = {}
        # When (time.monotonic(), one clock for every process on Linux) the last acquire_* took
        # each lock, and how long a reader waited at the gate and then for the file: where a
        # wait went (benchmarks, diagnostics).
        self.gate_at = self.locked_at = 0.0
        self.gate_wait_s = self.lock_wait_s = 0.0

    # --- side files ---------------------------------------------------------------------------
    def _fd(self, name: str, *, create: bool) -> int | None:
        fd = self._fds.get(name)
        if fd is None:
            fd = _open_side_file(getattr(self, f"{name}_file"), create=create)
            if fd is not None:
                self._fds[name] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)  # also drops any flock still held through it
        self._fds.clear()

    def writer_info(self) -> WriterInfo | None:
        """The PID written in the gate by the last writer, if any."""
        try:
            words = self.gate_file.read_text().split()
            return WriterInfo(int(words[0]), len(words) > 1 and words[1] == "creating")
        except (OSError, ValueError, IndexError):
            return None

    def _refuse_odd_side_files(self) -> None:
        """A side file that is a folder (or a device, a socket) cannot be locked: said as an OSError
        naming it (the CLI prints it in one line), not read as "no lock here, nobody writes"."""
        for path in (self.lock_file, self.gate_file, self.readers_file):
            try:
                mode = path.stat().st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
                raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                              f"{kind} where gpuledger keeps a lock file of {self.path.name}; move it aside", str(path))

    # --- writers ------------------------------------------------------------------------------
    def acquire_writer(self, deadline: float) -> bool:
        """Gate, then the file exclusively (waits for the readers already in). False at the
        deadline, holding nothing."""
        self._refuse_odd_side_files()
        gate = self._fd("gate", create=True)
        lock = self._fd("lock", create=True)
        if gate is None or lock is None:
            raise PermissionError(f"cannot create the lock files beside {self.path}")
        if not _poll(gate, fcntl.LOCK_EX, deadline):
            return False
        self.gate_at = time.monotonic()  # from here new readers wait for this writer
        self.mark_state(creating=False)
        if not _poll(lock, fcntl.LOCK_EX, deadline):
            fcntl.flock(gate, fcntl.LOCK_UN)
            return False
        self.locked_at = time.monotonic()
        return True

    def mark_state(self, *, creating: bool) -> None:
        """Write this writer's PID in the gate it holds, and whether the file is still being
        created (readers then give up sooner: there is nothing to read yet)."""
        gate = self._fds["gate"]
        try:
            os.ftruncate(gate, 0)
            os.pwrite(gate, f"{os.getpid()} {'creating' if creating else 'writing'}\n".encode(), 0)
        except OSError:
            pass  # a gate file we may lock but not write (another user's): the PID is only for messages

    def release_writer(self) -> None:
        for name in ("lock", "gate"):  # this order: a reader through the gate finds .lock free
            fd = self._fds.get(name)
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def readers_waiting(self) -> bool:
        """Is any reader waiting for the file now? (Two system calls.)"""
        fd = self._fd("readers", create=True)
        return fd is not None and held_against(fd, fcntl.LOCK_EX)

    def let_readers_in(self, max_wait_s: float) -> None:
        """After release_writer: wait (at most ``max_wait_s``) until the readers that were waiting
        hold the file, so the writer does not take it back before they got their turn."""
        fd = self._fd("readers", create=True)
        if fd is not None and _poll(fd, fcntl.LOCK_EX, time.monotonic() + max_wait_s):
            fcntl.flock(fd, fcntl.LOCK_UN)

    # --- readers ------------------------------------------------------------------------------
    def acquire_reader(self, deadline: float) -> bool:
        """Through the gate, then the file shared. False at the deadline, holding nothing."""
        self._refuse_odd_side_files()
        lock = self._fd("lock", create=True)
        if lock is None:
            return True  # no lock file and none can be made: nobody can be writing here
        gate = self._fd("gate", create=True)
        waiting = self._fd("readers", create=True)
        if waiting is not None:
            fcntl.flock(waiting, fcntl.LOCK_SH)  # only a writer's momentary LOCK_NB probe conflicts
        started = time.monotonic()
        self.gate_wait_s = self.lock_wait_s = 0.0
        try:
            if gate is not None and not _poll(gate, fcntl.LOCK_EX, deadline):
                self.gate_wait_s = time.monotonic() - started
                return False
            self.gate_at = time.monotonic()
            self.gate_wait_s = self.gate_at - started
            try:
                # The gate is free only when no writer holds or wants the file, so this is
                # immediate except against a writer that does not use the gate (older gpuledger).
                got = _poll(lock, fcntl.LOCK_SH, deadline)
                self.locked_at = time.monotonic()
                self.lock_wait_s = self.locked_at - self.gate_at
                return got
            finally:
                if gate is not None:
                    fcntl.flock(gate, fcntl.LOCK_UN)
        finally:
            if waiting is not None:
                fcntl.flock(waiting, fcntl.LOCK_UN)

    def release_reader(self) -> None:
        fd = self._fds.get("lock")
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
