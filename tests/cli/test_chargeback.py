"""`gpuledger report chargeback` on a small warehouse: unpriced hours warn on stderr in one line,
a provisional period says so, and `gpuledger warehouse retire-gpu` ends a device's capacity."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.cli import app
from gpuledger.errors import UsageError

D = lambda h, m=0: datetime(2026, 11, 2, h, m)


@pytest.fixture()
def small(tmp_path):
    # GPU-A: an H100 at 2.10, seen 00:00-12:00 on Nov 2. GPU-B: a B300, which the rate card
    # does not price. J holds GPU-A 10:00-11:00; L holds device 9, not in the inventory.
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        con.execute("""
            INSERT INTO gpus (gpu_id, cluster, gpu_uuid, mig_instance_id, host, model, gpu_fraction, first_seen, last_seen)
            VALUES (1, 'c1', 'GPU-A', -1, 'n1', 'H100', 1.0, ?, ?), (2, 'c1', 'GPU-B', -1, 'n1', 'B300', 1.0, ?, ?)""",
                    [D(0), D(12), D(0), D(12)])
        con.execute("""
            INSERT INTO jobs (cluster, job_id, project, user_name, kind, gpus, gpu_model, submit_time, start_time,
                              end_time, source, updated_at)
            VALUES ('c1', 'J', 'p', 'ann', 'training', 1, 'H100', ?, ?, ?, 'test', ?),
                   ('c1', 'L', 'p', 'ann', 'training', 1, 'H100', ?, ?, ?, 'test', ?)""",
                    [D(10), D(10), D(11), D(11), D(10), D(10), D(12), D(12)])
        con.execute("INSERT INTO job_allocations (cluster, job_id, gpu_id, start_time, end_time, gpu_fraction) "
                    "VALUES ('c1', 'J', 1, ?, ?, 1.0), ('c1', 'L', 9, ?, ?, 1.0)", [D(10), D(11), D(10), D(12)])
        con.execute("INSERT INTO org_nodes VALUES ('acme', NULL, 'org', 1, NULL), ('p', 'acme', 'project', 1, NULL)")
        con.execute("INSERT INTO rate_card VALUES ('H100', 'reserved', '2026-01-01', 2.10, 'USD', 1.0)")
    return path


def _run(*args):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_unpriced_hours_warn_on_stderr_in_one_line(small):
    result = _run("report", "chargeback", "--period", "2026-11-02", "--now", "2026-11-03", "--warehouse", str(small))
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    # B300: 24 idle hours of capacity without a rate; device 9: L's 2 h. 26 GPU-hours in all.
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: 26.000 GPU-hours unpriced, not billed: ")
    assert "no price for B300/reserved" in warnings[0] and "device 9 not in the inventory (2.000 h)" in warnings[0]
    assert "provisional" not in result.stdout  # Nov 2 is over at Nov 3
    assert "unpriced" in result.stdout  # the lines themselves are in the table


def test_a_period_not_over_says_so_under_the_table(small):
    result = _run("report", "chargeback", "--period", "2026-11", "--now", "2026-11-02T12:00", "--warehouse", str(small))
    said = " ".join(result.stdout.split())
    assert ("period 2026-11: provisional (open, not yet closed): data through 2026-11-02 12:00 UTC of a month "
            "ending 2026-12-01 00:00 UTC") in said
    assert said.count("lines change as data arrives") == 1  # said once, not again by chargeback's own note
    # a range that is no calendar month has no state of its own: chargeback's note says it
    days = _run("report", "chargeback", "--period", "2026-11-01..2026-11-05", "--now", "2026-11-02T12:00",
                "--warehouse", str(small))
    assert "provisional: the period runs to 2026-11-05 00:00 UTC and the data to 2026-11-02 12:00" in " ".join(
        days.stdout.split())


def test_retire_gpu_ends_its_capacity(small):
    def h100_idle(con):
        lines = queries.chargeback_report(con, "2026-11-02", level="job", now=datetime(2026, 11, 3))
        return lines.filter((pl.col("line_kind") == "idle") & (pl.col("gpu_model") == "H100")).row(0, named=True)

    # Last seen 12:00 + the 24 h grace: all of Nov 2 is capacity: 24 h, 1 held, 23 idle = 48.30.
    with warehouse.open_reader(small) as con:
        assert (h100_idle(con)["gpu_hours"], h100_idle(con)["amount"]) == (pytest.approx(23), Decimal("48.30"))
    _run("warehouse", "retire-gpu", "GPU-A", "--at", "2026-11-02T06:00:00Z", "--warehouse", str(small))
    # Retired at 06:00: capacity 00:00-06:00, 6 h idle = 12.60; J's hour after it is over-allocated.
    with warehouse.open_reader(small) as con:
        assert (h100_idle(con)["gpu_hours"], h100_idle(con)["amount"]) == (pytest.approx(6), Decimal("12.60"))
        lines = queries.chargeback_report(con, "2026-11-02", level="job", now=D(23))
        over = lines.filter(pl.col("line_kind") == "over-allocated").row(0, named=True)
        assert (over["gpu_hours"], over["amount"], over["note"]) == (pytest.approx(1), Decimal("2.10"), "jobs: J")
    _run("warehouse", "retire-gpu", "GPU-A", "--undo", "--warehouse", str(small))
    with warehouse.open_reader(small) as con:
        assert h100_idle(con)["gpu_hours"] == pytest.approx(23)
    # An unknown UUID is the user's mistake (the entry point turns it into one line, exit 2).
    result = CliRunner().invoke(app, ["warehouse", "retire-gpu", "GPU-X", "--warehouse", str(small)])
    assert isinstance(result.exception, UsageError) and "no GPU with UUID 'GPU-X'" in str(result.exception)


def test_node_lines_list_each_parent_above_its_children(tmp_path):
    # statement_fixtures' October: acme -> research (alpha, gamma), product (beta). Charges by hand:
    # alpha 10 d x 24 h x 2.00 = 480.00, gamma 24 h x 2.00 = 48.00, beta 10 d x 24 h x 1.00 = 240.00;
    # research 528.00, product 240.00, acme 768.00. By name the lines read acme, alpha, beta, gamma,
    # product, research: parents and leaves interleaved. The tree walked depth-first, children by
    # name (as `report budget` lists it): acme, product, beta, research, alpha, gamma.
    import csv
    import io

    from tests.helpers.statement_fixtures import october

    wh = tmp_path / "w.duckdb"
    october(wh)
    done = CliRunner().invoke(app, ["report", "chargeback", "--period", "2026-10", "--level", "node",
                                    "--format", "csv", "-w", str(wh)])
    assert done.exit_code == 0, done.output
    rows = [r for r in csv.DictReader(io.StringIO(done.stdout)) if r.get("line_kind") == "charge"]
    assert [(r["node"], r["amount"]) for r in rows] == [
        ("acme", "768.00"), ("product", "240.00"), ("beta", "240.00"), ("research", "528.00"),
        ("alpha", "480.00"), ("gamma", "48.00")]
