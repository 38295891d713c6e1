"""Long-running commands (``simulate serve``, ``ingest scrape`` with many rounds, watches) stop on
SIGINT and SIGTERM within a second, between writes, never in the middle of one: the signals set an
event the command's waits watch, instead of raising wherever the main thread happens to be.

Exit codes: Ctrl-C (SIGINT) 130, as a shell expects; SIGTERM is a service manager asking for a
clean stop (systemd, Kubernetes), so 0.
"""

from __future__ import annotations

import signal
import threading


class StopSignals:
    """``with StopSignals() as stop:`` ... ``stop.event.wait(seconds)`` ... ``stop.exit_code``.
    Outside the main thread (a test calling the function) the handlers are not installed and
    the event only stops what sets it by hand."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, _frame) -> None:
        if self.signal is None:
            self.signal = signum
        self.event.set()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
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
