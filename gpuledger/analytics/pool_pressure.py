"""What a pool's other jobs did during each wait, counted without pairing every wait with every job.

For each waiting row (its pool's submit time S and end of wait E) over the pool's started jobs
(submit, start, end, GPUs):

* ``_overtaken`` — jobs submitted after it (submit > S) that started during its wait (S <= start < E);
* ``_held`` — GPUs held at its submission (start <= S < end) plus GPUs taken during its wait by work
  submitted no later than it (submit <= S, S < start < E).

Both are sums over a quadrant of (submit, start) or (start, end) points, answered offline in
about q x sqrt(n) binary searches with numpy (``quadrant_sums``). The pairs a range join makes grow with waits x
jobs: at 1,000 projects on 16,384 GPUs (96,000 jobs a day) they ran out of 23 GiB (issue 41).
Times are integer microseconds, so "<" is "<= x - 1".
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

_US = pl.Datetime("us")


def quadrant_sums(a: np.ndarray, b: np.ndarray, w: np.ndarray, above: np.ndarray, upto: np.ndarray) -> np.ndarray:
    """For each query i: the sum of ``w[j]`` over points j with ``a[j] > above[i]`` and
    ``b[j] <= upto[i]``. Points in blocks of ~sqrt(n) sorted by ``a``: a block wholly above a query
    answers by a binary search over its ``b`` (sorted, with prefix sums); the one block it starts
    inside is compared point by point."""
    out = np.zeros(len(above), dtype=np.float64)
    if not len(a) or not len(above):
        return out
    order = np.argsort(a, kind="stable")
    a, b, w = a[order], b[order], w[order]
    first = np.searchsorted(a, above, side="right")  # the first point with a > above
    size = max(64, int(math.sqrt(len(a))))
    for lo in range(0, len(a), size):
        hi = min(lo + size, len(a))
        inner = np.argsort(b[lo:hi], kind="stable")
        block_b, block_sum = b[lo:hi][inner], np.cumsum(w[lo:hi][inner])
        whole = first <= lo
        k = np.searchsorted(block_b, upto[whole], side="right")
        out[whole] += np.where(k > 0, block_sum[np.maximum(k - 1, 0)], 0.0)
        part = np.flatnonzero((first > lo) & (first < hi))
        if len(part):
            at = np.arange(lo, hi)
            hit = (at[None, :] >= first[part, None]) & (b[None, lo:hi] <= upto[part, None])
            out[part] += (hit * w[None, lo:hi]).sum(axis=1)
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
    ones = np.ones(len(sub))
    last = np.maximum(e - 1, s)  # the wait's last microsecond (an empty wait: none after S)
    # submitted after it, started in [S, E)
    overtaken = quadrant_sums(sub, start, ones, s, np.maximum(e - 1, s - 1)) - quadrant_sums(sub, start, ones, s, s - 1)
    # held at S: start <= S < end  =  (start <= S) - (end <= S) + (end <= S < start)
    running = _prefix(start, gpus, s) - _prefix(end, gpus, s) + quadrant_sums(start, end, gpus, s, s)
    # taken during the wait by work submitted no later: S < start < E and submit <= S
    during = _prefix(start, gpus, last) - _prefix(start, gpus, s)
    later = quadrant_sums(sub, start, gpus, s, last) - quadrant_sums(sub, start, gpus, s, s)
    counted = np.rint(overtaken).astype(np.int64)
    return pl.DataFrame({"_row": waits["_row"],
                         "_overtaken": pl.Series(counted, dtype=pl.UInt32).replace(0, None),
                         "_held": running + during - later})
