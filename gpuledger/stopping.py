"""Long-running commands (``simulate serve``, ``ingest scrape`` with many rounds, watches) stop on
SIGINT and SIGTERM within a second, between writes, never in the middle of one: the signals set an
event the command's waits watch, instead of raising wherever the main thread happens to be. They
do whatever the process inherited: a parent that ignored or blocked SIGTERM passes that on across
exec, and the handlers and the unblocking here undo it.

Exit codes: Ctrl-C (SIGINT) 130, as a shell expects; SIGTERM is a service manager asking for a
clean stop (systemd, Kubernetes), so 0.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Stopped(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` swallows it
    """Raised by ``StopSignals(interrupt=True)`` where the main thread waits (a blocking read of a
    stream that may stay silent for minutes), never inside a ``holding()`` block (a write)."""


class StopSignals:
    """``with StopSignals() as stop:`` ... ``stop.event.wait(seconds)`` ... ``stop.exit_code``.
    Outside the main thread (a test calling the function) the handlers are not installed and
    the event only stops what sets it by hand.

    ``interrupt=True`` is for commands that block in a read no event can wake (a Kubernetes watch
    stream): a signal raises :class:`Stopped` wherever the main thread is, except inside
    ``with stop.holding():`` (a warehouse write), which finishes first and raises it on leaving."""

    def __init__(self, *, interrupt: bool = False) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self.interrupt = interrupt
        self._holding = 0
        self._previous: dict[int, object] = {}

    def _handle(self, signum, _frame) -> None:
        if self.signal is None:
            self.signal = signum
        self.event.set()
        if self.interrupt and not self._holding:
            raise Stopped

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """A block a signal must not cut (a write): the stop waits until it is done."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        if self.interrupt and not self._holding and self.event.is_set():
            raise Stopped

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
            # a handler is not enough where the signals arrive blocked: a process inherits its
            # parent's mask across exec (a test worker's child outlived SIGTERM so)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    @property
    def exit_code(self) -> int:
        return 130 if self.signal == signal.SIGINT else 0
