"""Dagster for issue 11: the monthly statement on the 1st for the month before and the weekly
summary on Mondays; the statement asset writes byte-identical files and e-mails finance (a real
aiosmtpd); the alert cycle is a run that sends once per finding and severity — a second run sends nothing."""

from __future__ import annotations

import email
from datetime import UTC, datetime

import dagster as dg
import pytest
from gpuledger.pipelines.defs.alerts.assets import alert_deliveries, alerts_after_analytics_sensor, alerts_job
from gpuledger.pipelines.defs.automation import squatting_job
from gpuledger.pipelines.defs.reports.assets import finance_statement_files, weekly_summary_files
from gpuledger.pipelines.defs.reports.schedules import finance_statement_schedule, weekly_summary_schedule
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import warehouse
from tests.alerts.test_alerts import ALERTS, _episode
from tests.helpers.alert_receivers import receivers_fixture, wait_for  # noqa: F401  (the receivers fixture)
from tests.helpers.statement_fixtures import CONFIG, october


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_statement_schedules_pick_the_month_before_and_the_week_just_ended():
    with dg.instance_for_test() as instance:
        def run(schedule, at):
            return schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=_at(at)))

        assert finance_statement_schedule.cron_schedule == "0 2 1 * *"
        assert run(finance_statement_schedule, "2026-12-01T02:00:00").partition_key == "2026-11-01"
        assert run(finance_statement_schedule, "2027-01-01T02:00:00").partition_key == "2026-12-01"
        assert weekly_summary_schedule.cron_schedule == "0 3 * * 1"  # Mondays
        assert run(weekly_summary_schedule, "2026-11-30T03:00:00").partition_key == "2026-11-23"


def _resources(warehouse_file, tmp_path, extra: str = ""):
    config = tmp_path / "gpuledger.yaml"
    config.write_text(CONFIG + ALERTS + extra)
    return {"warehouse": Warehouse(path=str(warehouse_file)), "gpuledger_config": GpuledgerConfig(path=str(config))}


@pytest.mark.slow
def test_monthly_statement_asset_writes_the_same_bytes_and_mails_finance(warehouse_file, tmp_path, receivers,
                                                                         monkeypatch):
    _, mails = receivers
    october(warehouse_file)
    monkeypatch.setenv("GPULEDGER_STATEMENTS_DIR", str(tmp_path / "statements"))
    monkeypatch.setenv("GPULEDGER_ALERT_FINANCE_URL",
                       __import__("os").environ["GPULEDGER_ALERT_ONCALL_MAIL_URL"].replace("to=oncall", "to=finance"))
    resources = _resources(warehouse_file, tmp_path, "  reports: {finance_channel: finance}\n")
    out = tmp_path / "statements" / "2026-10"
    runs = []
    for _ in range(2):
        result = dg.materialize([finance_statement_files], partition_key="2026-10-01", resources=resources,
                                instance=dg.DagsterInstance.ephemeral())
        assert result.success
        runs.append({p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert runs[0] == runs[1] and "manifest.json" in runs[0]
    meta = result.asset_materializations_for_node("finance_statement_files")[0].metadata
    assert meta["total_USD"].value == "3720.00" and meta["reconciles"].value is True
    wait_for(lambda: len(mails) == 2, "the statement e-mailed twice (one per run)")
    message = email.message_from_bytes(mails[0].as_bytes())
    assert message["To"] == "finance@example.org" and "GPU statement 2026-10" in message["Subject"]
    attached = sorted(part.get_filename() for part in message.walk() if part.get_filename())
    assert attached == ["statement-2026-10-acme-by-host.csv", "statement-2026-10-acme-by-partition.csv",
                        "statement-2026-10-acme-energy-by-job.csv", "statement-2026-10-acme-focus.csv",
                        "statement-2026-10-acme.csv", "statement-2026-10-acme.html", "statement-2026-10-acme.pdf",
                        "statement-2026-10-acme.xlsx"]  # the PDF too: finance signs the printed form; FOCUS for loaders
    weekly = dg.materialize([weekly_summary_files], partition_key="2026-09-28", resources=resources,
                            instance=dg.DagsterInstance.ephemeral())
    assert weekly.success  # week 2026-W40: Sep 28 – Oct 5
    assert (tmp_path / "statements" / "weekly" / "2026-W40" / "weekly-2026-W40.csv").exists()


@pytest.mark.slow
def test_alert_run_second_run_sends_nothing_new(warehouse_file, tmp_path, receivers):
    hook, mails = receivers
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        # as the pipeline's squatting evaluation at the data's "now" (Nov 3 00:00) left it: the alert
        # cycle plans from a recent evaluation (an older one is evaluated afresh)
        _episode(con, "warning", at=datetime(2026, 11, 3))
    resources = _resources(warehouse_file, tmp_path)

    def counts():
        result = dg.materialize([alert_deliveries], resources=resources, instance=dg.DagsterInstance.ephemeral())
        assert result.success
        meta = result.asset_materializations_for_node("alert_deliveries")[0].metadata
        return {k: meta[k].value for k in ("planned", "new", "sent", "retrying", "failed")}

    first = counts()
    # the run evaluates at the data's "now", Nov 3 00:00: the squatting alert to the webhook, the
    # on-call mail and the owner's mail; and beta's own November budget (100) has 24 used in its
    # first 2 days — 12 a day, 76 left: out Nov 9 08:00, before Dec 1 — a projected-exhaustion alert
    # to both on-call channels (not repeated for product and acme, which only roll it up): 3 + 2
    assert (first["new"], first["sent"], first["retrying"]) == (5, 5, 0)
    wait_for(lambda: len(mails) == 3, "three e-mails")
    posts = len(hook.bodies)
    again = counts()
    assert again == {**first, "new": 0, "sent": 0}
    assert len(hook.bodies) == posts == 2 and len(mails) == 3
    assert sorted(b["title"] for b in hook.bodies) == [
        "[warning] job alpha-1 (alpha) holds 1 idle GPU",
        "budget beta: projected to run out 2026-11-09 08:00 UTC, before its period ends 2026-12-01"]


def test_alert_run_follows_a_successful_squatting_run_once():
    with dg.instance_for_test() as instance:
        from gpuledger.pipelines.definitions import defs

        job = defs().resolve_job_def(squatting_job.name)
        run = instance.create_run_for_job(job, run_id="0" * 8 + "-0000-0000-0000-000000000001")
        context = dg.build_run_status_sensor_context(sensor_name=alerts_after_analytics_sensor.name,
                                                     dagster_event=dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS", job_name=job.name), dagster_instance=instance,
                                                     dagster_run=run)
        request = alerts_after_analytics_sensor(context)
        assert request.run_key == f"alerts-after-{run.run_id}"
        # an alerts run not finished yet: the next evaluation is not stacked on it
        instance.create_run_for_job(defs().resolve_job_def(alerts_job.name), status=dg.DagsterRunStatus.STARTED)
        assert isinstance(alerts_after_analytics_sensor(context), dg.SkipReason)
    assert alerts_job.tags["gpuledger/warehouse"] == "write"
