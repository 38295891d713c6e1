"""`ingest slurm` reads an export a batch of jobs at a time (issue 36): the same rows as reading it
whole, each batch bounded, a requeued job's runs told apart across batches in either order,
idempotent, and a document that breaks further in says how much was stored before it.

Fixtures: tests/fixtures/slurm/ (captured from the real Slurm rig; see tests/ingest/test_slurm.py).
The requeued job 1: run 1 06:49:39-06:49:51 REQUEUED, run 2 from 06:50:05 RUNNING, 2 GPUs each."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.ingest.jobs.sacct_import import import_batches, open_export, text_batches
from gpuledger.ingest.jobs.slurm import SacctFormatError, iter_json, parse_json, parse_parsable, write_batch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NOW = datetime(2026, 12, 1, 6, 51, 5)
COLUMNS = "job_id, scheduler_job, cluster, project, state, gpus, gpu_model, submit_time, start_time, end_time"


def _jobs(path: Path) -> list[tuple]:
    with warehouse.open_reader(path) as con:
        return con.execute(f"SELECT {COLUMNS} FROM jobs ORDER BY job_id").fetchall()


def _import(path: Path, batches, origin: str = "t"):
    with warehouse.open_writer(path) as con:
        return import_batches(con, batches, origin)


def _json_export(tmp_path: Path, jobs: list, *, errors: list | None = None, name: str = "x.json") -> Path:
    """A `sacct --json` document of ``jobs``, "errors" after them as later Slurm releases print it."""
    path = tmp_path / name
    path.write_text(json.dumps({"jobs": jobs, "meta": {}, "errors": errors or []}))
    return path


def _rig_jobs() -> list[dict]:
    return json.loads((FIXTURES / "sacct-running.json").read_text())["jobs"]


@pytest.mark.parametrize("name", ["sacct-running.json", "sacct-parsable2-running.txt", "sacct-malformed.json",
                                  "sacct-parsable2-malformed.txt", "sacct-parsable2-with-steps.txt"])
def test_one_job_a_batch_stores_what_the_whole_export_does(tmp_path, name):
    whole, batched = tmp_path / "whole.duckdb", tmp_path / "batched.duckdb"
    text = (FIXTURES / name).read_text()
    read = parse_json if name.endswith(".json") else parse_parsable
    with warehouse.open_writer(whole) as con:
        write_batch(con, read(text, origin=str(FIXTURES / name), cluster="c", now=NOW))
    with open_export(FIXTURES / name, cluster="c", now=NOW, chunk_jobs=1) as batches:
        sizes = []

        def counted(it):
            for batch in it:
                sizes.append(batch.records_read)
                yield batch

        done = _import(batched, counted(batches))
    assert sizes and max(sizes) <= 1  # never more than one job record held
    assert _jobs(batched) == _jobs(whole) and _jobs(whole)
    with warehouse.open_reader(whole) as a, warehouse.open_reader(batched) as b:
        q = "SELECT location, reason FROM quarantine ORDER BY location"
        assert a.execute(q).fetchall() == b.execute(q).fetchall()
    assert done.records_read == sum(sizes)


@pytest.mark.parametrize("order", ["earlier run first", "latest run first"])
def test_a_requeued_jobs_runs_in_two_batches_keep_each_run_and_reimporting_adds_nothing(tmp_path, order):
    # run 1 (REQUEUED, started 06:49:39) keeps its GPU-hours as 1@06:49:39 whichever batch comes
    # first; the latest run keeps the JobID "1", as when both are in one batch
    header, run1, run2 = (FIXTURES / "sacct-parsable2-requeued.txt").read_text().splitlines()
    lines = [run1, run2] if order == "earlier run first" else [run2, run1]
    text = "\n".join([header, *lines]) + "\n"
    path = tmp_path / "w.duckdb"
    for _ in range(2):
        _import(path, text_batches(text, "parsable", origin="r.txt", now=NOW, chunk_jobs=1))
        assert [(r[0], r[4], r[9]) for r in _jobs(path)] == [
            ("1", "RUNNING", None), ("1@2026-12-01T06:49:39", "REQUEUED", datetime(2026, 12, 1, 6, 49, 51))]


def test_an_earlier_run_from_a_later_import_does_not_overwrite_the_latest(tmp_path):
    # stored: run 2 alone (an export without -D); then an export holding only run 1: a run that
    # started before the stored one is another run, kept beside it, never written over it
    header, run1, run2 = (FIXTURES / "sacct-parsable2-requeued.txt").read_text().splitlines()
    path = tmp_path / "w.duckdb"
    _import(path, text_batches(f"{header}\n{run2}\n", "parsable", origin="a", now=NOW))
    _import(path, text_batches(f"{header}\n{run1}\n", "parsable", origin="b", now=datetime(2026, 12, 1, 7)))
    assert [(r[0], r[4]) for r in _jobs(path)] == [("1", "RUNNING"), ("1@2026-12-01T06:49:39", "REQUEUED")]


def test_a_pending_job_that_started_since_is_the_same_run(tmp_path):
    header, _, run2 = (FIXTURES / "sacct-parsable2-requeued.txt").read_text().splitlines()
    pending = run2.replace("|2026-12-01T06:50:05|Unknown|RUNNING|", "|Unknown|Unknown|PENDING|")
    path = tmp_path / "w.duckdb"
    _import(path, text_batches(f"{header}\n{pending}\n", "parsable", origin="a", now=NOW))
    _import(path, text_batches(f"{header}\n{run2}\n", "parsable", origin="b", now=datetime(2026, 12, 1, 7)))
    assert [(r[0], r[4], r[8]) for r in _jobs(path)] == [("1", "RUNNING", datetime(2026, 12, 1, 6, 50, 5))]


def test_a_document_broken_further_in_says_what_was_stored_before_it(tmp_path):
    # 4 rig jobs (3 with GPUs: 1, 2, 8... as sacct-running.json), then the document stops mid-job
    good = json.dumps({"jobs": _rig_jobs()})
    path = tmp_path / "cut.json"
    path.write_text(good[:-2] + ', {"job_id": 77, "account": ')
    with open_export(path, cluster="c", now=NOW, chunk_jobs=2) as batches, \
            pytest.raises(SacctFormatError) as caught:
        _import(tmp_path / "w.duckdb", batches, str(path))
    said = str(caught.value)
    records = len(_rig_jobs()) // 2 * 2  # the whole batches before the fault
    assert said.startswith(f"{path}:1: not JSON (") and "\n" not in said
    assert f"the {records:,} job records before it were stored" in said


def test_sacct_errors_after_the_jobs_are_warnings_and_no_jobs_list_is_refused(tmp_path):
    path = _json_export(tmp_path, _rig_jobs(), errors=[{"description": "slurmdbd busy", "error_number": 7000}])
    with open_export(path, cluster="c", now=NOW, chunk_jobs=2) as batches:
        done = _import(tmp_path / "w.duckdb", batches)
    assert done.warnings == ["sacct reported: {'description': 'slurmdbd busy', 'error_number': 7000}"]
    assert done.records_read == len(_rig_jobs())
    bad = tmp_path / "no-jobs.json"
    bad.write_text(json.dumps({"meta": {}, "jobs": {"not": "a list"}}))
    with pytest.raises(SacctFormatError, match="no 'jobs' list"):
        list(iter_json(bad.open("rb"), origin=str(bad)))
    empty = _json_export(tmp_path, [], name="empty.json")
    assert [b.records_read for b in iter_json(empty.open("rb"), origin=str(empty))] == [0]


def test_the_command_streams_a_json_export_and_counts_rejects_it_does_not_hold(tmp_path, monkeypatch):
    # 2,001 malformed jobs (no account) and the rig's jobs, 500 a batch: every reject counted and
    # stored, only 20 kept to print
    from typer.testing import CliRunner

    from gpuledger.cli import app

    monkeypatch.setattr("gpuledger.ingest.jobs.sacct_import.CHUNK_JOBS", 500)
    broken = [{**_rig_jobs()[0], "job_id": 10_000 + i, "account": "", "association": {}} for i in range(2001)]
    path = _json_export(tmp_path, broken + _rig_jobs())
    w = tmp_path / "w.duckdb"
    result = CliRunner().invoke(app, ["ingest", "slurm", "--file", str(path), "--cluster", "c", "-w", str(w)])
    assert result.exit_code == 0, result.output
    assert f"{2001 + len(_rig_jobs())} job records" in result.output and "2001 quarantined" in result.output
    assert "... and 1981 more" in result.output
    with warehouse.open_reader(w) as con:
        assert con.execute("SELECT count(*) FROM quarantine WHERE source = 'slurm-sacct'").fetchall() == [(2001,)]
