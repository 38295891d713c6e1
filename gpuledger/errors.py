"""Errors a person can act on. Modules raise these with a message that names the file, line, field
or option and says what to do; ``gpuledger.cli.main`` prints that one line and exits with the
error's code, never a traceback (``--debug`` or ``GPULEDGER_DEBUG=1`` shows it).

Both subclass ValueError / RuntimeError as well, so callers that caught those before still do.
Light on purpose: every CLI module imports this.
"""

from __future__ import annotations

import os

DEBUG_ENV = "GPULEDGER_DEBUG"


def debug_wanted() -> bool:
    """--debug (which sets $GPULEDGER_DEBUG) or $GPULEDGER_DEBUG=1: library text may be shown."""
    return os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")


class GpuledgerError(Exception):
    """A known problem; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class UsageError(GpuledgerError, ValueError):
    """The user asked for something that cannot be done as given: a bad option value, a range
    whose end comes before its start, a path that cannot be the file asked for. Exit code 2."""

    exit_code = 2


class RunError(GpuledgerError, RuntimeError):
    """A run that was asked correctly failed: a source answered wrongly or not at all, a port
    was taken. Exit code 1."""

    exit_code = 1


def printable(text: str, limit: int | None = None) -> str:
    """``text`` safe for a terminal: control and other non-printable characters become escapes
    (``\\x1b``, ``\\x00``, ``\\ufffd`` stays, it is printable), cut to ``limit`` characters with "…".
    Raw input (quarantined lines, answers of a broken server) must never drive the terminal."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
