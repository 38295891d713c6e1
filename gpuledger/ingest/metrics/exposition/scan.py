"""Reading an exposition text as bytes: one numpy scan finds its lines and their marks, and string
columns point into the text's own buffer (Arrow string views: no byte copied). The bulk parser
(``bulk``) judges what this finds; nothing here knows DCGM.

An ASCII ``str`` is read in place (CPython: ``PyUnicode_AsUTF8AndSize`` hands out the string's own
storage), other text is encoded a piece at a time (``pieces``).
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

if sys.implementation.name == "cpython":
    _AS_UTF8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    _AS_UTF8.restype = ctypes.c_void_p
    _AS_UTF8.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t)]
else:  # pragma: no cover - other interpreters encode
    _AS_UTF8 = None


def ascii_in_place(text: str) -> ctypes.Array:
    """An ASCII ``str``'s bytes, not copied: CPython stores an ASCII string one byte a character and
    ``PyUnicode_AsUTF8AndSize`` hands out that storage as its UTF-8 (encoding a 40 MB page costs
    ~14 ms). The buffer holds ``text``, so whatever views it keeps the characters alive."""
    size = ctypes.c_ssize_t()
    address = _AS_UTF8(text, ctypes.byref(size))
    pinned = (ctypes.c_char * size.value).from_address(address)
    pinned.text = text
    return pinned


def in_place(text: str) -> bool:
    """Whether ``text_bytes`` reads ``text`` in place: an ASCII ``str`` on CPython (``isascii`` reads
    a flag: O(1))."""
    return _AS_UTF8 is not None and type(text) is str and text.isascii()


def text_bytes(text: str, start: int = 0, end: int | None = None) -> np.ndarray | None:
    """Characters ``[start, end)`` of ``text`` as UTF-8 bytes: in place for an ASCII ``str``
    (``ascii_in_place``: a view, no copy), else encoded (a copy of that part only); None when they
    hold lone surrogates (only the per-line parser can name those lines)."""
    if in_place(text):
        return np.frombuffer(ascii_in_place(text), dtype=np.uint8)[start:end]
    try:
        return np.frombuffer(text[start:end].encode("utf-8"), dtype=np.uint8)
    except UnicodeEncodeError:
        return None


_BYTE_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)


class Text:
    """The page buffer, read 8 bytes at a time at any offset, and cut into string columns."""

    def __init__(self, data) -> None:
        self.arrow = pa.py_buffer(data)
        self.buf = np.frombuffer(data, dtype=np.uint8)
        self.words = np.frombuffer(data, dtype="<u8", count=len(self.buf) // 8)
        self.edge = (len(self.words) - 1) * 8  # a word from here on is read byte by byte

    def word(self, at: np.ndarray) -> np.ndarray:
        """The 8 bytes from each offset ``at``, little-endian (zeros past the end): the two aligned
        words around it, shifted together."""
        words = self.words
        if len(words) >= 2:
            q = at >> 3
            np.minimum(q, len(words) - 2, out=q)
            shift = (at & 7).view(np.uint64) << np.uint64(3)
            out = np.take(words, q) >> shift
            q += 1
            high = np.take(words, q)
            shift ^= np.uint64(63)  # 63 - shift (a multiple of 8 up to 56)
            high <<= shift
            high <<= np.uint64(1)  # two steps: a shift by 64 would not give 0
            out |= high
        else:
            out = np.zeros(len(at), dtype=np.uint64)
        if len(at) and at.max() >= self.edge:
            for i in np.flatnonzero(at >= self.edge).tolist():
                o = int(at[i])
                out[i] = int.from_bytes(self.buf[o:o + 8].tobytes().ljust(8, b"\0"), "little")
        return out

    def views(self, at: np.ndarray, length: np.ndarray, word0: np.ndarray) -> np.ndarray:
        """Arrow string views of the ASCII strings ``buf[at:at + length]``, 16 bytes each: a string of
        up to 12 bytes inline (zero-padded), else its length, first 4 bytes, buffer 0 and offset.
        ``word0``: ``word(at)``."""
        first = word0 & _BYTE_MASK[np.minimum(length, 8)]
        view = np.empty((len(at), 2), dtype=np.uint64)
        view[:, 0] = length.view(np.uint64) | (first << np.uint64(32))
        view[:, 1] = at.view(np.uint64) << np.uint64(32)
        short = length <= 12
        np.copyto(view[:, 1], first >> np.uint64(32), where=short)  # bytes 4..7
        longer = np.flatnonzero(short & (length > 8))  # and bytes 8..11
        if len(longer):
            rest = self.word(np.take(at, longer) + 8) & _BYTE_MASK[np.take(length, longer) - 8]
            view[longer, 1] |= rest << np.uint64(32)
        return view

    def column(self, views: np.ndarray) -> pl.Series:
        """A String column of ``views`` into the text: no byte of the text copied."""
        array = pa.Array.from_buffers(pa.string_view(), len(views), [None, pa.py_buffer(views), self.arrow])
        return pl.Series(array)  # zero-copy (from_arrow would rechunk: ~0.1 ms a call)


_STEP = 1 << 21  # bytes a step of the scan: the step's bytes are still in cache when its lines are read


@dataclass
class Lines:
    """What the scan found: each line's first byte (``starts``); the lines that are neither empty, a
    comment nor a candidate (``other``: the per-line way); per candidate line (name '{' labels '} '
    tail, no other mark, perhaps one '\\r' before the newline) its line index (``cand``), the string
    views of its name, labels and tail (``Text.views``) and whether its name starts a run (differs
    from the line before's)."""

    starts: np.ndarray
    other: np.ndarray
    cand: np.ndarray
    name_views: np.ndarray
    label_views: np.ndarray
    tail_views: np.ndarray
    name_head: np.ndarray


def set_bytes(hit: np.ndarray, word_hit: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(hit)`` for a sparse ``hit`` (~1 byte in 90), ~1/4 quicker: the 8-byte words
    holding a hit first, then the hits inside those. ``word_hit``: room for len(hit) // 8 flags."""
    whole = len(hit) // 8 * 8
    words = hit[:whole].view(np.uint64)
    flags = word_hit[:len(words)]
    np.not_equal(words, 0, out=flags)
    w = np.flatnonzero(flags)
    j = np.flatnonzero(np.take(words, w).view(bool))
    at = (np.take(w, j >> 3) << 3) | (j & 7)
    return np.concatenate((at, np.flatnonzero(hit[whole:]) + whole)) if whole < len(hit) else at


def after_newline(buf: np.ndarray, at: int) -> int:
    """The offset just past the first newline at or after ``at`` (the text's end if none)."""
    while at < len(buf):
        window = buf[at:at + 4096]
        found = np.flatnonzero(window == 10)
        if len(found):
            return at + int(found[0]) + 1
        at += len(window)
    return len(buf)


def read_lines(text: Text, start: int = 0) -> Lines:
    """One pass over the text from byte ``start`` in steps: in each, the marks (``\\n``, ``{``, ``}``,
    also ``|``, ``~``, DEL, every non-ASCII byte and the control bytes below ``\\n``: a line with
    another mark than its ``{`` and ``}`` goes the per-line way), then every whole line of the step
    read while its bytes are in cache (on a 40 MB page a byte fetched later from memory costs ~8 ns
    a line). (The bytes before ``start`` only align the buffer: ``pieces.piece_bytes``.)"""
    buf = text.buf
    size = len(buf)
    if size == start:
        none = np.zeros(0, dtype=np.int64)
        return Lines(np.full(1, start, np.int64), none, none, *(np.zeros((0, 2), np.uint64),) * 3,
                      np.zeros(0, bool))
    shifted = np.empty(0, dtype=np.uint8)
    hit = np.empty(0, dtype=bool)
    lo, line_no = start, 0  # the step's first byte and first line
    got: list[tuple] = []
    while lo < size:
        hi = after_newline(buf, lo + _STEP)  # a step holds whole lines
        part = buf[lo:hi]
        n = hi - lo
        if n > len(shifted):
            shifted, hit, word_hit = np.empty(n, np.uint8), np.empty(n, bool), np.empty(n // 8, bool)
        np.subtract(part, 11, out=shifted[:n])  # bytes 0..10 wrap round to 245..255
        np.greater_equal(shifted[:n], 112, out=hit[:n])  # ... and 123..255 land on 112..244
        at = set_bytes(hit[:n], word_hit)
        marks, kinds = at + lo, np.take(part, at)
        newline = np.flatnonzero(kinds == 10)  # as positions in marks
        if hi < size:  # the step ends with a newline
            ends, end_at = marks[newline], newline
        else:  # the text's last line ends at its end
            ends = np.concatenate((marks[newline], [size]))
            end_at = np.concatenate((newline, [len(marks)]))
        starts = np.concatenate(([lo], ends[:-1] + 1))
        before = np.concatenate(([-1], end_at[:-1]))  # a line's marks: marks[before + 1 : end_at]
        nonempty = ends > starts
        comment = nonempty & (np.take(buf, np.minimum(starts, size - 1)) == 35)  # '#'
        line = nonempty & ~comment
        two = np.flatnonzero((end_at - before == 3) & line)
        at = np.take(before, two) + 1  # (np.take: ~2x quicker than fancy indexing)
        brace, close, end = np.take(marks, at), np.take(marks, at + 1), np.take(ends, two)
        end = end - (np.take(buf, end - 1) == 13)  # one '\r' before the newline is not the line's
        ok = ((np.take(kinds, at) == 123) & (np.take(kinds, at + 1) == 125) & (brace > np.take(starts, two))
              & (close + 2 < end))
        ok &= np.take(buf, np.minimum(close + 1, size - 1)) == 32
        line[two[ok]] = False  # what stays: lines for line_verdict
        two, brace, close, end = two[ok], brace[ok], close[ok], end[ok]
        name_at, label_at, tail_at = np.take(starts, two), brace + 1, close + 2
        names = text.views(name_at, brace - name_at, text.word(name_at))
        head = np.ones(len(two), dtype=bool)
        if len(two) > 1:  # compared while in cache
            head[1:] = (text.column(names[1:]) != text.column(names[:-1])).to_numpy()
        got.append((starts, np.flatnonzero(line) + line_no, two + line_no, names,
                    text.views(label_at, close - label_at, text.word(label_at)),
                    text.views(tail_at, end - tail_at, text.word(tail_at)), head))
        lo, line_no = hi, line_no + len(ends)
    return Lines(*(np.concatenate(column) for column in zip(*got)))


def name_views(names: tuple[str, ...]) -> tuple[pa.Buffer, np.ndarray]:
    """One buffer of ``names`` and each name's Arrow string view into it."""
    raw = [n.encode() for n in names]
    views, offset = [], 0
    for b in raw:
        if len(b) <= 12:
            padded = b.ljust(12, b"\0")
            views.append((len(b) | int.from_bytes(padded[:4], "little") << 32, int.from_bytes(padded[4:], "little")))
        else:
            views.append((len(b) | int.from_bytes(b[:4], "little") << 32, offset << 32))
        offset += len(b)
    return pa.py_buffer(b"".join(raw)), np.array(views, dtype=np.uint64).reshape(-1, 2)
