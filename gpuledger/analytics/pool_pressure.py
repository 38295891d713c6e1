"""What a pool's other jobs did during each wait, counted without pairing every wait with every job.

For each waiting row (its pool's submit time S and end of wait E) over the pool's started jobs
(submit, start, end, GPUs):

* ``_overtaken`` — jobs submitted after it (submit > S) that started during its wait (S <= start < E);
* ``_held`` — GPUs held at its submission (start <= S < end) plus GPUs taken during its wait by work
  submitted no later than it (submit <= S, S < start < E).

Both are sums over a quadrant of (submit, start) or (start, end) points, answered offline with
about (n + q) log² n numpy work (``quadrant_sums``). The pairs a range join makes grow with waits x
jobs: at 1,000 projects on 16,384 GPUs (96,000 jobs a day) they ran out of 23 GiB (issue 41).
Times are integer microseconds, so "<" is "<= x - 1".
"""

from __future__ import annotations

import numpy as np
import polars as pl

_US = pl.Datetime("us")


def quadrant_sums(a: np.ndarray, b: np.ndarray, w: np.ndarray, above: np.ndarray, upto: np.ndarray) -> np.ndarray:
    """For each query i: the sum of ``w[j]`` over points j with ``a[j] > above[i]`` and
    ``b[j] <= upto[i]`` (``w`` of shape (n,) or (n, k): k weights summed at once, (q, k) back), offline in O((n + q) log² n) with numpy. Points sorted by ``a`` descending,
    so "a > above" is a prefix of p points; a prefix splits into at most one aligned block of each
    size 2^L (the set bits of p, as a Fenwick tree splits it). At each level the points are sorted by
    (block, rank of b) with prefix sums of ``w``: a block's points with b <= upto are one contiguous
    run, found by two binary searches for all queries at once. (It replaced a sqrt(n)-block scan whose
    q x sqrt(n) searches took minutes at a 16,384-GPU month's 1.4 M jobs: issue 41.)"""
    out = np.zeros((len(above), *w.shape[1:]), dtype=np.float64)
    n = len(a)
    if not n or not len(above):
        return out
    order = np.argsort(a, kind="stable")[::-1]  # descending a: "a > above" is a prefix
    a_desc, b, w = a[order], b[order], w[order]
    p = n - np.searchsorted(a_desc[::-1], above, side="right")  # points with a > above
    uniq = np.unique(b)
    rank = np.searchsorted(uniq, b, side="left")
    below = np.searchsorted(uniq, upto, side="right")  # ranks < below have b <= upto
    stride = np.int64(len(uniq) + 1)
    at = np.arange(n, dtype=np.int64)
    for level in range(int(n).bit_length()):
        sel = np.flatnonzero((p >> level) & 1)
        if not len(sel):
            continue
        key = (at >> level) * stride + rank
        by_key = np.argsort(key, kind="stable")
        keys = key[by_key]
        sums = np.concatenate([np.zeros((1, *w.shape[1:])), np.cumsum(w[by_key], axis=0)])
        base = ((p[sel] >> (level + 1)) << 1) * stride  # the prefix's block of this size
        out[sel] += sums[np.searchsorted(keys, base + below[sel], side="left")] - sums[
            np.searchsorted(keys, base, side="left")]
    return out


def _prefix(values: np.ndarray, w: np.ndarray, upto: np.ndarray) -> np.ndarray:
    """For each query: the sum of ``w`` over ``values <= upto``."""
    order = np.argsort(values, kind="stable")
    sums = np.concatenate([[0.0], np.cumsum(w[order])])
    return sums[np.searchsorted(values[order], upto, side="right")]


def pressure(waits: pl.DataFrame, others: pl.DataFrame) -> pl.DataFrame:
    """``waits`` (_row, submit_time, _end) against the pool's ``others`` (_other_submit,
    _other_start, _other_end with FOREVER for still held, _other_gpus): _row, _overtaken (None
    when none), _held."""
    s = waits["submit_time"].cast(_US).to_physical().to_numpy()
    e = waits["_end"].cast(_US).to_physical().to_numpy()
    sub = others["_other_submit"].cast(_US).to_physical().fill_null(np.iinfo(np.int64).min).to_numpy()  # never "after"
    start = others["_other_start"].cast(_US).to_physical().to_numpy()
    end = others["_other_end"].cast(_US).to_physical().to_numpy()
    gpus = others["_other_gpus"].cast(pl.Float64).fill_null(0.0).to_numpy()
    last = np.maximum(e - 1, s)  # the wait's last microsecond (an empty wait: none after S)
    # over (submit, start) points, four query sets and two weights (jobs, GPUs) in one pass:
    # submitted after S and started by E - 1, S - 1, the wait's last microsecond, S
    q = len(s)
    by_submit = quadrant_sums(sub, start, np.column_stack([np.ones(len(sub)), gpus]), np.tile(s, 4),
                              np.concatenate([np.maximum(e - 1, s - 1), s - 1, last, s]))
    # submitted after it, started in [S, E)
    overtaken = by_submit[:q, 0] - by_submit[q:2 * q, 0]
    # held at S: start <= S < end  =  (start <= S) - (end <= S) + (end <= S < start)
    running = _prefix(start, gpus, s) - _prefix(end, gpus, s) + quadrant_sums(start, end, gpus, s, s)
    # taken during the wait by work submitted no later: S < start < E and submit <= S
    during = _prefix(start, gpus, last) - _prefix(start, gpus, s)
    later = by_submit[2 * q:3 * q, 1] - by_submit[3 * q:, 1]
    counted = np.rint(overtaken).astype(np.int64)
    return pl.DataFrame({"_row": waits["_row"],
                         "_overtaken": pl.Series(counted, dtype=pl.UInt32).replace(0, None),
                         "_held": running + during - later})
