"""The stages of parse_jobs_csv (gpuledger.ingest.jobs.jobs_csv), each on hand-made input; the
whole parser stays covered by tests/ingest/test_jobs_csv.py, test_edges.py and the hostile corpus.
Expected values derived by hand in the comments."""

from __future__ import annotations

import csv
import io
from datetime import datetime

import pytest

from gpuledger.ingest.jobs.checks import JobLimits
from gpuledger.ingest.jobs.jobs_csv import (
    MAX_RAW_CHARS,
    REQUIRED,
    CsvHeaderError,
    checked_job,
    gpu_count,
    job_times,
    keep_one_per_job,
    limits_with_projects,
    min_runtime_of,
    priority_of,
    read_header,
    unreadable_row,
)

NOW = datetime(2026, 12, 1, 12, 0)
HEADER = list(REQUIRED)


def test_limits_with_projects_fills_only_a_missing_tree():
    assert limits_with_projects(None, {"a"}).projects == frozenset({"a"})
    given = JobLimits(max_gpus_per_job=8)
    filled = limits_with_projects(given, {"a"})
    assert (filled.projects, filled.max_gpus_per_job) == (frozenset({"a"}), 8)
    own = JobLimits(projects=frozenset({"b"}))
    assert limits_with_projects(own, {"a"}) is own  # the warehouse's tree wins


def test_read_header_trims_names_and_tells_the_reader():
    reader = csv.DictReader(
        io.StringIO(" job_id ,cluster,project,user,gpu_model,gpus,start_time,end_time, name\n")
    )
    header = read_header(reader, "jobs.csv")
    assert header[0] == "job_id" and header[-1] == "name"
    assert reader.fieldnames == header


def test_read_header_names_the_missing_columns():
    reader = csv.DictReader(io.StringIO("job_id,cluster,project\n"))
    with pytest.raises(
        CsvHeaderError, match=r"^jobs.csv:1: header lacks required column\(s\) user, gpu_model, gpus,"
    ):
        read_header(reader, "jobs.csv")
    with pytest.raises(CsvHeaderError, match=r"^jobs.csv:1: header lacks required column\(s\) job_id, "):
        read_header(csv.DictReader(io.StringIO("")), "jobs.csv")  # empty file: every column missing


def test_unreadable_row_names_line_and_cuts_the_raw_text():
    row = unreadable_row(csv.Error("field larger than field limit"), "jobs.csv", 2, "x" * (MAX_RAW_CHARS + 10))
    assert row.location == "jobs.csv:2"
    # 4096 + 10 = 4106 characters: kept to 4096 plus a note
    assert row.raw_text == "x" * MAX_RAW_CHARS + "… (4,106 characters)"
    assert row.reason == "unreadable CSV row (field larger than field limit, line 4,106 characters)"


def _row(**change) -> dict:
    row = {
        "job_id": "1",
        "cluster": "c",
        "project": "p",
        "user": "u",
        "gpu_model": "H100",
        "gpus": "2",
        "start_time": "2026-11-29T10:00:00Z",
        "end_time": "2026-11-29T12:00:00Z",
    }
    return {**row, **change}


def test_checked_job_reads_a_good_row():
    job = checked_job(_row(), HEADER, NOW, JobLimits(projects=frozenset({"p"})))
    # an end time and no state: COMPLETED
    assert (job["job_id"], job["gpus"], job["state"], job["start_time"]) == (
        "1",
        2.0,
        "COMPLETED",
        datetime(2026, 11, 29, 10),
    )


def test_checked_job_refuses_shape_then_fields_then_limits():
    limits = JobLimits(projects=frozenset({"p"}))
    with pytest.raises(ValueError, match=r"^10 fields but the header has 8$"):
        checked_job(_row(__extra__=["a", "b"]), HEADER, NOW, limits)
    with pytest.raises(ValueError, match=r"^missing column\(s\) end_time \(row has too few fields\)$"):
        checked_job(_row(end_time=None), HEADER, NOW, limits)
    with pytest.raises(ValueError, match=r"^gpus: 'two' is not a number$"):
        checked_job(_row(gpus="two"), HEADER, NOW, limits)
    with pytest.raises(ValueError, match=r"project"):  # job_problem: not a project of the tree
        checked_job(_row(project="elsewhere"), HEADER, NOW, limits)


def test_keep_one_per_job_keeps_first_and_refuses_a_different_repeat():
    good: dict = {}
    job = {"cluster": "c", "job_id": "7"}
    assert keep_one_per_job(good, job, 2, "7,c,a", "f.csv:2") is None
    assert keep_one_per_job(good, {**job, "x": 1}, 3, "7,c,a", "f.csv:3") is None  # same line again
    assert good[("c", "7")][0] == 2  # the first stays
    refused = keep_one_per_job(good, job, 4, "7,c,b", "f.csv:4")
    assert refused.location == "f.csv:4" and refused.raw_text == "7,c,b"
    assert refused.reason == (
        "job_id: '7' on cluster 'c' already given at line 2 with other values; keep one row per job"
    )


# --- the field readers of one row (_row_to_job's stages) -------------------------------------------


def test_gpu_count_takes_fractions_and_refuses_non_positive_or_infinite():
    assert gpu_count({"gpus": " 0.142857 "}) == 0.142857  # a 1g MIG slice, spaces trimmed
    with pytest.raises(ValueError, match=r"^gpus: '' is not a number$"):
        gpu_count({"gpus": ""})
    for bad, shown in (("0", "0.0"), ("-1", "-1.0"), ("nan", "nan"), ("inf", "inf")):
        with pytest.raises(ValueError, match=rf"^gpus: {shown} must be a positive number of GPUs"):
            gpu_count({"gpus": bad})


def test_job_times_orders_start_end_submit():
    row = {"start_time": "2026-11-29T10:00:00+01:00", "end_time": "", "submit_time": "1795900000"}
    # +01:00 → 09:00 UTC; epoch 1795900000 = 1795910400 - 10400 s = 2026-11-28 21:06:40 UTC
    assert job_times(row) == (datetime(2026, 11, 29, 9), None, datetime(2026, 11, 28, 21, 6, 40))
    with pytest.raises(
        ValueError, match=r"^end_time: 2026-11-29T08:00:00 is before start_time 2026-11-29T09:00:00$"
    ):
        job_times({**row, "end_time": "2026-11-29T08:00:00Z"})
    with pytest.raises(ValueError, match=r"^submit_time: 2026-11-29T09:30:00 is after start_time"):
        job_times({**row, "submit_time": "2026-11-29T09:30:00Z"})
    with pytest.raises(ValueError, match=r"^start_time: "):
        job_times({"start_time": "yesterday"})


def test_min_runtime_of_reads_durations():
    # 2h30m = 9000 s; HH:MM:SS 01:00:30 = 3630 s
    assert (min_runtime_of({"min_runtime": "2h30m"}), min_runtime_of({"min_runtime": "01:00:30"})) == (
        9000,
        3630,
    )
    assert min_runtime_of({}) is None
    with pytest.raises(ValueError, match=r"^min_runtime: "):
        min_runtime_of({"min_runtime": "soon"})


def test_priority_of_whole_numbers_in_64_bit_range():
    assert (priority_of({"priority": " -5 "}), priority_of({"priority": ""})) == (-5, None)
    with pytest.raises(ValueError, match=r"^priority: '1.5' is not an integer$"):
        priority_of({"priority": "1.5"})
    with pytest.raises(ValueError, match=r"^priority: 9223372036854775808 is beyond the 64-bit range"):
        priority_of({"priority": str(2**63)})  # 2^63 = INT64_MAX + 1
