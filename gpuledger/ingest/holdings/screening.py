"""A spool folder's holdings screened in bounded memory (issue 36).

A spool of 100,000 prolog files is 100,000 holdings; held as Python records (~1.5 KB each with
what was read of their files) and compared together, memory grew with the folder. Here a reader
hands its holdings over a batch at a time: each record is checked on its own at once
(``checks.holding_problem``), and the good ones are staged in a scratch DuckDB — a file in a
temporary folder, at most ``SCRATCH_MEMORY`` of it in memory — with their GPU key (``checks.gpu_key``).
The one-holder-per-GPU rule then reads them back sorted by GPU key, first seen, job and device, one
GPU at a time (``checks.first_claim``: the holders still running only), which is the same answer as
comparing all of them in first-seen order, since two holdings clash only on one GPU. What lands is
read back ``BATCH`` rows at a time.

Nothing here opens the warehouse: a reader fills the scratch before the writer's lock is taken.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpuledger.errors import RunError
from gpuledger.ingest.holdings.checks import (
    RAW,
    WHERE,
    claim_refused,
    first_claim,
    gpu_key,
    holding_problem,
    record_refused,
    record_text,
)
from gpuledger.ingest.holdings.store import HOLDING_COLUMNS, holdings_frame
from gpuledger.ingest.metrics.exposition import DEFAULT_MAX_FUTURE_S
from gpuledger.warehouse import QuarantineRow

BATCH = 10_000  # records staged, screened and handed back at a time
# the scratch DuckDB's own limit (one thread): a sort past it spills to its temporary folder
SCRATCH_MEMORY = "64MB"
_QUARANTINE = {"source": pl.String, "location": pl.String, "raw_text": pl.String, "reason": pl.String}
_CLASHED = {"seq": pl.Int64, "clash_job": pl.String, "clash_first": pl.Datetime("us")}


class Scratch:
    """The staging room of a spool read, in a temporary folder removed when closed (never the
    warehouse): each table a folder of Parquet files, one per batch staged, and an in-memory DuckDB
    of its own that queries them holding at most ``memory`` (a sort past it spills to the folder)."""

    def __init__(self, memory: str = SCRATCH_MEMORY) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="gpuledger-scratch-")
        self.root = Path(self._folder.name)
        self.con = duckdb.connect()
        self.run("SET temp_directory = $1", [str(self.root / "spill")])
        self.run(f"SET memory_limit = '{memory}'")
        self.run("SET threads = 1")  # (each thread holds buffers of its own: the limit holds for one)
        self._files = itertools.count()

    def run(self, sql: str, params: list | None = None) -> list[tuple]:
        """One statement, its answer fetched whole (DuckDB 2 refuses the next statement on a
        connection while one's answer is unfinished)."""
        with self.trouble():
            return self.con.execute(sql, params or []).fetchall()

    @contextmanager
    def trouble(self) -> Iterator[None]:
        """What fails in the scratch folder (its disk full, removed, unreadable) as one line naming
        it, exit 1 (``RunError``); what the read wrote before is not written twice by a rerun."""
        try:
            yield
        except (OSError, duckdb.Error, pl.exceptions.PolarsError, pa.ArrowException) as exc:
            why = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise RunError(f"the spool read's scratch folder {self.root}: {why}; free space there or set TMPDIR "
                           "to a folder with room, then rerun (holdings already written are not doubled)") from exc

    def create(self, table: str, schema: dict) -> None:
        """A table of a polars schema's columns and types, empty: a view of its folder's files."""
        folder = self.root / table
        with self.trouble():
            folder.mkdir()
            pl.DataFrame(schema=schema).write_parquet(folder / f"{0:09d}.parquet")  # (the types, if nothing staged)
        self.run(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{folder}/*.parquet')")

    def insert(self, table: str, frame: pl.DataFrame) -> None:
        """Stage ``frame``'s rows in ``table`` (one more file)."""
        if not frame.is_empty():
            with self.trouble():
                frame.write_parquet(self.root / table / f"{next(self._files) + 1:09d}.parquet")

    def drop(self, table: str) -> None:
        self.run(f"DROP VIEW {table}")
        shutil.rmtree(self.root / table)

    def batches(self, query: str, *, size: int = BATCH) -> Iterator[pl.DataFrame]:
        """``query``'s rows, in its order, as frames of up to ``size`` rows: the answer is written
        to a file of its own first (a sort spills past the limit), then read a row group at a time,
        so nothing of DuckDB's stays open while the consumer stages more (``insert``)."""
        answer = self.root / f"answer{next(self._files)}.parquet"
        self.run(f"COPY ({query}) TO '{answer}' (FORMAT parquet, ROW_GROUP_SIZE {size})")
        try:
            with self.trouble():
                batches = pq.ParquetFile(answer).iter_batches(batch_size=size)
            while True:
                with self.trouble():
                    batch = next(batches, None)
                if batch is None:
                    return
                yield pl.from_arrow(batch)
        finally:
            answer.unlink(missing_ok=True)

    def close(self) -> None:
        self.con.close()
        self._folder.cleanup()

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SpoolScreen:
    """Holdings checked a record at a time as a reader hands them over (``add``), refusals of the
    reader's own (``refuse``) beside them, then :meth:`results`: what lands and what is quarantined,
    in batches. The same rows and reasons as ``checks.screen_holdings`` on the whole list."""

    def __init__(self, scratch: Scratch, *, source: str, now: datetime,
                 max_future_s: float = DEFAULT_MAX_FUTURE_S, batch: int = BATCH) -> None:
        self.scratch, self.source, self.now, self.max_future_s, self.batch = scratch, source, now, max_future_s, batch
        scratch.create("held", {"seq": pl.Int64, "gpu_key": pl.String, "where_": pl.String, "raw": pl.String,
                                **HOLDING_COLUMNS})
        scratch.create("refused", {"seq": pl.Int64, **_QUARANTINE})
        scratch.create("clashed", _CLASHED)
        self._held: list[dict] = []
        self._refused: list[QuarantineRow] = []
        self._seq = 0

    def add(self, rows: Iterable[dict]) -> None:
        """Check each holding; stage the good ones, the others become quarantine rows."""
        for row in rows:
            problem = holding_problem(row, now=self.now, max_future_s=self.max_future_s)
            if problem:
                self.refuse(record_refused(row, problem, self.source))
                continue
            self._held.append(row)
            if len(self._held) >= self.batch:
                self._stage_held()

    def refuse(self, row: QuarantineRow) -> None:
        """A quarantine row of the reader's own (a file it could not read), kept in order with the rest."""
        self._refused.append(row)
        if len(self._refused) >= self.batch:
            self._stage_refused()

    def _next_seq(self, n: int) -> range:
        seqs = range(self._seq, self._seq + n)
        self._seq += n
        return seqs

    def _stage_held(self) -> None:
        rows, self._held = self._held, []
        if not rows:
            return
        frame = holdings_frame(rows).with_columns(
            seq=pl.Series(self._next_seq(len(rows)), dtype=pl.Int64),
            gpu_key=pl.Series([gpu_key(r) for r in rows], dtype=pl.String),
            where_=pl.Series([str(r.get(WHERE) or self.source) for r in rows], dtype=pl.String),
            raw=pl.Series([record_text(r) for r in rows], dtype=pl.String))
        self.scratch.insert("held", frame)

    def _stage_refused(self) -> None:
        rows, self._refused = self._refused, []
        if rows:
            frame = pl.DataFrame([(r.source, r.location, r.raw_text, r.reason) for r in rows], schema=_QUARANTINE,
                                 orient="row")
            self.scratch.insert("refused", frame.with_columns(seq=pl.Series(self._next_seq(len(rows)))))

    def results(self, partitioned: frozenset[str] = frozenset()) -> Iterator[tuple[pl.DataFrame, list[QuarantineRow]]]:
        """(holdings to land as a ``holdings_frame``, quarantine rows) in batches: first every
        quarantine row (the reader's and the checks', then the GPU clashes), then the holdings that
        stand. ``partitioned``: store.partitioned_gpus (no whole GPU there)."""
        self._stage_held()
        self._stage_refused()
        none = pl.DataFrame(schema=HOLDING_COLUMNS)
        for frame in self.scratch.batches("SELECT source, location, raw_text, reason FROM refused", size=self.batch):
            yield none, _rows(frame)
        self._claims(partitioned)
        for frame in self.scratch.batches("SELECT h.*, c.clash_job, c.clash_first FROM held h JOIN clashed c "
                                          "USING (seq)", size=self.batch):
            yield none, [claim_refused({**row, WHERE: row["where_"], RAW: row["raw"]},
                                       {"scheduler_job": row["clash_job"], "first_seen": row["clash_first"]},
                                       self.source) for row in frame.iter_rows(named=True)]
        keep = ", ".join(HOLDING_COLUMNS)
        for frame in self.scratch.batches(f"SELECT {keep} FROM held ANTI JOIN clashed USING (seq)", size=self.batch):
            yield frame.cast(HOLDING_COLUMNS), []

    def _claims(self, partitioned: frozenset[str]) -> None:
        """The one-holder rule, one GPU at a time in (first seen, job, device) order, on the rows'
        keys and times only (a narrow sort); each refused row is staged in ``clashed`` with the job
        that holds its GPU first."""
        holders: list[dict] = []
        current: str | None = None
        query = ("SELECT seq, gpu_key, scheduler_job, first_seen, last_seen FROM held WHERE gpu_key IS NOT NULL "
                 "ORDER BY gpu_key, first_seen, scheduler_job, device_id, seq")
        for frame in self.scratch.batches(query, size=self.batch):
            clashes = []
            for row in frame.iter_rows(named=True):
                if row["gpu_key"] in partitioned:
                    continue
                if row["gpu_key"] != current:
                    current, holders = row["gpu_key"], []
                clash = first_claim(holders, row)
                if clash is None:
                    holders.append(row)
                else:
                    clashes.append((row["seq"], clash["scheduler_job"], clash["first_seen"]))
            self.scratch.insert("clashed", pl.DataFrame(clashes, schema=_CLASHED, orient="row"))


def _rows(frame: pl.DataFrame) -> list[QuarantineRow]:
    return [QuarantineRow(*r) for r in frame.iter_rows()]
