"""A worker process of the Prometheus backfill (``gpuledger.ingest.metrics.prometheus.backfill``).

Started as ``python -m gpuledger.ingest.metrics.prometheus.worker`` (a fresh interpreter: no fork of a
process holding DuckDB / polars threads, and, unlike multiprocessing's spawn, the caller's main
script is not re-imported). It reads jobs from stdin and answers each on stdout, one at a time:
8-byte little-endian length + pickle, the answer being ``(True, result)`` or ``(False, exception)``.
It exits when stdin closes, so it never outlives a backfill that was killed.
"""

from __future__ import annotations

import gc
import pickle
import struct
import sys
import traceback

from gpuledger.ingest.metrics.prometheus.chunk import chunk_in_worker


def main() -> None:
    # Decoding builds many small objects and no cycles; the cyclic GC would only rescan them.
    gc.disable()

    jobs, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answer stream
    while True:
        head = jobs.read(8)
        if len(head) < 8:
            return
        job = pickle.loads(jobs.read(struct.unpack("<Q", head)[0]))
        try:
            answer = (True, chunk_in_worker(**job))
        except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
            answer = (False, exc)
        try:
            blob = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            blob = pickle.dumps((False, RuntimeError(traceback.format_exc())))
        try:
            answers.write(struct.pack("<Q", len(blob)))
            answers.write(blob)
            answers.flush()
        except BrokenPipeError:
            return


if __name__ == "__main__":
    main()
