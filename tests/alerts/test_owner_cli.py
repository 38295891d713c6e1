"""An owner answers a squatting alert from a shell (issue 38): `gpuledger alerts keep | release |
exemption`. Only the job's owner may; a keep outside 1–4 h is refused in one line (exit 2); an
exemption request reaches on-call through the outbox; a release becomes enforcement's stop —
never without the scheduler's live view. Every answer is a row of owner_choices.

The october fixture: alpha-1 (owner u, project alpha) runs Oct 1 – Oct 11 on one H100."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from gpuledger.enforce import inputs, policy

from gpuledger import warehouse
from gpuledger.config import parse_config_text
from tests.alerts.test_alerts import ALERTS
from tests.helpers.statement_fixtures import CONFIG, october

AT = "2026-10-05T10:05:00"


class Done:
    def __init__(self, done: subprocess.CompletedProcess):
        self.exit_code, self.output = done.returncode, done.stdout + done.stderr


def cli(*args) -> Done:
    """The real program (its one error boundary: a refusal is one line, exit 2)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    return Done(subprocess.run([str(Path(sys.executable).parent / "gpuledger"), *args], capture_output=True,
                               text=True, env={**env, "COLUMNS": "200"}, timeout=300, check=False))


def _warehouse(warehouse_file, tmp_path):
    october(warehouse_file)
    (tmp_path / "c.yaml").write_text(CONFIG + ALERTS)
    assert cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(warehouse_file)).exit_code == 0


@pytest.mark.slow
def test_only_the_owner_keeps_within_the_bounds(warehouse_file, tmp_path):
    _warehouse(warehouse_file, tmp_path)
    w = ["-w", str(warehouse_file), "--now", AT]
    other = cli("alerts", "keep", "alpha-1", "--hours", "2", "--as", "v", *w)
    assert other.exit_code == 2 and "job c1/alpha-1 belongs to u, not v: only its owner chooses" in other.output
    long = cli("alerts", "keep", "alpha-1", "--hours", "5", "--as", "u", *w)
    assert long.exit_code == 2 and "a keep lasts 1 to 4 h (policy.alerts.self_service), not 5 h" in long.output
    unknown = cli("alerts", "keep", "alpha-9", "--hours", "2", "--as", "u", *w)
    assert unknown.exit_code == 2 and "job 'alpha-9' is not in the warehouse" in unknown.output
    kept = cli("alerts", "keep", "alpha-1", "--hours", "2", "--as", "u", *w)
    assert kept.exit_code == 0, kept.output
    assert "kept until 2026-10-05 12:05 UTC" in kept.output and "(audited)" in kept.output
    with warehouse.open_reader(warehouse_file) as con:
        rows = con.execute("SELECT user_name, identity, choice, outcome FROM owner_choices ORDER BY rowid").fetchall()
    assert [(u, c, o) for u, _, c, o in rows] == [("v", "keep", "refused"), ("u", "keep", "refused"),
                                                  ("u", "keep", "granted")]
    assert all(i.startswith("cli (OS user ") for _, i, _, _ in rows)


@pytest.mark.slow
def test_an_exemption_request_reaches_on_call_and_a_release_waits_for_the_live_view(warehouse_file, tmp_path):
    _warehouse(warehouse_file, tmp_path)
    w = ["-w", str(warehouse_file), "--now", AT]
    asked = cli("alerts", "exemption", "alpha-1", "--as", "u", *w)
    assert asked.exit_code == 0 and "on-call decides" in asked.output
    with warehouse.open_reader(warehouse_file) as con:
        outbox = con.execute("SELECT kind, channel, subject FROM alert_outbox ORDER BY channel").fetchall()
    assert outbox == [("exemption", c, "exemption asked: job alpha-1 on c1 by its owner u")
                      for c in ("oncall-hook", "oncall-mail")]
    released = cli("alerts", "release", "alpha-1", "--as", "u", *w)
    assert released.exit_code == 0 and "the next enforcement cycle stops it" in released.output
    cfg = parse_config_text(CONFIG + ALERTS)
    now = datetime(2026, 10, 5, 10, 10)
    with warehouse.open_reader(warehouse_file) as con:
        situation = inputs.gather(con, cfg, now=now)
    assert situation.owner_choices[("c1", "alpha-1")].choice == "release"
    actions = [a for a in policy.decide(situation, cfg.policy.enforcement) if a.job_id == "alpha-1"]
    # no live view in this plan: nothing is preempted, and the none row says whose release waits
    assert [a.action for a in actions] == ["set-priority", "none"]
    assert "its owner u asked to release it at 2026-10-05 10:05Z, but the plan was made without" in actions[-1].reason


@pytest.mark.slow
def test_a_programs_allowance_is_shared_by_its_projects(warehouse_file, tmp_path):
    october(warehouse_file)
    (tmp_path / "c.yaml").write_text(CONFIG + ALERTS + "    self_service: {team_allowance_hours: {research: 3}}\n")
    assert cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(warehouse_file)).exit_code == 0
    w = ["-w", str(warehouse_file)]
    kept = cli("alerts", "keep", "alpha-1", "--hours", "2", "--as", "u", "--now", AT, *w)
    assert kept.exit_code == 0 and "counted against team research's 3 h per rolling 7 days" in kept.output
    # after that keep ended (12:05): 2 of research's 3 h are used, 1 h left
    again = cli("alerts", "keep", "alpha-1", "--hours", "2", "--as", "u", "--now", "2026-10-05T12:10:00", *w)
    assert again.exit_code == 2
    assert "team research's allowance is 3 h of kept sessions per rolling 7 days; 2 h are used (c1/alpha-1), " \
           "1 h left" in again.output
    assert cli("alerts", "keep", "alpha-1", "--hours", "1", "--as", "u", "--now", "2026-10-05T12:10:00",
               *w).exit_code == 0  # 1 h still fits
