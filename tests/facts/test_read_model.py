"""The read model's "facts as of T" (gpuledger/facts/__init__.py): a materialized answer
is used only when it is fresh for T, and then it is the computed answer to the last digit.

The tables are filled the way the Dagster assets fill them (facts.materialize.replace_partition
of the same reports), without Dagster, over a small simulated warehouse (8 GPUs, 2 days)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from polars.testing import assert_frame_equal

from gpuledger import facts, warehouse
from gpuledger.analytics import queries
from gpuledger.facts.materialize import replace_partition, stamped
from gpuledger.ledger.config_versions import stored_config

DAY1, DAY2 = datetime(2026, 11, 1), datetime(2026, 11, 2)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    path = tmp_path_factory.mktemp("read_model") / "w.duckdb"
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "simulate", "warehouse", "--gpus", "8", "--days",
                           "2", "--interval", "600", "--seed", "5", "-w", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture
def wh(simulated, tmp_path):
    copy = tmp_path / "w.duckdb"  # each test materializes its own way
    copy.write_bytes(simulated.read_bytes())
    return copy


def _policy(con):
    return stored_config(con).config.policy


def _materialize_fairshare(path, as_of=None):
    with warehouse.open_writer(path) as con:
        policy, at = _policy(con), as_of or facts.data_now(con)
        frame = queries.fairshare_report(con, policy=policy, as_of=at).rename({"order": "queue_order"})
        replace_partition(con, "fairshare_snapshots", at.date(), stamped(frame, day=at.date(), as_of=at))
    return at


def _materialize_usage(path, days):
    # as pipelines/defs/usage/assets.py does: each day's hours, stamped with the data's now they cover
    with warehouse.open_writer(path) as con:
        policy, now = _policy(con), facts.data_now(con)
        for day in days:
            frame = queries.usage_report(con, start=day, end=day + timedelta(days=1), by="project", policy=policy,
                                         per_hour=True, now=now)
            replace_partition(con, "usage_hourly_projects", day.date(),
                              stamped(frame, day=day.date(), covered_until=now))


@pytest.mark.slow
def test_a_fresh_fairshare_snapshot_is_the_computed_answer(wh):
    at = _materialize_fairshare(wh)
    with warehouse.open_reader(wh) as con:
        got = facts.fairshare(con, policy=_policy(con))
        computed = queries.fairshare_report(con, policy=_policy(con), as_of=at)
        other = facts.fairshare(con, policy=_policy(con), as_of=at - timedelta(hours=1))
    assert got.source == facts.MATERIALIZED and got.as_of == at
    # fairshare_report's float sums are not bit-stable run to run (~6e-14 GPU-h apart on this data),
    # so to 1e-12 relative: the same figures, not a near miss
    assert_frame_equal(got.frame, computed, rel_tol=1e-12, abs_tol=1e-9)
    assert other.source == facts.COMPUTED  # no snapshot as of that time: computed


@pytest.mark.slow
def test_a_config_loaded_after_the_snapshot_makes_it_stale(wh, tmp_path):
    _materialize_fairshare(wh)
    cfg = tmp_path / "c.yaml"
    example = subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "example"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    cfg.write_text(example.replace("half_life_days: 7", "half_life_days: 3"))
    loaded = subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "load", "-c", str(cfg), "-w", str(wh)],
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and "config version 2" in loaded.stdout, loaded.stdout + loaded.stderr
    with warehouse.open_reader(wh) as con:
        assert facts.fairshare(con, policy=_policy(con)).source == facts.COMPUTED


@pytest.mark.slow
def test_usage_from_materialized_hours_equals_the_range_computation(wh):
    _materialize_usage(wh, [DAY1, DAY2])
    with warehouse.open_reader(wh) as con:
        policy, now = _policy(con), facts.data_now(con)
        end = now.replace(minute=0, second=0, microsecond=0)  # whole hours, before the data's now
        got = facts.usage(con, start=DAY1, end=end, by="project", policy=policy)
        computed = queries.usage_report(con, start=DAY1, end=end, by="project", policy=policy)
        partial = facts.usage(con, start=DAY1 + timedelta(minutes=30), end=end, by="project", policy=policy)
        by_user = facts.usage(con, start=DAY1, end=end, by="user", policy=policy)
    assert got.source == facts.MATERIALIZED
    assert_frame_equal(got.frame, computed, check_exact=True)  # the same digits (exact nano-unit sums)
    assert partial.source == by_user.source == facts.COMPUTED  # a part hour; the per-job table is empty


def _store_one_finding(con, at):
    """A squatting evaluation at ``at`` that found one open episode, c1/j1 warned."""
    con.execute("INSERT INTO squatting_evaluations VALUES ($at, 1, $at)", {"at": at}).fetchall()
    con.execute("INSERT INTO squatting_findings (cluster, job_id, first_seen, last_seen, finding, severity) "
                "VALUES ('c1', 'j1', $at, $at, 'squatting', 'warning')", {"at": at}).fetchall()


def _materialize_jobs_and_utilization(path, days):
    with warehouse.open_writer(path) as con:
        policy, now = _policy(con), facts.data_now(con)
        for day in days:
            end = day + timedelta(days=1)
            jobs = queries.usage_report(con, start=day, end=end, by="job", policy=policy, per_hour=True, now=now)
            replace_partition(con, "usage_hourly_jobs", day.date(), stamped(jobs, day=day.date(), covered_until=now))
            used = queries.utilization_report(con, start=day, end=end, by="model", policy=policy, now=now)
            replace_partition(con, "utilization_hourly", day.date(), stamped(used, day=day.date(), covered_until=now))


def test_usage_by_job_and_user_and_utilization_by_model_from_materialized_hours(wh):
    # the per-job hourly table answers by job and by user; utilization_hourly answers by model, as
    # stored; each the range computation to the last digit
    _materialize_jobs_and_utilization(wh, [DAY1, DAY2])
    with warehouse.open_reader(wh) as con:
        policy = _policy(con)
        end = facts.data_now(con).replace(minute=0, second=0, microsecond=0)
        for by in ("job", "user"):
            got = facts.usage(con, start=DAY1, end=end, by=by, policy=policy)
            assert got.source == facts.MATERIALIZED, by
            computed = queries.usage_report(con, start=DAY1, end=end, by=by, policy=policy)
            assert computed.height > 1
            assert_frame_equal(got.frame, computed, check_exact=True)
        got = facts.utilization(con, start=DAY1, end=end, by="model", policy=policy)
        computed = queries.utilization_report(con, start=DAY1, end=end, by="model", policy=policy)
        kind = facts.utilization(con, start=DAY1, end=end, by="kind", policy=policy)
    assert got.source == facts.MATERIALIZED and computed.height > 24
    assert_frame_equal(got.frame, computed, check_exact=True)
    assert kind.source == facts.COMPUTED  # sums per workload kind: no table keeps them


def test_usage_with_a_day_not_materialized_is_computed(wh):
    _materialize_usage(wh, [DAY1])  # the 2nd day is missing
    with warehouse.open_reader(wh) as con:
        got = facts.usage(con, start=DAY1, end=DAY2 + timedelta(hours=12), by="project", policy=_policy(con))
        day_one = facts.usage(con, start=DAY1, end=DAY2, by="project", policy=_policy(con))
    assert got.source == facts.COMPUTED and day_one.source == facts.MATERIALIZED


def _materialize_budget(path):
    with warehouse.open_writer(path) as con:
        policy, at = _policy(con), facts.data_now(con)
        frame = queries.budget_report(con, policy=policy, as_of=at)
        replace_partition(con, "budget_snapshots", at.date(), stamped(frame, day=at.date(), as_of=at))
    return at


def test_a_fresh_budget_snapshot_is_the_computed_answer(wh):
    # migration 016 stores unweighted_gpu_hours / unweighted_models, which budget_report gained
    # after 009: the snapshot now holds every figure of the report, so it answers
    at = _materialize_budget(wh)
    with warehouse.open_reader(wh) as con:
        got = facts.budget(con, policy=_policy(con))
        computed = queries.budget_report(con, policy=_policy(con), as_of=at)
    assert got.source == facts.MATERIALIZED and got.as_of == at
    assert got.frame.height == computed.height > 0
    assert_frame_equal(got.frame, computed, rel_tol=1e-12, abs_tol=1e-9)  # float sums: see the fair-share test


def test_funding_takes_the_budgets_left_from_a_fresh_snapshot(wh):
    # facts.funding reads each node's remaining from the budget snapshot (issue 41: no recompute of
    # the month's allocations each cycle): the same frame as funding computed from scratch ...
    at = _materialize_budget(wh)
    with warehouse.open_reader(wh) as con:
        got = facts.funding(con, policy=_policy(con), now=at).frame
        computed = queries.funding_report(con, policy=_policy(con), now=at)
    assert got.height == computed.height > 0 and got["funded"].any()
    assert_frame_equal(got, computed)
    # ... and the snapshot is what it read: a project whose stored budget is spent is unfunded
    project = got.filter("funded")["project"][0]
    with warehouse.open_writer(wh) as con:
        con.execute("UPDATE budget_snapshots SET remaining_gpu_hours = -1 WHERE node = ? AND budget_own",
                    [project]).fetchall()
    with warehouse.open_reader(wh) as con:
        spent = facts.funding(con, policy=_policy(con), now=at).frame.filter(project=project)
    assert not spent["funded"].any() and set(spent["unfunded_reason"]) == {f"budget exhausted at {project}"}


def test_budget_rows_from_before_migration_016_are_not_used(wh):
    # a row materialized before 016 has NULL unweighted_gpu_hours where the report says 0.0 or
    # more: serving it would print a blank figure, so the answer is computed
    _materialize_budget(wh)
    with warehouse.open_writer(wh) as con:
        con.execute("UPDATE budget_snapshots SET unweighted_gpu_hours = NULL, unweighted_models = NULL "
                    "WHERE rowid = (SELECT min(rowid) FROM budget_snapshots)").fetchall()
    with warehouse.open_reader(wh) as con:
        got = facts.budget(con, policy=_policy(con))
    assert got.source == facts.COMPUTED and got.frame["unweighted_gpu_hours"].null_count() == 0


@pytest.mark.slow
def test_the_cli_answers_the_same_from_the_snapshot(wh):
    def shown():
        done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "report", "fairshare", "--format", "csv",
                               "-w", str(wh)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    computed = shown()
    _materialize_fairshare(wh)
    assert shown() == computed


def test_a_stored_setting_from_its_json_is_the_validated_one(wh):
    # migration 017 keeps the validated content as JSON: one setting read from it equals the
    # validated config's, defaults included (the example leaves most of policy to them)
    with warehouse.open_reader(wh) as con:
        stored = stored_config(con)
    assert stored.content_json is not None
    cfg = stored.config
    for path, want in (("policy.usage.mode", cfg.policy.usage.mode),
                       ("policy.usage.half_life_days", cfg.policy.usage.half_life_days),
                       ("currency", cfg.currency)):
        assert stored.setting(path) == want, path


# a read command in its own interpreter: what it imported (analytics.load: what computing loads;
# analytics.queries itself is a lazy module, listed before it runs). stdout carries the table, so the probe
# prints on stderr's last line)
_PROBE = ("import contextlib, io, json, sys\nfrom gpuledger.cli import main\nsys.argv = ['gpuledger', *sys.argv[1:]]\n"
          "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main()\n    except SystemExit:\n"
          "        pass\nprint(json.dumps(sorted(m for m in ('polars', 'pydantic_core', 'gpuledger.config',\n"
          "    'gpuledger.analytics.load') if m in sys.modules)), file=sys.stderr)\n")


def _imported(*args: str) -> list[str]:
    import json

    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_materialized_read_commands_import_no_polars_pydantic_or_analytics(wh):
    # the start-up cost of a read served from materialized rows (BENCHMARKS.md "Read model and
    # CLI latency"): DuckDB only; computed, the same commands load what computing needs
    at = _materialize_fairshare(wh)
    _materialize_budget(wh)
    _materialize_usage(wh, [DAY1])
    usage = ["report", "usage", "--start", DAY1.isoformat(), "--end", DAY2.isoformat(), "-w", str(wh)]
    assert _imported("report", "fairshare", "-w", str(wh)) == []
    assert _imported("report", "budget", "-w", str(wh)) == []
    assert _imported(*usage) == []
    _materialize_jobs_and_utilization(wh, [DAY1])
    assert _imported(*usage, "--by", "user") == []
    assert _imported("report", "utilization", "--start", DAY1.isoformat(), "--end", DAY2.isoformat(), "-w", str(wh)) == []
    with warehouse.open_writer(wh) as con:  # a squatting evaluation at the data's now, one finding
        _store_one_finding(con, at)
    assert _imported("report", "squatters", "-w", str(wh)) == []
    computed = _imported("report", "fairshare", "--now", (at - timedelta(hours=1)).isoformat(), "-w", str(wh))
    assert {"polars", "gpuledger.analytics.load", "gpuledger.config"} <= set(computed)


def test_a_setting_added_after_the_version_was_stored_reads_its_default(wh):
    # a version stored by an older release lacks a key this release added: its JSON has no
    # policy.usage, so the setting comes from the validated text (its default), not a KeyError
    import dataclasses
    import json

    with warehouse.open_reader(wh) as con:
        stored = stored_config(con)
    older = json.loads(stored.content_json)
    del older["policy"]["usage"]
    old = dataclasses.replace(stored, content_json=json.dumps(older))
    assert old.setting("policy.usage.mode") == stored.config.policy.usage.mode


def test_findings_come_from_a_recent_evaluation_else_are_computed(wh):
    # one evaluation at T with one open episode (as the squatting asset writes them); the fact
    # serves it up to half the sustained-idle window after T (60 min by default: 30 min), and
    # computes beyond it, with exempt jobs asked for, or for other squatting rules than the stored ones
    with warehouse.open_reader(wh) as con:
        at = facts.data_now(con).replace(second=0, microsecond=0)
        policy = _policy(con)
    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, at)
    half = timedelta(minutes=policy.squatting.sustained_minutes / 2)
    other = policy.model_copy(update={"squatting": policy.squatting.model_copy(update={"sustained_minutes": 90})})
    with warehouse.open_reader(wh) as con:
        served = facts.findings(con, policy=policy, now=at + half)
        late = facts.findings(con, policy=policy, now=at + half + timedelta(minutes=1))
        exempt = facts.findings(con, policy=policy, now=at, include_exempt=True)
        foreign = facts.findings(con, policy=other, now=at)
        computed = queries.squatters_report(con, policy=policy, now=at + half + timedelta(minutes=1))
    assert served.source == facts.MATERIALIZED and served.as_of == at
    assert served.frame.select("cluster", "job_id", "severity").rows() == [("c1", "j1", "warning")]
    assert late.source == exempt.source == foreign.source == facts.COMPUTED
    assert_frame_equal(late.frame, computed)


def test_findings_without_a_time_take_the_evaluation_the_data_now_makes_recent(wh):
    # issue 41: without --now, whether the latest evaluation is recent is asked of the rows near it
    # (clock.data_now_within), not of the data's now D: the same answer as asking at D. Evaluations
    # at D - half (recent: at the window's edge), then one a minute after D (ahead of the data, as
    # an explicit as_of can be): the latest not after D is still D - half. Then D - half - 1 min
    # alone: computed. Then D itself: materialized at D.
    with warehouse.open_reader(wh) as con:
        d, policy = facts.data_now(con), _policy(con)
    half = timedelta(minutes=policy.squatting.sustained_minutes / 2)

    def both():
        with warehouse.open_reader(wh) as con:
            return facts.findings(con, policy=lambda: policy), facts.findings(con, policy=lambda: policy, now=d)

    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, d - half)
        con.execute("INSERT INTO squatting_evaluations VALUES ($at, 0, $at)", {"at": d + timedelta(minutes=1)}).fetchall()
    fast, at_d = both()
    assert (fast.source, fast.as_of) == (at_d.source, at_d.as_of) == (facts.MATERIALIZED, d - half)
    assert fast.frame.rows() == at_d.frame.rows() and fast.frame.height == 1
    with warehouse.open_writer(wh) as con:
        con.execute("DELETE FROM squatting_evaluations").fetchall()
        con.execute("DELETE FROM squatting_findings").fetchall()
        _store_one_finding(con, d - half - timedelta(minutes=1))
    fast, at_d = both()
    assert fast.source == at_d.source == facts.COMPUTED and fast.as_of == at_d.as_of == d
    assert_frame_equal(fast.frame, at_d.frame)
    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, d)
    fast, at_d = both()
    assert (fast.source, fast.as_of) == (at_d.source, at_d.as_of) == (facts.MATERIALIZED, d)


def test_exempt_findings_come_from_the_same_evaluation_when_it_stored_them(wh):
    # evaluation T (migration 018 on) stored one open episode (c1/j1) and one exempt finding
    # (c1/j0, kind inference exempt); include_exempt answers both from T, in (cluster, job_id)
    # order, the exempt one flagged; the default answer is the episode alone, as before. An
    # evaluation at T+5 min that stored no exempt findings (recorded before 018) is computed with
    # include_exempt, and still materialized without.
    with warehouse.open_reader(wh) as con:
        at = facts.data_now(con).replace(second=0, microsecond=0)
        policy = _policy(con)
    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, at)
        con.execute("INSERT INTO squatting_exempt_evaluations VALUES ($at, 1)", {"at": at}).fetchall()
        con.execute("INSERT INTO squatting_exempt_findings (evaluated_at, cluster, job_id, job_kind, finding, "
                    "severity, idle_minutes, exempt, exempt_reason) VALUES ($at, 'c1', 'j0', 'inference', "
                    "'squatting', 'preempt-eligible', 130.0, true, 'kind inference')", {"at": at}).fetchall()
    with warehouse.open_reader(wh) as con:
        both = facts.findings(con, policy=policy, now=at, include_exempt=True)
        plain = facts.findings(con, policy=policy, now=at)
    assert both.source == plain.source == facts.MATERIALIZED and both.as_of == at
    assert both.frame.select("job_id", "severity", "exempt", "exempt_reason").rows() == [
        ("j0", "preempt-eligible", True, "kind inference"), ("j1", "warning", False, None)]
    assert plain.frame.select("job_id").rows() == [("j1",)] and "exempt" not in plain.frame.columns
    # enforcement asks for the exact moment: a minute after T, computed (a default reader: still T's)
    with warehouse.open_reader(wh) as con:
        minute = at + timedelta(minutes=1)
        exact = facts.findings(con, policy=policy, now=minute, include_exempt=True, exact_moment=True)
        same = facts.findings(con, policy=policy, now=at, include_exempt=True, exact_moment=True)
        lenient = facts.findings(con, policy=policy, now=minute, include_exempt=True)
    assert exact.source == facts.COMPUTED and same.source == lenient.source == facts.MATERIALIZED

    later = at + timedelta(minutes=5)
    with warehouse.open_writer(wh) as con:
        con.execute("INSERT INTO squatting_evaluations VALUES ($at, 1, $at)", {"at": later}).fetchall()
    with warehouse.open_reader(wh) as con:
        assert facts.findings(con, policy=policy, now=later, include_exempt=True).source == facts.COMPUTED
        assert facts.findings(con, policy=policy, now=later).source == facts.MATERIALIZED


def test_an_evaluation_without_exempt_jobs_is_served_with_include_exempt(wh):
    # evaluation T recorded zero exempt findings: include_exempt is the episodes alone, materialized
    with warehouse.open_reader(wh) as con:
        at = facts.data_now(con).replace(second=0, microsecond=0)
        policy = _policy(con)
    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, at)
        con.execute("INSERT INTO squatting_exempt_evaluations VALUES ($at, 0)", {"at": at}).fetchall()
    with warehouse.open_reader(wh) as con:
        got = facts.findings(con, policy=policy, now=at, include_exempt=True)
    assert got.source == facts.MATERIALIZED
    assert got.frame.select("job_id", "exempt").rows() == [("j1", False)]


def _usage_and_utilization(con, start, end, policy):
    """Every usage and utilization grouping a table answers, through facts and computed."""
    out = {}
    for by in ("project", "job", "user"):
        out[f"usage {by}"] = (facts.usage(con, start=start, end=end, by=by, policy=policy),
                              queries.usage_report(con, start=start, end=end, by=by, policy=policy))
    for by in ("model", "cluster", "fleet"):
        out[f"utilization {by}"] = (facts.utilization(con, start=start, end=end, by=by, policy=policy),
                                    queries.utilization_report(con, start=start, end=end, by=by, policy=policy))
    return out


def test_the_running_day_answers_from_its_rows_while_the_data_now_holds(wh):
    # issue 41: the range a user asks most ends after the data's now (the week "so far"). The
    # running day's rows were computed at the data's now (covered_until): while that is still the
    # now, they are the range computation's digits, the hour in progress included
    _materialize_usage(wh, [DAY1, DAY2])
    _materialize_jobs_and_utilization(wh, [DAY1, DAY2])
    with warehouse.open_reader(wh) as con:
        policy, now = _policy(con), facts.data_now(con)
        assert DAY2 < now < DAY2 + timedelta(days=1) and now.minute != 0  # inside the running day and hour
        answers = _usage_and_utilization(con, DAY1, DAY2 + timedelta(days=1), policy)
    for name, (got, computed) in answers.items():
        assert got.source == facts.MATERIALIZED, name
        assert computed.height > 0, name
        assert_frame_equal(got.frame, computed, check_exact=True)


def test_the_running_day_computed_at_an_older_now_answers_only_hours_it_had_seen(wh):
    # the data's now moved on after the running day was stored (covered_until an hour behind):
    # a range into the hours it had not seen is computed; one that ends before it still reads
    _materialize_usage(wh, [DAY1, DAY2])
    _materialize_jobs_and_utilization(wh, [DAY1, DAY2])
    with warehouse.open_writer(wh) as con:
        for table in ("usage_hourly_projects", "usage_hourly_jobs", "utilization_hourly"):
            con.execute(f"UPDATE {table} SET covered_until = covered_until - INTERVAL 1 HOUR WHERE day = $d",
                        {"d": DAY2.date()}).fetchall()
    with warehouse.open_reader(wh) as con:
        policy, now = _policy(con), facts.data_now(con)
        seen = (now - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)  # a whole hour it covered
        stale = _usage_and_utilization(con, DAY1, DAY2 + timedelta(days=1), policy)
        fresh = _usage_and_utilization(con, DAY1, seen, policy)
    assert {got.source for got, _ in stale.values()} == {facts.COMPUTED}
    for name, (got, computed) in fresh.items():
        assert got.source == facts.MATERIALIZED, name
        assert_frame_equal(got.frame, computed, check_exact=True)


def test_rows_stored_before_migration_029_answer_closed_days_only(wh):
    # no covered_until: the rule before 029 (a day materialized after it ended, the range ending
    # before the data's now)
    _materialize_usage(wh, [DAY1, DAY2])
    with warehouse.open_writer(wh) as con:
        con.execute("UPDATE usage_hourly_projects SET covered_until = NULL").fetchall()
    with warehouse.open_reader(wh) as con:
        policy, now = _policy(con), facts.data_now(con)
        closed = facts.usage(con, start=DAY1, end=now.replace(minute=0, second=0, microsecond=0), policy=policy)
        running = facts.usage(con, start=DAY1, end=DAY2 + timedelta(days=1), policy=policy)
    assert closed.source == facts.MATERIALIZED and running.source == facts.COMPUTED


def test_utilization_over_models_is_the_direct_fleet_sum_within_a_nano_gpu_hour(wh):
    # the cluster / fleet sums are now taken over the per-model hours in whole nano-units (the
    # stored rows' rule, so both paths give one answer); against summing the attribution directly
    # (the computation before issue 41) each figure moves by at most 1e-9 GPU-hour per model
    from gpuledger.analytics.load import load_tables
    from gpuledger.analytics.queries import attribution
    from gpuledger.analytics.utilization import utilization_hourly

    with warehouse.open_reader(wh) as con:
        policy, now = _policy(con), facts.data_now(con)
        end = DAY2 + timedelta(days=1)
        new = queries.utilization_report(con, start=DAY1, end=end, by="fleet", policy=policy)
        t = load_tables(con, start=DAY1, end=end, samples=False)
        used = attribution(con, t, start=DAY1, end=end, now=now, policy=policy)
        # capacity up to the data's now (its last half-minute has not come)
        old = utilization_hourly(used, t.gpus, start=DAY1, end=min(end, now), by=()).sort("hour").collect()
    assert new.height == old.height == 48
    assert_frame_equal(new, old.select(new.columns), check_exact=False, rel_tol=0, abs_tol=1e-6)


def _report(path, *args):
    """``gpuledger report ARGS`` in its own interpreter under ``-X importtime``: (the table on
    stdout, the stderr lines that are not import times, every module it imported)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuledger.cli", "report", *args, "-w", str(path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    modules = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    return done.stdout, [line for line in lines if not line.startswith("import time:")], modules


@pytest.mark.slow
def test_the_five_prometheus_questions_are_read_without_polars_and_print_the_computed_tables(simulated, wh):
    # issue 41: the questions benchmarks/prometheus_bench.py asks through the CLI (GPU-hours and
    # activity per project: one usage table; idle GPUs; hourly fleet utilization; fair share),
    # over the week so far (into the running day and hour), from the kept facts: no polars,
    # pyarrow or analytics imported, no "computed" note, and the same tables the computation
    # prints (the pristine copy computes them, and says so on stderr)
    at = _materialize_fairshare(wh)
    _materialize_usage(wh, [DAY1, DAY2])
    _materialize_jobs_and_utilization(wh, [DAY1, DAY2])
    with warehouse.open_writer(wh) as con:
        _store_one_finding(con, at)
    week = ["--start", DAY1.isoformat(), "--end", (DAY2 + timedelta(days=1)).isoformat()]
    questions = [["usage", *week, "--by", "project"], ["utilization", *week, "--by", "fleet"], ["fairshare"],
                 ["squatters"]]
    for args in questions:
        table, notes, modules = _report(wh, *args)
        # nor the duckdb package's Python layer (~0.1 CPU-s a start: gpuledger/warehouse/engine.py)
        heavy = {m for m in modules if m.split(".")[0] in ("polars", "pyarrow", "duckdb")
                 or m.startswith("gpuledger.analytics")}
        assert heavy == set() and notes == [], (args, sorted(heavy), notes)
        if args[0] != "squatters":  # the stored finding is made up here; the pipeline's equal the rule's
            computed, computed_notes, computed_modules = _report(simulated, *args)
            assert "polars" in computed_modules and any("computed from the raw data" in n for n in computed_notes)
            assert table == computed and len(table.splitlines()) > 4, args
