"""On-call and owner alerts (issue 11 §2) against real receivers started here: a local HTTP server
(the JSON webhook) and aiosmtpd (SMTP). One alert per finding and severity, nothing new on a
second tick, one more when the severity rises, retried while the receiver is down and delivered
once it is back — none lost, none doubled."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.alerts.cycle import run_alert_cycle
from gpuledger.alerts.outbox import deliver
from gpuledger.alerts.plan import budget_alerts, digest_alerts, quiet_until, squatting_alerts
from gpuledger.config import parse_config_text
from gpuledger.rules.clock import utc_now as wall_now
from tests.helpers.alert_receivers import receivers_fixture, wait_for  # noqa: F401  (the receivers fixture)
from tests.helpers.statement_fixtures import CONFIG, october

ALERTS = """
policy:
  alerts:
    on_call: [oncall-hook, oncall-mail]
    owner_channel: owner-mail
    owners: {u: owner-u@example.org}
    dashboard_url: https://gpuledger.example.org
    retry_base_seconds: 60
"""
T0 = datetime(2026, 10, 5, 10, 0)


def _episode(con, severity: str, at: datetime | None = None):
    """An open squatting episode of alpha-1 (owner u): 1 of 1 GPU idle since Oct 5 09:00, as the
    pipeline's evaluation at ``at`` (default Oct 5 10:00) left it."""
    con.execute("DELETE FROM squatting_findings")
    con.execute(
        "INSERT INTO squatting_findings (cluster, job_id, first_seen, last_seen, project, user_name, finding, "
        "severity, gpus_total, gpus_idle, idle_since, idle_minutes, gpu_hours_idle, idle_cost, currency) "
        "VALUES ('c1', 'alpha-1', '2026-10-05 10:00', '2026-10-05 10:00', 'alpha', 'u', 'squatting', ?, 1, 1, "
        "'2026-10-05 09:00', 60, 1.5, 3.00, 'USD')", [severity])
    at = at or datetime(2026, 10, 5, 10, 0)
    con.execute("INSERT OR IGNORE INTO squatting_evaluations VALUES (?, 1, ?)", [at, at])


@pytest.mark.slow
def test_alerts_reach_real_receivers_once_per_severity_and_survive_a_receiver_outage(warehouse_file, receivers):
    hook, mails = receivers
    october(warehouse_file)
    policy = parse_config_text(CONFIG + ALERTS).policy
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "warning")
    first = run_alert_cycle(warehouse_file, policy, now=T0)
    # squatting: on-call webhook, on-call e-mail, the owner's e-mail. No budget alert: alpha's own
    # 1000 has 106 used by Oct 5 10:00 (10.6 %) at 24 a day, out Nov 11, after its period (only
    # acme's roll-up of it would run out before: budgets alert on the node that holds them)
    assert (first.new, first.delivery.sent, first.delivery.retried) == (3, 3, 0)
    wait_for(lambda: len(mails) == 2, "two e-mails")
    assert [b["title"] for b in hook.bodies] == ["[warning] job alpha-1 (alpha) holds 1 idle GPU"]
    body = hook.bodies[0]
    assert body["title"] == "[warning] job alpha-1 (alpha) holds 1 idle GPU"
    for fact in ("owner u, project alpha", "1 of 1 GPU idle since 2026-10-05 09:00 UTC",
                 "wasted 1.50 GPU-hours, 3.00 USD", "rule: squatting: GPU activity under 1 % (ratio 0.01) for 60 min",
                 "next: second warning at 2026-10-05 10:45 UTC, eligible for preemption at 2026-10-05 11:00 UTC",
                 "dashboard: https://gpuledger.example.org/squatters?cluster=c1&job=alpha-1"):
        assert fact in body["message"], fact
    assert sorted(m["To"] for m in mails) == ["oncall@example.org", "owner-u@example.org"]

    # a second tick over the same state sends nothing new
    again = run_alert_cycle(warehouse_file, policy, now=T0 + timedelta(minutes=1))
    assert (again.new, again.delivery.sent) == (0, 0)
    assert len(hook.bodies) == 1 and len(mails) == 2

    # the severity rises: one more alert per recipient
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "second-warning", at=T0 + timedelta(minutes=45))
    raised = run_alert_cycle(warehouse_file, policy, now=T0 + timedelta(minutes=45))
    assert (raised.new, raised.delivery.sent) == (3, 3)
    wait_for(lambda: len(mails) == 4, "four e-mails")
    assert [b["title"][:16] for b in hook.bodies] == ["[warning] job al", "[second-warning]"]

    # the webhook receiver goes down: its alert is kept and retried with backoff, the e-mails go
    hook.stop()
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "preempt-eligible", at=T0 + timedelta(minutes=60))
    clock = wall_now()
    down = run_alert_cycle(warehouse_file, policy, now=T0 + timedelta(minutes=60), clock=clock)
    assert (down.new, down.delivery.sent, down.delivery.retried) == (3, 2, 1)
    from gpuledger.channels import notifier_for

    # not due before its backoff (60 s) has passed
    assert deliver(warehouse_file, notifier_for, now=clock + timedelta(seconds=30)).sent == 0
    hook.start()  # back on the same port
    back = deliver(warehouse_file, notifier_for, now=clock + timedelta(seconds=61))
    assert (back.sent, back.retried) == (1, 0)
    assert deliver(warehouse_file, notifier_for, now=clock + timedelta(hours=2)).sent == 0
    assert [b["title"].split("]")[0] for b in hook.bodies] == ["[warning", "[second-warning", "[preempt-eligible"]
    wait_for(lambda: len(mails) == 6, "six e-mails")
    with warehouse.open_reader(warehouse_file) as con:
        status = dict(con.execute("SELECT status, count(*) FROM alert_outbox GROUP BY status").fetchall())
        attempts = con.execute("SELECT attempt, ok FROM alert_deliveries WHERE idempotency_key LIKE "
                               "'%preempt-eligible|oncall-hook|' ORDER BY attempt").fetchall()
    assert status == {"sent": 9}
    assert attempts == [(1, False), (2, True)]


def test_quiet_hours_hold_non_urgent_alerts_until_they_end():
    policy = parse_config_text(CONFIG + ALERTS + "    quiet_hours: {start: '22:00', end: '07:00'}\n").policy
    assert quiet_until(datetime(2026, 10, 5, 23, 0), policy.alerts.quiet_hours) == datetime(2026, 10, 6, 7, 0)
    assert quiet_until(datetime(2026, 10, 6, 6, 59), policy.alerts.quiet_hours) == datetime(2026, 10, 6, 7, 0)
    assert quiet_until(datetime(2026, 10, 6, 7, 0), policy.alerts.quiet_hours) is None
    night = datetime(2026, 10, 5, 23, 30)
    frame = pl.DataFrame({"cluster": ["c1", "c1"], "job_id": ["j1", "j2"], "first_seen": [night, night],
                          "resolved_at": [None, None], "idle_since": [night - timedelta(hours=1)] * 2,
                          "severity": ["warning", "preempt-eligible"], "user_name": ["u", "u"],
                          "project": ["alpha", "alpha"], "gpus_idle": [1, 1], "gpus_total": [1, 1],
                          "gpu_hours_idle": [1.0, 2.0], "idle_cost": [None, None], "currency": ["USD", "USD"]})
    held = {a.payload["job_id"]: a.not_before for a in squatting_alerts(frame, policy, now=night,
                                                                        squatting=policy.squatting)}
    assert held == {"j1": datetime(2026, 10, 6, 7, 0), "j2": night}  # preempt-eligible is urgent


def test_daily_digest_per_team_and_budget_thresholds():
    policy = parse_config_text(CONFIG + ALERTS + "    teams: {alpha: [alpha-team]}\n").policy
    d = datetime(2026, 10, 4, 12, 0)
    episodes = pl.DataFrame({"cluster": ["c1"] * 3, "job_id": ["a1", "a2", "b1"], "project": ["alpha", "alpha", "beta"],
                             "user_name": ["u", "v", "w"], "severity": ["warning", "preempt-eligible", "warning"],
                             "first_seen": [d, d, d - timedelta(days=2)], "last_seen": [d, d, d - timedelta(days=2)],
                             "resolved_at": [None, d + timedelta(hours=1), d - timedelta(days=2)],
                             "idle_since": [d, d, d], "gpus_idle": [1, 2, 1], "gpus_total": [1, 2, 1],
                             "gpu_hours_idle": [1.0, 4.0, 1.0]})
    assert digest_alerts(episodes, policy, now=datetime(2026, 10, 5, 7, 0)) == []  # before digest_hour_utc 08
    (digest,) = digest_alerts(episodes, policy, now=datetime(2026, 10, 5, 8, 0))  # beta's was two days ago
    assert digest.key == "digest|alpha|2026-10-04|alpha-team"
    assert "2 idle-GPU findings for project alpha on 2026-10-04, 5.00 GPU-hours wasted" in digest.body
    assert digest.body.index("job a2") < digest.body.index("job a1")  # worst first
    # alpha: 850 of 1000 (85 %) and projected to run out Oct 20, before Nov 1; beta: 1100 of 1000
    burn = pl.DataFrame({"node": ["alpha", "beta"], "period_start": ["2026-10-01"] * 2,
                         "period_end": ["2026-11-01"] * 2, "budget_gpu_hours": [1000.0, 1000.0],
                         "consumed_gpu_hours": [850.0, 1100.0], "burn_gpu_hours_per_day": [30.0, 40.0],
                         "projected_exhaustion": [datetime(2026, 10, 20), None], "status": ["at-risk", "exhausted"]})
    # research's budget is alpha's rolled up (budget_own false): its alerts would repeat alpha's
    rolled = burn.head(1).with_columns(node=pl.lit("research"), consumed_gpu_hours=pl.lit(2000.0))
    burn = pl.concat([burn.with_columns(budget_own=pl.lit(True)), rolled.with_columns(budget_own=pl.lit(False))])
    keys = {a.key for a in budget_alerts(burn, policy, now=d)}
    assert keys == {"budget|alpha|2026-10-01|80|oncall-hook", "budget|alpha|2026-10-01|80|oncall-mail",
                    "budget|alpha|2026-10-01|exhaustion|oncall-hook", "budget|alpha|2026-10-01|exhaustion|oncall-mail",
                    # beta passed 80 % and 100 % since the last cycle: the 100 % alert only, not both
                    "budget|beta|2026-10-01|100|oncall-hook", "budget|beta|2026-10-01|100|oncall-mail",
                    "budget|alpha|2026-10-01|80|alpha-team", "budget|alpha|2026-10-01|exhaustion|alpha-team"}
    assert Decimal("85.0") == Decimal(str(next(a for a in budget_alerts(burn, policy, now=d)
                                               if a.key.endswith("80|oncall-hook")).payload["consumed_pct"]))


def test_a_slack_compatible_webhook_gets_text(receivers, monkeypatch):
    """apprise's mmost:// posts Slack's {"text": ...} shape to /hooks/<token> (Mattermost and
    Slack-compatible receivers take it)."""
    from gpuledger.channels import notifier_for

    hook, _ = receivers
    monkeypatch.setenv("GPULEDGER_ALERT_ONCALL_SLACK_URL", f"mmost://127.0.0.1:{hook.port}/t0ken")
    notifier_for("oncall-slack").send("[warning] job j1", "2 of 4 GPUs idle since 09:00 UTC")
    assert hook.paths == ["/hooks/t0ken"]
    assert "2 of 4 GPUs idle since 09:00 UTC" in hook.bodies[0]["text"]


def test_a_channel_without_a_url_names_where_to_put_it(monkeypatch, tmp_path):
    from gpuledger.channels import channel_url
    from gpuledger.errors import RunError

    monkeypatch.delenv("GPULEDGER_ALERT_PAGER_URL", raising=False)
    monkeypatch.delenv("GPULEDGER_SECRETS_FILE", raising=False)
    with pytest.raises(RunError, match=r"\$GPULEDGER_ALERT_PAGER_URL .* \$GPULEDGER_SECRETS_FILE"):
        channel_url("pager")
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("channels: {pager: 'json://10.0.0.1:9000/x'}\n")
    monkeypatch.setenv("GPULEDGER_SECRETS_FILE", str(secrets))
    assert channel_url("pager") == "json://10.0.0.1:9000/x"


@pytest.mark.slow
def test_alerts_cli_runs_a_cycle_and_lists_the_outbox(warehouse_file, receivers):
    from typer.testing import CliRunner

    from gpuledger.cli import app
    from tests.helpers.ledger_fixtures import load

    hook, mails = receivers
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG + ALERTS, at=datetime(2026, 10, 1))  # the warehouse's config names the channels
        _episode(con, "second-warning")
    runner = CliRunner()
    done = runner.invoke(app, ["alerts", "run", "--now", "2026-10-05T10:00:00", "--warehouse", str(warehouse_file)])
    assert done.exit_code == 0, done.output
    assert "3 alerts planned, 3 new; sent 3, retrying 0, failed 0" in " ".join(done.output.split())
    wait_for(lambda: len(mails) == 2, "two e-mails")
    assert [b["title"][:16] for b in hook.bodies] == ["[second-warning]"]
    listed = runner.invoke(app, ["alerts", "outbox", "--status", "sent", "--columns", "kind,severity,channel,status",
                                 "--warehouse", str(warehouse_file)])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("squatting") == 3 and "budget" not in listed.output


def test_quiet_hours_defer_delivery_in_the_outbox(warehouse_file, receivers):
    """Raised at 23:30 inside quiet hours 22:00–07:00: the warning waits in the outbox until 07:00."""
    from gpuledger.alerts.outbox import enqueue
    from gpuledger.channels import notifier_for

    hook, _ = receivers
    with warehouse.open_writer(warehouse_file):
        pass  # create and migrate
    policy = parse_config_text(CONFIG + "policy:\n  alerts:\n    on_call: [oncall-hook]\n"
                               "    quiet_hours: {start: '22:00', end: '07:00'}\n").policy
    night = datetime(2026, 10, 5, 23, 30)
    frame = pl.DataFrame({"cluster": ["c1"], "job_id": ["j1"], "first_seen": [night], "resolved_at": [None],
                          "idle_since": [night - timedelta(hours=1)], "severity": ["warning"], "user_name": ["u"],
                          "project": ["alpha"], "gpus_idle": [1], "gpus_total": [1], "gpu_hours_idle": [1.0],
                          "idle_cost": [None], "currency": ["USD"]})
    assert enqueue(warehouse_file, squatting_alerts(frame, policy, now=night, squatting=policy.squatting)) == 1
    assert deliver(warehouse_file, notifier_for, now=datetime(2026, 10, 6, 6, 59)).sent == 0
    assert hook.bodies == []
    assert deliver(warehouse_file, notifier_for, now=datetime(2026, 10, 6, 7, 0)).sent == 1
    assert len(hook.bodies) == 1


@pytest.mark.slow
def test_the_alert_says_what_enforcement_did(warehouse_file):
    """A preemption enforcement planned (dry run) for the job is named in its alert."""
    from gpuledger.alerts.cycle import plan_alerts

    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "preempt-eligible")
        con.execute("INSERT INTO enforcement_audit (action_id, phase, attempt, plan_id, planned_at, recorded_at, "
                    "action, cluster, job_id, reason, dry_run, outcome) VALUES ('p1:1', 'planned', 0, 'p1', "
                    "'2026-10-05 09:55', '2026-10-05 09:55', 'preempt', 'c1', 'alpha-1', 'idle 120 min', true, "
                    "'planned')")
    policy = parse_config_text(CONFIG + ALERTS).policy
    with warehouse.open_reader(warehouse_file) as con:
        alerts = plan_alerts(con, policy, now=T0)
    (squat, *_) = [a for a in alerts if a.kind == "squatting"]
    assert "enforcement: preemption planned (dry run) at 2026-10-05 09:55 UTC" in squat.body
    assert "next: eligible for preemption now; enforcement is in dry run" in squat.body


@pytest.mark.slow  # two program starts
def test_an_alert_left_pending_is_delivered_by_a_new_process(warehouse_file, receivers):
    """Nothing lost across a restart: the webhook is down when the alert is raised; a fresh
    `gpuledger alerts deliver` process sends it once the receiver is back, and only once."""
    import subprocess
    import sys

    hook, mails = receivers
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "warning")
    policy = parse_config_text(CONFIG + ALERTS).policy
    hook.stop()
    # the failed attempt is stamped two minutes ago, so its retry (60 s backoff) is due now
    down = run_alert_cycle(warehouse_file, policy, now=T0, clock=wall_now() - timedelta(minutes=2))
    assert (down.new, down.delivery.retried) == (3, 1)  # the webhook's; the two e-mails went
    hook.start()

    def deliver_in_a_new_process() -> str:
        done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "alerts", "deliver", "--warehouse",
                               str(warehouse_file)], check=False, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    assert deliver_in_a_new_process() == "sent 1, retrying 0, failed 0"
    assert deliver_in_a_new_process() == "sent 0, retrying 0, failed 0"
    assert [b["title"][:9] for b in hook.bodies] == ["[warning]"]
    wait_for(lambda: len(mails) == 2, "two e-mails")
