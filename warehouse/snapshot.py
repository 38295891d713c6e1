"""What a reader connection reads once. A connection from ``open_reader`` sees a file at the
shipped schema (it refuses one that lacks a migration) that no write changes while it is open
(writers wait for the readers that are in), so an answer read through it — the stored config —
holds until it closes: read it once, and skip the probes a bare connection needs (issue 41: the
config table's probe through ``duckdb_tables()`` and a second read cost ~20 ms of `report
squatters` at 4,096 GPUs). Any other connection (a writer, a bare ``duckdb.connect``) has no memo
and reads every time."""

from __future__ import annotations

import weakref

_MEMOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def mark_reader(con) -> None:
    """``con`` is an open_reader connection: from now on it has a memo."""
    _MEMOS[con] = {}


def reader_memo(con) -> dict | None:
    """The memo of an open_reader connection (answers that cannot change while it is open), None
    for any other connection."""
    try:
        return _MEMOS.get(con)
    except TypeError:  # not weakly referenceable: no reader of ours
        return None
