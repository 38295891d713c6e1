"""Terminal tables a person can read: at 80 and 120 columns every command's default table shows
every value whole (no cut, no "…", nothing hidden), --wide / --columns / -f table --out work, the
same data prints in the same row order, and an extended simulation appends.

One small simulated warehouse (16 GPUs × 6 hours) serves the table tests."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.cli import app
from gpuledger.cli.views import reports, tables
from gpuledger.config import load_config
from gpuledger.simulator import build_cluster, to_epoch_s, write_simulation
from gpuledger.simulator.workload import job_id_tag

START = datetime(2026, 11, 1)
END = datetime(2026, 11, 1, 6)  # the simulation's end: --days 0.25
S, E = "2026-11-01T00:00:00", "2026-11-01T06:00:00"


@pytest.fixture(scope="module")
def sim_warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("tables") / "w.duckdb"
    sim = build_cluster(seed=1, gpus=16, start=START, days=0.25, config=load_config())
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)
        # one refused line, long enough to wrap at 80 columns
        warehouse.quarantine(con, [warehouse.QuarantineRow(
            "jobs-csv", "jobs.csv:7", "job-7,vision-gen,alice,2026-11-31T00:00:00,not-a-number,H100",
            "field gpus: 'not-a-number' is not a number of GPUs; write e.g. 2 or 0.5")], now=END)
    return path


def _policy():
    return load_config().policy


def _summary(con):
    figures = queries.warehouse_summary(con)
    return pl.DataFrame({"figure": list(figures), "value": [tables.format_value(v) for v in figures.values()]})


def _quarantine(con):
    return con.sql("SELECT quarantined_at, source, location, reason, left(raw_text, 80) AS raw_text "
                   "FROM quarantine").pl()


# command line, the frame it shows (computed directly), the view it shows it with
CASES = {
    "fairshare": (["report", "fairshare"], lambda c: queries.fairshare_report(c, policy=_policy()), reports.FAIRSHARE),
    "budget": (["report", "budget"], lambda c: queries.budget_report(c), reports.BUDGET),
    "budget-jobs": (["report", "budget", "--jobs"], lambda c: queries.funding_report(c, policy=_policy()),
                    reports.FUNDING),
    "squatters": (["report", "squatters"], lambda c: queries.squatters_report(c, policy=_policy()), reports.SQUATTERS),
    **{f"chargeback-{level}": (["report", "chargeback", "-p", "2026-11", "--level", level],
                               lambda c, level=level: queries.chargeback_report(c, "2026-11", level=level,
                                                                                policy=_policy()),
                               reports.CHARGEBACK) for level in ("project", "job", "node")},
    **{f"usage-{by}": (["report", "usage", "--start", S, "--end", E, "--by", by],
                       lambda c, by=by: queries.usage_report(c, start=START, end=END, by=by), reports.USAGE)
       for by in ("project", "job", "user", "node")},
    **{f"utilization-{by}": (["report", "utilization", "--start", S, "--end", E, "--by", by],
                             lambda c, by=by: queries.utilization_report(c, start=START, end=END, by=by),
                             reports.UTILIZATION) for by in ("model", "cluster", "fleet", "kind")},
    "summary": (["warehouse", "summary"], _summary, reports.SUMMARY),
    "quarantine": (["warehouse", "quarantine"], _quarantine, reports.QUARANTINE),
}


def _run(args, path, width=None, **kw):
    env = {"COLUMNS": str(width)} if width else {"COLUMNS": ""}
    result = CliRunner().invoke(app, [*args, "-w", str(path)], env=env, **kw)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


def _column_text(out: str, position: int) -> str:
    """Everything printed in the ``position``-th column (spans from the header's ─── underline),
    lines joined: a wrapped cell reads whole again."""
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    spans, start = [], None
    for i, ch in enumerate(lines[rule] + " "):
        if ch == "─" and start is None:
            start = i
        elif ch != "─" and start is not None:
            spans.append((start, i))
            start = None
    lo, hi = spans[position]
    return " ".join(line[lo:hi].strip() for line in lines[rule + 1:])


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_table_shows_every_value_whole(sim_warehouse, case, width):
    args, frame_of, view = CASES[case]
    with warehouse.open_reader(sim_warehouse) as con:
        frame = frame_of(con)
    assert frame.height > 0, f"{case}: the fixture should give this report rows"
    out = _run(args, sim_warehouse, width)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width, f"{case} is wider than {width}:\n{out}"
    assert "…" not in out and "hidden to fit" not in out, out
    shown = [c for c in view.columns if c.default and c.name in frame.columns]
    for position, column in enumerate(shown):
        for value in frame[column.name].to_list():
            cell = tables.format_value(value, None if column.kind == "text" else column.kind, column.decimals)
            if column.wrap:  # free text wraps inside its column: read the column's lines back
                text = _column_text(out, position)
                if column.wrap in ("anywhere", "hyphen"):  # read back without the breaks
                    assert "".join(cell.split()) in "".join(text.split()), (case, column.name, cell, out)
                else:
                    assert " ".join(cell.split()) in text, (case, column.name, cell, out)
            else:
                assert cell in out, f"{case} at {width}: {column.name} value {cell!r} is not whole in\n{out}"
    # a name is a name: every job id, project and node appears exactly as stored
    for name in ("job_id", "project", "node"):
        if name in frame.columns and (view.column(name) and view.column(name).default):
            assert all(str(v) in out for v in frame[name].drop_nulls()), (case, name)


def test_fit_hides_default_columns_from_the_right_and_says_so():
    frame = pl.DataFrame({"node": ["inference-serving"], "a_gpu_hours": [1234.5], "b_gpu_hours": [6.0]})
    view = tables.View(columns=(tables.Column("node", "node", key=True),
                                tables.Column("a_gpu_hours", "a\nGPU-h", "num"),
                                tables.Column("b_gpu_hours", "b\nGPU-h", "num")))
    # natural widths 17 + 7 + 5 = 29, gaps 2 -> 33; gaps 1 -> 31 fits 31, 30 must hide b
    assert "hidden" not in tables.render(frame, view, width=31)
    narrow = tables.render(frame, view, width=30)
    assert "hidden to fit 30 columns: b_gpu_hours" in " ".join(narrow.split()) and "1,234.5" in narrow and "6.0" not in narrow
    # a key column is never hidden; asked-for columns grow the table instead
    assert "inference-serving" in tables.render(frame, view, width=10)
    asked = tables.render(frame, view, width=10, columns=["b_gpu_hours", "node"])
    assert "hidden" not in asked and asked.splitlines()[-1].split() == ["6.0", "inference-serving"]


@pytest.mark.slow
def test_wide_shows_every_column_of_the_report(sim_warehouse):
    with warehouse.open_reader(sim_warehouse) as con:
        frame = queries.budget_report(con)
    narrow = _run(["report", "budget"], sim_warehouse, 80)
    wide = _run(["report", "budget", "--wide"], sim_warehouse, 80)
    # period dates and own-budget flags are --wide only
    assert "2026-12-01" not in narrow and "2026-12-01" in wide
    assert "own" in wide and "budget_own: " not in wide
    for column in frame.columns:  # every column, also ones the view does not declare
        spec = tables.resolve(frame, reports.BUDGET, column)
        for value in frame[column].to_list():
            assert tables.format_value(value, None if spec.kind == "text" else spec.kind, spec.decimals) in wide


def test_columns_picks_and_orders(sim_warehouse):
    out = _run(["report", "budget", "--columns", "status,node,remaining_gpu_hours"], sim_warehouse, 80)
    header = out.splitlines()[2]  # title, first header line, second header line
    assert header.split() == ["status", "node", "nGPU-h"]
    assert "consumed" not in out and "acme" in out
    # csv: the same names select and order the machine columns
    csv = _run(["report", "budget", "-f", "csv", "--columns", "status,node"], sim_warehouse)
    assert csv.splitlines()[0] == "status,node"


@pytest.mark.slow
def test_unknown_column_is_one_line_exit_2(sim_warehouse):
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "report", "budget", "-w", str(sim_warehouse),
                           "--columns", "node,consumed"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "--columns" in lines[0] and "consumed" in lines[0] and "consumed_gpu_hours" in lines[0]


def test_table_out_writes_plain_text(sim_warehouse, tmp_path):
    target = tmp_path / "budget.txt"
    shown = _run(["report", "budget"], sim_warehouse, 100)
    result = CliRunner().invoke(app, ["report", "budget", "-f", "table", "--out", str(target), "-w", str(sim_warehouse)],
                                env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    written = target.read_text()
    assert written == shown and "\x1b" not in written and "acme" in written
    assert "acme" not in result.stdout and str(target) in result.stderr


@pytest.mark.parametrize("args", [
    ["report", "usage", "--start", S, "--end", E, "--by", "job"],
    ["report", "utilization", "--start", S, "--end", E, "--by", "model"],
    ["report", "chargeback", "-p", "2026-11", "--level", "job"],
    ["report", "squatters"], ["report", "budget"], ["report", "budget", "--jobs"], ["report", "fairshare"],
])
def test_csv_rows_in_one_order(sim_warehouse, args):
    first = _run([*args, "-f", "csv"], sim_warehouse)
    second = _run([*args, "-f", "csv"], sim_warehouse)
    assert first == second and first.count("\n") > 2


def test_the_funding_table_says_what_protected_until_means(sim_warehouse):
    # an expired protection still shows its time (when it ended): the legend says so
    out = " ".join(_run(["report", "budget", "--jobs"], sim_warehouse, width=100).split())
    assert ("protected until = its start + its minimum runtime (capped): no preemption before it; a time already "
            "past: protection over; blank: not running, or unfunded") in out, out[-600:]


def test_full_key_order_breaks_every_tie():
    # b ties on "a"; the rest of the row decides, whatever order the rows came in
    frame = pl.DataFrame({"a": [1, 1, 1, 0], "b": ["y", "x", "y", "z"], "c": [2.0, 5.0, 1.0, 0.0]})
    expected = [(1, "x", 5.0), (1, "y", 1.0), (1, "y", 2.0), (0, "z", 0.0)]
    for seed in range(5):
        shuffled = frame.sample(fraction=1.0, shuffle=True, seed=seed)
        assert queries.ordered(shuffled, ["a"], [True]).rows() == expected


def test_simulate_gpus_says_it_rounds_to_whole_nodes(tmp_path):
    result = CliRunner().invoke(app, ["simulate", "warehouse", "--gpus", "9", "--days", "0.01",
                                      "-w", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 0, result.output
    assert "--gpus 9 rounds up to whole nodes: 2 nodes × 8 GPUs = 16 GPUs" in result.output


@pytest.mark.slow
def test_extended_simulation_appends(tmp_path):
    """Two consecutive 3-hour windows in one warehouse keep both sets of jobs with their usage."""
    path = tmp_path / "w.duckdb"
    cfg = load_config()
    first = build_cluster(seed=1, gpus=16, start=START, days=0.125, config=cfg)
    later = build_cluster(seed=1, gpus=16, start=START + timedelta(hours=3), days=0.125, config=cfg)
    ids_first, ids_later = set(first.workload.jobs["job_id"]), set(later.workload.jobs["job_id"])
    assert not ids_first & ids_later  # the window start is part of every id
    # 2020-01-01 .. 2026-11-01: 2192 days to 2026 + 304 in it = 2496 days × 1440 = 3,594,240 minutes
    assert job_id_tag(to_epoch_s(START)) == 3_594_240 and job_id_tag(to_epoch_s(later.start)) == 3_594_420
    assert "k8s-3594240-0" in ids_first and "k8s-3594420-0" in ids_later
    with warehouse.open_writer(path) as con:
        write_simulation(con, first)
        open_before = con.execute("SELECT count(*) FROM jobs WHERE end_time IS NULL").fetchall()[0][0]
        write_simulation(con, later)
        counts = warehouse.table_counts(con, ["jobs", "job_allocations"])
        write_simulation(con, later)  # a rerun of a window changes nothing
        assert warehouse.table_counts(con, ["jobs", "job_allocations"]) == counts
    assert open_before > 0  # the first window leaves jobs running at its end
    assert counts["jobs"] == len(ids_first) + len(ids_later)
    with warehouse.open_reader(path) as con:
        stored = {r[0] for r in con.execute("SELECT job_id FROM jobs").fetchall()}
        # jobs the first window left open end at its end (03:00), so no GPU is held twice
        still_open = con.execute("SELECT count(*) FROM job_allocations a JOIN jobs j USING (cluster, job_id) "
                                 "WHERE j.job_id IN (SELECT unnest(?)) AND (a.end_time IS NULL OR "
                                 "a.end_time > ?)", [sorted(ids_first), START + timedelta(hours=3)]).fetchall()
        used = queries.usage_report(con, start=START, end=START + timedelta(hours=6), by="job")
    assert stored == ids_first | ids_later and still_open == [(0,)]
    assert "(no job record)" not in used["project"].to_list()
    with_usage = set(used.filter(pl.col("gpu_hours_allocated") > 0)["job_id"])
    assert with_usage & ids_first and with_usage & ids_later


@pytest.mark.slow
def test_usage_by_node_adds_up_on_every_run(sim_warehouse):
    # polars' streaming engine once summed this plan differently each run; the org root must hold
    # exactly what the projects hold (all jobs of the simulation name a project of the tree)
    with warehouse.open_reader(sim_warehouse) as con:
        runs = [queries.usage_report(con, start=START, end=END, by="node") for _ in range(3)]
        projects = queries.usage_report(con, start=START, end=END, by="project")
    root = runs[0].filter(pl.col("node") == "acme").row(0, named=True)
    assert root["gpu_hours_active"] == pytest.approx(projects["gpu_hours_active"].sum(), abs=1e-9)
    assert root["gpu_hours_allocated"] == pytest.approx(projects["gpu_hours_allocated"].sum(), abs=1e-9)
    assert all(r.equals(runs[0]) for r in runs[1:])
