"""Alerts as on-call reads them (issue 21 §5), through the real receivers of
tests/helpers/alert_receivers.py: the e-mail as received has a plain-text and an HTML part that
keep the lines, the list and the link; severity maps to each channel's types; the JSON webhook
gets the versioned structured body; Slack gets Block Kit with the same fields; a budget alert is
sent once per threshold with a link, its subject not repeated in the body."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.alerts.cycle import run_alert_cycle
from gpuledger.alerts.plan import budget_alerts
from gpuledger.config import parse_config_text
from tests.alerts.test_alerts import ALERTS, T0, _episode
from tests.helpers.alert_receivers import Receiver, receivers_fixture, wait_for  # noqa: F401
from tests.helpers.prometheus_rig import free_port
from tests.helpers.statement_fixtures import CONFIG, october


def _parts(mail) -> dict[str, str]:
    return {p.get_content_type(): p.get_payload(decode=True).decode() for p in mail.walk()
            if p.get_content_type() in ("text/plain", "text/html")}


def test_the_email_as_received_keeps_its_structure_and_the_webhook_gets_the_fields(warehouse_file, receivers):
    hook, mails = receivers
    october(warehouse_file)
    policy = parse_config_text(CONFIG + ALERTS).policy
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "preempt-eligible")
    assert run_alert_cycle(warehouse_file, policy, now=T0).delivery.sent == 3
    wait_for(lambda: len(mails) == 2, "two e-mails")
    mail = next(m for m in mails if m["To"] == "oncall@example.org")
    assert mail.get_content_type() == "multipart/alternative"
    assert mail["Subject"] == "[preempt-eligible] job alpha-1 (alpha) holds 1 idle GPU"
    assert (mail["X-Priority"], mail["Importance"]) == ("1", "high")  # preempt-eligible is critical
    parts = _parts(mail)
    plain = parts["text/plain"].splitlines()
    # one fact a line, as planned (not run together)
    assert "job alpha-1 on cluster c1, host node-h1 (H100), owner u, project alpha" in plain
    assert "1 of 1 GPU idle since 2026-10-05 09:00 UTC" in plain and "wasted 1.50 GPU-hours, 3.00 USD" in plain
    assert "dashboard: https://gpuledger.example.org/squatters?cluster=c1&job=alpha-1" in plain
    html = parts["text/html"]
    assert html.count("<p>") >= 6  # a paragraph per line
    assert '<a href="https://gpuledger.example.org/squatters?cluster=c1&amp;job=alpha-1">' in html
    assert "<b>severity:</b> preempt-eligible" in html
    (body,) = hook.bodies
    assert (body["schema"], body["version"], body["kind"], body["severity"], body["level"]) == \
        ("gpuledger.alert", 1, "squatting", "preempt-eligible", "critical")
    fields = body["fields"]
    assert (fields["job_id"], fields["owner"], fields["gpus_idle"], fields["idle_cost"], fields["gpu_hours_idle"]) == \
        ("alpha-1", "u", 1, "3.00", 1.5)
    assert fields["idle_since"] == "2026-10-05T09:00:00Z" and fields["next"].startswith("eligible for preemption now")
    assert body["link"] == "https://gpuledger.example.org/squatters?cluster=c1&job=alpha-1"
    assert body["id"].startswith("squatting|c1|alpha-1|") and body["id"] in body["message"]


def test_slack_gets_block_kit_with_the_same_fields(receivers, monkeypatch):
    from gpuledger.channels import Message, notifier_for

    hook, _ = receivers
    monkeypatch.setenv("GPULEDGER_ALERT_ONCALL_SLACK_URL", f"slack+http://127.0.0.1:{hook.port}/services/T/B/x")
    fields = {"job_id": "j1", "owner": "u", "severity": "warning", "gpus_idle": 2, "idle_cost": "4.00",
              "dashboard": "https://gpuledger.example.org/squatters?job=j1", "currency": "USD",
              "gpu_hours_idle": 3.083333333333333, "idle_since": "2026-10-05T09:00:00Z", "name": "finetune-llama",
              "project": "vision", "cluster": "c1", "hosts": "node-7", "gpu_model": "H100", "gpus_total": 4,
              "next": "second warning at 2026-10-05 10:45 UTC"}
    notifier_for("oncall-slack").deliver(Message(subject="[warning] job j1", body="2 of 4 GPUs idle\nnext: ...",
                                                 kind="squatting", severity="warning", key="k1", fields=fields))
    (body,) = hook.bodies
    assert hook.paths == ["/services/T/B/x"] and body["text"].startswith("[warning] job j1")
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds == ["header", "section", "section", "actions", "context"]
    shown = [(f["text"].split("\n")[0].strip("*"), f["text"].split("\n")[1]) for f in body["blocks"][1]["fields"]]
    # ten fields, the most important first, in people's words: the name before the id, the project and
    # severity kept (alphabetical machine names cut them), money with its currency, hours rounded
    assert shown == [("job", "finetune-llama"), ("id", "j1"), ("project", "vision"), ("severity", "warning"),
                     ("owner", "u"), ("GPUs idle", "2"), ("GPUs held", "4"), ("idle cost", "4.00 USD"),
                     ("idle GPU-hours", "3.08"), ("idle since", "2026-10-05 09:00 UTC")]
    assert body["blocks"][3]["elements"][0]["url"] == fields["dashboard"]


def test_a_budget_alert_once_per_threshold_with_a_link(receivers):
    """alpha 850 of 1000 (85 %): the 80 % alert; then 1,020 (102 %): the 100 % alert only, once."""
    _, mails = receivers
    policy = parse_config_text(CONFIG + ALERTS).policy
    burn = pl.DataFrame({"node": ["alpha"], "period_start": ["2026-10-01"], "period_end": ["2026-11-01"],
                         "budget_gpu_hours": [1000.0], "consumed_gpu_hours": [850.0], "burn_gpu_hours_per_day": [10.0],
                         "projected_exhaustion": [None], "status": ["funded"], "budget_own": [True]})
    (_, hook80) = sorted(budget_alerts(burn, policy, now=datetime(2026, 10, 20)), key=lambda a: a.channel)[::-1]
    assert hook80.subject == "budget alpha: 80 % consumed" and hook80.subject not in hook80.body
    assert "dashboard: https://gpuledger.example.org/budgets?node=alpha" in hook80.body
    # what it means for the team's jobs: 150 h left at 10 h a day = 15.0 days
    assert ("for the team's jobs: still funded; at 100 % (reached in about 15.0 days at this burn rate) new and "
            "running jobs are no longer funded: they queue below funded work") in hook80.body, hook80.body
    later = budget_alerts(burn.with_columns(consumed_gpu_hours=pl.lit(1020.0)), policy, now=datetime(2026, 10, 25))
    assert {a.key.split("|")[3] for a in later} == {"100"}
    from gpuledger.channels import Message, notifier_for

    a = next(x for x in later if x.channel == "oncall-mail")
    notifier_for(a.channel).deliver(Message(subject=a.subject, body=a.body, kind=a.kind, severity=a.severity,
                                            key=a.key, fields=a.payload))
    wait_for(lambda: len(mails) == 1, "the budget e-mail")
    plain = _parts(mails[0])["text/plain"]
    assert plain.splitlines()[0].startswith("1,020.0 of 1,000.0 normalised GPU-hours consumed (102.0 %)")
    assert plain.splitlines()[1].startswith("for the team's jobs: new and running jobs are no longer funded")
    assert "until the next period starts after 2026-11-01; ask for more budget" in plain
    assert mails[0]["X-Priority"] == "1"  # 100 % is critical


def test_a_receiver_that_is_down_is_a_delivery_error_naming_it():
    from gpuledger.channels import DeliveryError, JsonWebhook, Message

    port = free_port()
    try:
        JsonWebhook(f"json://127.0.0.1:{port}/x").deliver(Message(subject="s", body="b"))
    except DeliveryError as exc:
        assert f"json://127.0.0.1:{port}" in str(exc)
    else:
        raise AssertionError("no DeliveryError")
    assert Receiver  # the helper the other tests start


def test_alerts_run_now_plans_from_the_findings_as_of_then(warehouse_file):
    """The pipeline evaluated alpha-1 at 10:00 (warning, opened) and 10:45 (second-warning): planned
    as of 10:00 the alert is the warning, as of 10:45 the second warning; as of 12:00, long after
    the last evaluation, the rules are evaluated at 12:00 (no sample: nothing squats)."""
    from gpuledger.alerts.cycle import plan_alerts

    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "second-warning", at=T0)
        con.execute("INSERT INTO squatting_evaluations VALUES ('2026-10-05 10:45', 1, '2026-10-05 10:45')")
        con.execute("INSERT INTO squatting_finding_events VALUES ('c1', 'alpha-1', '2026-10-05 10:00', "
                    "'2026-10-05 10:00', 'opened', 'squatting', 'warning', 60), ('c1', 'alpha-1', '2026-10-05 10:00', "
                    "'2026-10-05 10:45', 'severity-changed', 'squatting', 'second-warning', 105)")
    policy = parse_config_text(CONFIG + ALERTS).policy

    def severities(at):
        with warehouse.open_reader(warehouse_file) as con:
            return {a.severity for a in plan_alerts(con, policy, now=at) if a.kind == "squatting"}

    assert severities(T0) == {"warning"}
    assert severities(datetime(2026, 10, 5, 10, 50)) == {"second-warning"}
    assert severities(datetime(2026, 10, 5, 12, 0)) == set()


def test_the_owner_reads_a_letter_with_the_job_by_name_its_host_the_commands_and_whom_to_ask(warehouse_file,
                                                                                             receivers):
    """Job Defense Shield's manner: the owner's mail names the job as they know it (the id beside), the
    model and host, what happens next and when, the commands for their scheduler (Slurm here) and the
    contact and help page from the config; on-call's operator lines (the dry-run mode) are not in it."""
    _, mails = receivers
    october(warehouse_file)
    extra = "    contact: gpu-help@example.org\n    help_url: https://wiki.example.org/idle-gpus\n"
    policy = parse_config_text(CONFIG + ALERTS + extra).policy
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "warning")
        con.execute("UPDATE jobs SET name = 'finetune-llama', scheduler_job = '4711', source = 'slurm-sacct' "
                    "WHERE job_id = 'alpha-1'")
    run_alert_cycle(warehouse_file, policy, now=T0)
    wait_for(lambda: len(mails) == 2, "two e-mails")
    mail = next(m for m in mails if m["To"] == "owner-u@example.org")
    assert " ".join(mail["Subject"].split()) == "Your job finetune-llama on c1 holds 1 idle GPU"
    plain = _parts(mail)["text/plain"].replace("\r\n", "\n")
    # idle since 09:00 with policy.squatting's 105 / 120 min: second warning 10:45, preemption from 11:00
    for words in ("Hello u,",
                  "your job finetune-llama (id alpha-1) of project alpha, on cluster c1, host node-h1 (H100), holds "
                  "1 GPU, idle (activity under 1 %) since 2026-10-05 09:00 UTC: 1.50 idle GPU-hours so far, 3.00 USD.",
                  "a second warning at 2026-10-05 10:45 UTC, and from 2026-10-05 11:00 UTC it may be preempted",
                  "To check whether it uses its GPUs:\n    srun --jobid=4711 --overlap nvidia-smi",
                  "If you no longer need it, stop it so others can use the GPUs:\n    scancel 4711",
                  "Ask gpu-help@example.org for an exemption, naming job alpha-1 on c1.",
                  "Help: https://wiki.example.org/idle-gpus"):
        assert words in plain, plain
    assert "dry run" not in plain and "severity:" not in plain
    oncall = next(m for m in mails if m["To"] == "oncall@example.org")
    assert "[warning] job finetune-llama (alpha)" in " ".join(oncall["Subject"].split())
