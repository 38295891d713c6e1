import datetime as dt
import shutil
from pathlib import Path

import pytest
from gpuledger.warehouse.writes import table_counts
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.cli.ingest.jobs_csv import app
from gpuledger.ingest.jobs.jobs_csv import CsvHeaderError, parse_jobs_csv

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "jobs_malformed.csv"


def _import(path, warehouse_file):
    result = CliRunner().invoke(app, [str(path), "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    return result


def test_malformed_rows_are_quarantined_with_line_numbers_and_good_rows_land(tmp_path, warehouse_file):
    csv_file = tmp_path / "jobs.csv"
    shutil.copy(FIXTURE, csv_file)
    _import(csv_file, warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        jobs = dict(con.execute("SELECT job_id, gpus FROM jobs").fetchall())
        bad = con.execute("SELECT location, reason FROM quarantine ORDER BY location").fetchall()
    # Lines 2, 3 and 9 are good (header is line 1); j8's +02:00 times become UTC.
    assert jobs == {"j1": 16.0, "j2": 0.46, "j8": 0.142857}
    where = {loc.rsplit(":", 1)[1]: reason for loc, reason in bad}
    assert set(where) == {"4", "5", "6", "7", "8"}
    assert where["4"].startswith("start_time:")            # bad time
    assert where["5"].startswith("gpus:")                  # negative GPUs
    assert where["6"].startswith("project:")               # unknown project
    assert where["7"].startswith("end_time:") and "before start_time" in where["7"]
    assert "missing column(s) end_time" in where["8"]      # row too short


def test_times_become_utc_and_optional_fields_parse(tmp_path, warehouse_file):
    csv_file = tmp_path / "jobs.csv"
    shutil.copy(FIXTURE, csv_file)
    _import(csv_file, warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        row = con.execute("SELECT start_time, end_time, min_runtime_s, priority, state FROM jobs "
                          "WHERE job_id = 'j8'").fetchone()
        running = con.execute("SELECT start_time, end_time, state FROM jobs WHERE job_id = 'j2'").fetchone()
    # 2026-10-01T00:00+02:00 is 2026-09-30T22:00Z; 2h30m = 9000 s.
    assert row == (dt.datetime(2026, 9, 30, 22), dt.datetime(2026, 10, 2, 22), 9000, 5, "COMPLETED")
    # Epoch 1790812800 = 2026-10-01T00:00:00Z; an empty end_time is a running job.
    assert running == (dt.datetime(2026, 10, 1), None, "RUNNING")


def test_second_import_of_the_same_file_changes_nothing(tmp_path, warehouse_file):
    csv_file = tmp_path / "jobs.csv"
    shutil.copy(FIXTURE, csv_file)
    _import(csv_file, warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        first = table_counts(con)
    _import(csv_file, warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        assert table_counts(con) == first
    assert first["jobs"] == 3 and first["quarantine"] == 5


def test_missing_required_header_column_is_refused_whole(tmp_path):
    with pytest.raises(CsvHeaderError, match="lacks required column.*gpus"):
        parse_jobs_csv("job_id,cluster,project,user,gpu_model,start_time,end_time\n", "f.csv", {"p"})


def test_conflicting_duplicate_job_rows_quarantine_the_later_one():
    text = (
        "job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n"
        "a,c,p,u,H100,1,2026-10-01T00:00:00,2026-10-01T01:00:00\n"
        "a,c,p,u,H100,1,2026-10-01T00:00:00,2026-10-01T01:00:00\n"
        "a,c,p,u,H100,4,2026-10-01T00:00:00,2026-10-01T01:00:00\n"
    )
    parsed = parse_jobs_csv(text, "f.csv", {"p"})
    assert parsed.jobs["gpus"].to_list() == [1.0]
    assert [r.location for r in parsed.rejected] == ["f.csv:4"]
    assert "already given at line 2" in parsed.rejected[0].reason


def test_summary_counts_imported_jobs_gpu_hours(tmp_path, warehouse_file):
    from gpuledger.analytics.queries import warehouse_summary

    csv_file = tmp_path / "jobs.csv"
    shutil.copy(FIXTURE, csv_file)
    _import(csv_file, warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        figures = warehouse_summary(con)
    # "Now" is the newest job time: j8's end, 2026-10-02T22:00Z.
    # j1: 16 GPUs x 10 h = 160; j2 (running): 0.46 x 46 h = 21.16; j8: 0.142857 x 48 h = 6.857136.
    assert figures["as_of_utc"] == dt.datetime(2026, 10, 2, 22)
    assert figures["jobs"] == 3
    assert figures["gpu_hours_allocated"] == pytest.approx(188.017136, abs=1e-9)


def test_a_file_read_in_chunks_lands_as_read_whole_and_repeats_across_chunks_are_refused(tmp_path, warehouse_file):
    # issue 36: a job CSV is read and written a chunk at a time (memory flat in the file's length);
    # chunks of 2 rows here. Job a is given on line 2 and again on lines 5 (same values: a
    # harmless repeat) and 7 (4 GPUs: refused, as within a chunk); line 6 is unreadable.
    from gpuledger.ingest.jobs.csv_import import import_jobs_csv

    csv_file = tmp_path / "jobs.csv"
    csv_file.write_text(
        "job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n"
        "a,c,p,u,H100,1,2026-10-01T00:00:00,2026-10-01T01:00:00\n"
        "b,c,p,u,H100,2,2026-10-01T00:00:00,2026-10-01T02:00:00\n"
        "c,c,p,u,H100,1,2026-10-01T00:00:00,2026-10-01T03:00:00\n"
        "a,c,p,u,H100,1,2026-10-01T00:00:00,2026-10-01T01:00:00\n"
        "d,c,p,u,H100,x,2026-10-01T00:00:00,2026-10-01T03:00:00\n"
        "a,c,p,u,H100,4,2026-10-01T00:00:00,2026-10-01T01:00:00\n")
    with warehouse.open_writer(warehouse_file) as con:
        done = import_jobs_csv(con, csv_file, {"p"}, chunk_rows=2)
    assert (done.rows_read, done.imported, done.quarantined) == (6, 3, 2)  # a, b, c (a again: already stored)
    assert [r.location for r in done.first_rejected] == [f"{csv_file}:6", f"{csv_file}:7"]
    assert "already given earlier in the file with other values" in done.first_rejected[1].reason
    with warehouse.open_reader(warehouse_file) as con:
        assert con.execute("SELECT job_id, gpus FROM jobs ORDER BY 1").fetchall() == [("a", 1.0), ("b", 2.0),
                                                                                     ("c", 1.0)]
    whole = tmp_path / "whole.duckdb"
    with warehouse.open_writer(whole) as con:  # one chunk: the same jobs (the refusal names line 2 there)
        assert import_jobs_csv(con, csv_file, {"p"}, chunk_rows=10**9).imported == 3
