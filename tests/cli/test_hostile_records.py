"""The hostile corpus's record sources (issue 36; the CLI classes are tests/cli/test_hostile_corpus.py):
spool files and node-agent records a hostile but realistic user leaves — stamped 1970 or 2100,
ending before they start, a wrong-typed or out-of-range field, a time past 2^63, device ids with
control characters or path text, one whole GPU listed for two jobs. The real CLI as a subprocess
over a real folder: exit 0, ONE line, the good records beside the bad ones stored, and one
quarantine row per bad record naming its file (and record) and why. A garbage --scontrol-file is
a usage error in one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import duckdb
import pytest

ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
LIBRARY_TEXT = ("Traceback", "internal error")
GOOD_START = 1796040000  # 2026-11-30 12:00 UTC
NOW = datetime.now(UTC).replace(tzinfo=None)


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False, env=ENV, cwd=cwd)


def _one_line(ran: subprocess.CompletedProcess) -> str:
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert not any(t in ran.stderr for t in LIBRARY_TEXT), ran.stderr
    return lines[0]


def _rows(path, sql):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


def _event(job, kind, at, *gpus, node="n1"):
    text = f"format\tgpuledger-slurm-gpus/1\nevent\t{kind}\njob_id\t{job}\ncluster\tc1\nnode\t{node}\ntime\t{at}\n"
    return text + "".join(f"gpu\t{i}\t{u}\n" for i, u in gpus)


# (file name, text, words of its quarantine reason); the good job 9 holds GPU 0 for an hour
SLURM_SPOOL = [
    ("9.n1.1796040000.start", _event(9, "start", GOOD_START, (0, "GPU-aa0")), None),
    ("9.n1.1796043600.end", _event(9, "end", GOOD_START + 3600), None),
    ("20.n1.0.start", _event(20, "start", 0, (1, "GPU-aa1")), "first_seen: 1970-01-01 00:00:00 is before 2000-01-01"),
    ("21.n1.4102444800.start", _event(21, "start", 4102444800, (2, "GPU-aa2")),
     "first_seen: 2100-01-01 00:00:00 is more than"),
    ("22.n1.big.start", _event(22, "start", "99999999999999999999", (3, "GPU-aa3")),
     "time '99999999999999999999': expected epoch seconds"),
    ("23.n1.1796040000.start", _event(23, "start", GOOD_START, ("99999999999", "GPU-aa4")),
     "GPU index '99999999999' is not a GPU index"),
    ("24.n1.1796040000.start", _event(24, "start", GOOD_START, (5, "GPU-\x1b[31mred")),
     "device_id: 'GPU-\\x1b[31mred' holds control characters"),
    ("25.n1.1796040000.start", _event(25, "start", GOOD_START, (6, "../../etc/passwd")),
     "device_id: '../../etc/passwd' looks like a file path"),
    ("26.n1.1796040000.start", _event(26, "start", GOOD_START + 60, (0, "GPU-aa0")),
     "GPU GPU-aa0 on n1 is held by job 9 from 2026-11-30 12:00:00 and by job 26 from 2026-11-30 12:01:00 at once"),
]


@pytest.mark.slow
def test_slurm_spool_records_are_screened_one_by_one(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    for name, text, _ in SLURM_SPOOL:
        (spool / name).write_text(text)
    wh = tmp_path / "w.duckdb"
    for _ in range(2):  # reading the spool again changes nothing
        ran = _cli("ingest", "slurm-gpus", "--spool", spool, "-w", wh, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        line = _one_line(ran)
        assert line.startswith("1 GPU holdings from 9 spool files") and "7 files or records quarantined" in line, line
        assert _rows(wh, "SELECT scheduler_job, device_id, first_seen, last_seen FROM device_holdings") == [
            ("9", "GPU-aa0", datetime(2026, 11, 30, 12), datetime(2026, 11, 30, 13))]
        bad = _rows(wh, "SELECT location, reason FROM quarantine WHERE source = 'slurm-gpus' ORDER BY location")
        assert len(bad) == 7, bad
        for name, _, says in SLURM_SPOOL:
            if says is None:
                continue
            row = next((r for r in bad if name in r[0]), None)
            assert row is not None and says in row[1], (name, row)


def _holding(job, device, first, last, **over):
    return {"cluster": "prod", "source": "pod-resources", "scheduler_job": job, "host": "n9", "device_id": device,
            "first_seen": first, "last_seen": last, "ended": False, "gpu_uuid": device, "mig_instance_id": -1,
            "gpu_index": None, "share": None, **over}


@pytest.mark.slow
def test_node_spool_records_are_screened_one_by_one(tmp_path):
    t0 = (NOW - timedelta(hours=2)).replace(microsecond=0)
    t1 = t0 + timedelta(hours=1)
    iso = lambda t: t.isoformat()
    records = [  # (record, words of its quarantine reason)
        (_holding("research/a", "GPU-x0", iso(t0), iso(t1)), None),
        (_holding("research/b", "GPU-x1", iso(t0), iso(t1), ended="false"), "ended: 'false' is not true or false"),
        (_holding("research/c", "GPU-x2", iso(t0), iso(t1), gpu_index=99999999999), "gpu_index: 99999999999 is outside"),
        (_holding("research/d", "GPU-x3", "1970-01-01T00:00:00", iso(t1)), "first_seen: 1970-01-01 00:00:00 is before"),
        (_holding("research/e", "GPU-x4", iso(t0), "2100-01-01T00:00:00"), "last_seen: 2100-01-01 00:00:00 is more"),
        (_holding("research/f", "GPU-x5", iso(t1), iso(t0)), "a holding cannot end before it starts"),
        (_holding("research/g", "GPU-x6", "99999-01-01T00:00:00", iso(t1)), "is not an ISO-8601 time"),
        (_holding("research/h", "/dev/nvidia0", iso(t0), iso(t1)), "looks like a file path"),
        (_holding("research/i", "GPU-x0", iso(t0), iso(t1)), "GPU GPU-x0 on n9 is held by job research/a"),
    ]
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "prod.n9.json").write_text(json.dumps({"format": "gpuledger.node-holdings/1", "cluster": "prod",
                                                    "host": "n9", "holdings": [r for r, _ in records]}))
    wh = tmp_path / "w.duckdb"
    ran = _cli("ingest", "node-holdings", "--spool", spool, "-w", wh, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    line = _one_line(ran)
    assert line.startswith("1 GPU holdings from 1 node files") and "8 files or records quarantined" in line, line
    assert _rows(wh, "SELECT scheduler_job, device_id FROM device_holdings") == [("research/a", "GPU-x0")]
    bad = dict(_rows(wh, "SELECT location, reason FROM quarantine WHERE source = 'node-holdings'"))
    assert len(bad) == 8, bad
    for n, (_, says) in enumerate(records):
        if says is not None:
            where = f"{spool / 'prod.n9.json'}:holdings[{n}]"
            assert where in bad and says in bad[where], (n, bad.get(where))


@pytest.mark.parametrize("content", [bytes(range(256)) * 8, b'{"jobs": [{"job_id": 1, "nodes": 5}]}',
                                     (b'{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n1", '
                                      b'"gres_detail": ["gpu:1(IDX:0)"], "start_time": 1e300}]}')],
                         ids=["binary", "nodes-a-number", "time-1e300"])
def test_a_garbage_scontrol_file_is_one_line_naming_it(tmp_path, content):
    path = tmp_path / "scontrol.out"
    path.write_bytes(content)
    wh = tmp_path / "w.duckdb"
    ran = _cli("ingest", "slurm-gpus", "--scontrol-file", path, "--cluster", "c1", "-w", wh, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert f"--scontrol-file {path}: " in _one_line(ran)
    assert not wh.exists()  # refused before the warehouse was opened


@pytest.mark.parametrize("side", ["gate", "lock", "readers"])
def test_a_lock_file_that_is_a_directory_is_one_line_naming_it(tmp_path, side):
    wh = tmp_path / "w.duckdb"
    made = _cli("warehouse", "migrate", "-w", wh, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    before = _rows(wh, "SELECT count(*) FROM schema_migrations")
    folder = tmp_path / f"w.duckdb.{side}"
    folder.unlink(missing_ok=True)
    folder.mkdir()
    for args in (("warehouse", "summary"), ("ingest", "link-devices", "--start", "2026-01-01", "--end", "2026-01-02")):
        ran = _cli(*args, "-w", wh, cwd=tmp_path)
        assert ran.returncode == 1, (args, ran.stderr)
        assert f"{folder}: a directory where gpuledger keeps a lock file of w.duckdb; move it aside" in _one_line(ran)
    assert _rows(wh, "SELECT count(*) FROM schema_migrations") == before


@pytest.mark.slow
def test_a_whatif_window_after_the_data_replays_nothing_and_says_so(tmp_path):
    wh = tmp_path / "w.duckdb"
    made = _cli("simulate", "warehouse", "--gpus", "8", "--days", "0.1", "--start", "2026-03-01T00:00:00", "--clean",
                "-w", wh, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ran = _cli("whatif", "schedule", "--start", "2026-06-01", "--end", "2026-06-03", "--no-progress", "-w", wh,
               cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    line = _one_line(ran)
    assert "--start 2026-06-01T00:00Z .. --end 2026-06-03T00:00Z holds none of the warehouse's job records" in line
    assert "choose a window that overlaps them" in line


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_closed_month_keeps_its_bytes_after_a_share_change_and_an_edited_currency_is_one_line(tmp_path):
    # issue 36's ledger class through the CLI: a closed month's workbook moved in a capacity cell's
    # last digit after a share change (the manifest's sha256 with it), and a currency edited to EUR
    # beside an issued line was shown by `period list` without a word
    from tests.helpers.statement_fixtures import CONFIG, october

    wh = tmp_path / "w.duckdb"
    october(wh)
    closed = _cli("period", "close", "2026-10", "-w", wh, cwd=tmp_path)
    assert closed.returncode == 0, closed.stderr
    wrote = _cli("report", "statement", "--period", "2026-10", "--out", tmp_path / "at-close", "-w", wh, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    said = " ".join((wrote.stdout + wrote.stderr).split())
    assert "statement 2026-10 of acme: closed" in said and "files in" in said, said
    changed = tmp_path / "changed.yaml"
    changed.write_text(CONFIG.replace("shares: 60", "shares: 35").replace("shares: 40", "shares: 65"))
    loaded = _cli("config", "load", "-c", changed, "-w", wh, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    again = _cli("report", "statement", "--period", "2026-10", "--out", tmp_path / "after", "-w", wh, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    at_close, after = _files(tmp_path / "at-close"), _files(tmp_path / "after")
    assert any(name.endswith(".xlsx") for name in at_close) and at_close == after  # every byte, manifest too
    with duckdb.connect(str(wh)) as con:
        con.execute("UPDATE statement_lines SET currency = 'EUR' WHERE period = '2026-10' AND level = 'project' "
                    "AND line_no = 0")
    counts = _rows(wh, "SELECT count(*), count(DISTINCT currency) FROM statement_lines")
    for args in (("period", "list"), ("report", "statement", "--period", "2026-10", "--out", tmp_path / "tampered")):
        ran = _cli(*args, "-w", wh, cwd=tmp_path)
        assert ran.returncode == 1, (args, ran.stderr)
        assert ("statement 2026-10 revision 0: the currency of project line 0 differs from its checksummed line; "
                "the warehouse was altered outside gpuledger") in _one_line(ran), args
        assert "EUR" not in ran.stdout
    assert not (tmp_path / "tampered").exists() or _files(tmp_path / "tampered") == {}  # no file written
    assert _rows(wh, "SELECT count(*), count(DISTINCT currency) FROM statement_lines") == counts
