"""Worker processes for the backfill: fresh interpreters (``python -m
gpuledger.ingest.metrics.prometheus.worker``) that fetch and decode chunks ahead of the writes, each
with its own GIL. fork is unsafe with DuckDB / polars threads, and multiprocessing's spawn would
re-run the caller's main script."""

from __future__ import annotations

import contextlib
import pickle
import struct
import subprocess
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from gpuledger.ingest.metrics.prometheus.client import PrometheusError


class _ChunkWorker:
    """One worker process (``gpuledger.ingest.metrics.prometheus.worker``) with at most one job at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "gpuledger.ingest.metrics.prometheus.worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def submit(self, job: dict) -> _ChunkWorker:
        blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(struct.pack("<Q", len(blob)) + blob)
        self.process.stdin.flush()
        return self

    def result(self):
        out = self.process.stdout
        head = out.read(8)
        blob = out.read(struct.unpack("<Q", head)[0]) if len(head) == 8 else b""
        if not blob:
            raise PrometheusError(f"backfill worker process exited ({self.process.poll()}); see its "
                                  "messages above. Rerun to continue.")
        ok, value = pickle.loads(blob)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        # an idle worker leaves on EOF; a busy one on its next write (or is killed: it holds nothing
        # of the warehouse, only a chunk nobody will read)
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ChunkPool:
    """``workers`` worker processes, each holding at most one chunk; ``submit`` returns something
    with ``.result()``. Processes start on first use and are stopped on exit."""

    def __init__(self, workers: int) -> None:
        self.size, self.idle, self.all = workers, deque(), []

    def start(self) -> None:
        """Start every worker now (their imports then overlap the caller's set-up)."""
        while len(self.all) < self.size:
            self.all.append(_ChunkWorker())
            self.idle.append(self.all[-1])

    def submit(self, fn, **job):
        if not self.idle:
            if len(self.all) >= self.size:
                raise RuntimeError("every backfill worker is busy")
            self.all.append(_ChunkWorker())
            self.idle.append(self.all[-1])
        worker = self.idle.popleft()
        pool = self

        class Pending:
            def result(self):
                try:
                    return worker.result()
                finally:
                    pool.idle.append(worker)

            def cancel(self):
                return False

        worker.submit(job)
        return Pending()

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(self, *exc) -> None:
        for worker in self.all:
            worker.close()


def chunk_pool(workers: int, processes: bool):
    """Worker processes (fresh interpreters: fork is unsafe with DuckDB / polars threads, and
    multiprocessing's spawn would re-run the caller's main script), or threads of this process
    with ``processes=False``."""
    if not processes:
        return ThreadPoolExecutor(max_workers=max(1, workers))
    return ChunkPool(max(1, workers))
