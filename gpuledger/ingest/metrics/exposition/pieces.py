"""Cutting exposition text into pieces the bulk parser reads one at a time (issue 36).

The bulk parse holds, besides the text, about twice what it reads at once in arrays and columns of
its own (a 134 MiB page read whole added 233 MiB). So pages are read in pieces of about
``PIECE_CHARS`` characters, cut just before a newline: small pages share a piece (a scrape round's
node pages, ~32 kB each), a large page is cut into several, before a metric family where one starts
near the cut. What a piece leaves behind is compact (48 bytes a kept sample: its page, line, metric,
series number, value and time), so parsing a page holds the page, one piece's working set, those
rows and the label caches (``bulk``: bounded, ~80 MB at most). The rules that span a page (a series
repeated in it, one UUID under two hosts) are applied to the rows of all pieces together
(``bulk.parse_pages_bulk``): a copy in another piece is caught as one in the same piece.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpuledger.ingest.metrics.exposition.scan import in_place, text_bytes

# 16 Mi characters: a 10,240-GPU round (~40 MB) in 3 pieces, parsed as fast as whole (8 Mi: ~20 %
# slower, each piece's fixed cost of ~90 polars calls and a label-numbering pass), a working set of
# ~35 MiB at once
PIECE_CHARS = 16 * 2**20


class Segment(NamedTuple):
    """Characters ``[start, end)`` of page ``page``: a whole page, or a part of one cut just before a
    newline (that newline belongs to no segment, so a page's lines are its segments' lines)."""

    page: int
    start: int
    end: int


def plan_pieces(texts: list[str], piece_chars: int) -> list[list[Segment]]:
    """The pieces ``texts`` are read in, in text order: whole pages while they fit in ``piece_chars``
    together, a longer page on its own, cut into segments of at least ``piece_chars`` characters
    (up to the next newline: a line is never cut)."""
    pieces: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0
    for page, text in enumerate(texts):
        n = len(text)
        if n <= piece_chars:
            if current and size + n > piece_chars:
                pieces.append(current)
                current, size = [], 0
            current.append(Segment(page, 0, n))
            size += n + 1
            continue
        if current:
            pieces.append(current)
            current, size = [], 0
        start = 0
        while True:
            cut = _cut(text, start + piece_chars, piece_chars) if start + piece_chars < n else -1
            if cut < 0:
                pieces.append([Segment(page, start, n)])
                break
            pieces.append([Segment(page, start, cut)])
            start = cut + 1
    if current:
        pieces.append(current)
    return pieces


def _cut(text: str, at: int, within: int) -> int:
    """Where to cut ``text`` at or after ``at``: the newline before the next comment line (a metric
    family's ``# HELP``) up to ``within`` characters further, else the next newline; -1 for none. A
    family's start does not move when values change length, so a scraper's next round is cut at the
    same lines and its pieces' label texts are the last round's (``bulk._recalled``)."""
    family = text.find("\n#", at, at + within)
    return family if family >= 0 else text.find("\n", at)


def piece_bytes(texts: list[str], segments: list[Segment]) -> tuple[np.ndarray, np.ndarray] | None:
    """The segments' UTF-8 bytes as one buffer (joined by a newline) and the offset each starts at;
    None when a segment holds lone surrogates. One segment of an ASCII page is a view of the page
    (``scan.text_bytes``), from the 8-byte boundary at or before the segment (the scan reads 8-byte
    words, ~4x slower off a boundary; ``scan.read_lines`` starts at the segment's offset). Several
    are copied once into one buffer of the piece's size."""
    if len(segments) == 1:
        page, start, end = segments[0]
        if in_place(texts[page]):  # align, do not copy
            whole = text_bytes(texts[page], 0, end)
            lead = min((whole.ctypes.data + start) % 8, start)  # (a str's characters start 8-aligned)
            return whole[start - lead:], np.array([lead], dtype=np.int64)
    parts = []
    for page, start, end in segments:
        part = text_bytes(texts[page], start, end)
        if part is None:
            return None
        parts.append(part)
    sizes = np.fromiter((len(p) + 1 for p in parts), dtype=np.int64, count=len(parts))
    if len(parts) > 1:  # one copy into numpy's memory (huge pages: b"\\n".join's 4 kB page faults cost 3x)
        newline = np.full(1, 10, dtype=np.uint8)
        parts = [np.concatenate([x for part in parts for x in (part, newline)][:-1])]
    return parts[0], np.concatenate(([0], np.cumsum(sizes)[:-1]))


def line_texts(text: str, numbers: list[int]) -> list[str]:
    """Lines ``numbers`` (1-based, as ``text.split("\\n")`` numbers them) of ``text``, each without
    one trailing ``\\r``, found by one newline scan of the page's bytes (no list of every line). For
    the rare line refused after its piece was read (a series repeated in another piece)."""
    data = text_bytes(text)  # (not None: a page the bulk parser read holds no lone surrogates)
    ends = np.flatnonzero(data == 10)
    out = []
    for no in numbers:
        start = int(ends[no - 2]) + 1 if no > 1 else 0
        end = int(ends[no - 1]) if no - 1 < len(ends) else len(data)
        out.append(data[start:end].tobytes().decode("utf-8").removesuffix("\r"))
    return out
