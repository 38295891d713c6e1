"""An owner answers a squatting alert (issue 38), end to end through the real receivers
(tests/helpers/alert_receivers.py: aiosmtpd) and the real link endpoint (`alerts links serve`'s
server on a local port):

* the owner's mail as received carries signed links (keep 1 / 2 / 4 h, release, exemption);
* opening "Keep it 2 h" shows what it does (a GET changes nothing); confirming it keeps the job
  2 h: enforcement plans no warning or preemption for it and the alert cycle sends no escalation
  until then, and both come back once the 2 h are over;
* the link acts once; a second keep beyond the team's allowance (3 h a week here) is refused
  with why; every answer is audited (owner_choices).

Times: alpha-1 (owner u, project alpha) idles since Oct 5 09:00; the alert goes at T0 = 10:00; the
owner confirms at 10:05, so the keep lasts to 12:05."""

from __future__ import annotations

import dataclasses
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from gpuledger.enforce import inputs, policy
from gpuledger.enforce.model import Finding

from gpuledger import warehouse
from gpuledger.alerts.cycle import run_alert_cycle
from gpuledger.alerts.self_service import make_server
from gpuledger.config import parse_config_text
from tests.alerts.test_alerts import ALERTS, T0, _episode
from tests.alerts.test_messages import _parts
from tests.helpers.alert_receivers import receivers_fixture, wait_for  # noqa: F401  (the receivers fixture)
from tests.helpers.prometheus_rig import free_port
from tests.helpers.statement_fixtures import CONFIG, october

IDLE_SINCE = T0 - 60 * timedelta(minutes=1)
SECRET = "a-long-random-test-link-secret-0123456789"
M = timedelta(minutes=1)


class Clock:
    """The endpoint's clock, set by the test (the data is October 2026's)."""

    def __init__(self, at):
        self.at = at

    def __call__(self):
        return self.at


def _links(mail) -> dict[str, str]:
    """label -> URL of the self-service links in a mail's plain-text part."""
    return dict(re.findall(r"^ {4}(.+?): (http://\S+)\r?$", _parts(mail)["text/plain"], re.M))


def _post(url: str) -> tuple[int, str]:
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["t"][0]
    base = url.split("/choose")[0]
    data = urllib.parse.urlencode({"t": token}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/choose", data=data), timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _plan_for(path, cfg, now) -> list:
    """Enforcement's decision for alpha-1 at ``now``: the situation as the warehouse gives it (the
    owner's choices included), with alpha-1's squatting finding past the last stage (this fixture
    has no GPU samples for the rules to find it from)."""
    with warehouse.open_reader(path) as con:
        situation = inputs.gather(con, cfg, now=now)
    idle = (now - IDLE_SINCE).total_seconds() / 60
    finding = Finding(cluster="c1", job_id="alpha-1", finding="squatting", severity="preempt-eligible",
                      idle_since=IDLE_SINCE, idle_minutes=idle, gpus_idle=1, gpus_total=1, gpu_hours_idle=idle / 60)
    actions = policy.decide(dataclasses.replace(situation, findings=[finding]), cfg.policy.enforcement)
    return [a for a in actions if a.job_id == "alpha-1"]


@pytest.mark.slow
def test_keep_two_hours_from_the_mail_delays_enforcement_once_and_the_allowance_refuses_more(
        warehouse_file, receivers, monkeypatch):
    hook, mails = receivers
    port = free_port()
    monkeypatch.setenv("GPULEDGER_LINK_SECRET", SECRET)
    cfg = parse_config_text(CONFIG + ALERTS + f"""
    self_service:
      url: http://127.0.0.1:{port}
      allowance_hours_per_week: 3
""")
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _episode(con, "warning")
    assert run_alert_cycle(warehouse_file, cfg.policy, now=T0).delivery.sent == 3
    wait_for(lambda: len(mails) == 2, "two e-mails")
    mine = next(m for m in mails if m["To"] == "owner-u@example.org")
    offered = _links(mine)
    assert list(offered) == ["Keep it 1 h", "Keep it 2 h", "Keep it 4 h", "Release it now (stop the job)",
                             "Ask for an exemption"], _parts(mine)["text/plain"]
    # the HTML part: each choice is its label, linked (the long signed URL stays out of the text)
    assert f'<li><a href="{offered["Keep it 2 h"]}">Keep it 2 h</a></li>' in _parts(mine)["text/html"]
    oncall = next(m for m in mails if m["To"] == "oncall@example.org")
    assert not _links(oncall)  # the links are the owner's alone

    clock = Clock(T0 + 5 * M)
    server = make_server(warehouse_file, cfg, SECRET, port=port, clock=clock)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        keep = offered["Keep it 2 h"]
        with urllib.request.urlopen(keep, timeout=30) as page:  # opening the link changes nothing
            shown = page.read().decode()
        assert "keep it running for 2 h" in shown and "<button type='submit'>Confirm</button>" in shown
        with warehouse.open_reader(warehouse_file) as con:
            assert con.execute("SELECT count(*) FROM owner_choices").fetchone()[0] == 0
        status, text = _post(keep)
        assert status == 200 and "kept until 2026-10-05 12:05 UTC" in text, text
        # once: the same link again is refused, saying when it was used
        status, text = _post(keep)
        assert status == 409 and "already used at 2026-10-05 10:05 UTC" in text, text

        # 11:00, preempt-eligible: enforcement leaves it alone, the alert cycle sends no escalation
        at = T0 + 60 * M
        with warehouse.open_writer(warehouse_file) as con:
            _episode(con, "preempt-eligible", at=at)
        during = _plan_for(warehouse_file, cfg, at)
        assert [a.action for a in during] == ["set-priority", "none"], [(a.action, a.reason) for a in during]
        assert "its owner u keeps it until 2026-10-05 12:05Z" in during[-1].reason
        assert run_alert_cycle(warehouse_file, cfg.policy, now=at).new == 0
        # 12:10, the keep is over: enforcement warns (a preemption needs a warning first) and the
        # escalated alert goes out
        at = T0 + 130 * M
        with warehouse.open_writer(warehouse_file) as con:
            _episode(con, "preempt-eligible", at=at)
        after = _plan_for(warehouse_file, cfg, at)
        assert "warn" in [a.action for a in after], [(a.action, a.reason) for a in after]
        assert run_alert_cycle(warehouse_file, cfg.policy, now=at).new == 3
        wait_for(lambda: len(mails) == 4, "four e-mails")

        # a second keep of 2 h from the new mail: 2 h used of the 3 h allowance -> refused with why
        newest = [m for m in mails if m["To"] == "owner-u@example.org"][-1]
        clock.at = at + 5 * M
        status, text = _post(_links(newest)["Keep it 2 h"])
        assert status == 409, text
        assert ("team alpha&#x27;s allowance is 3 h of kept sessions per rolling 7 days; 2 h are used (c1/alpha-1), "
                "1 h left, less than the 2 h asked. Ask for an exemption instead") in text, text
    finally:
        server.shutdown()
        server.server_close()
    with warehouse.open_reader(warehouse_file) as con:
        audit = con.execute("SELECT asked_at, user_name, identity, choice, hours, kept_until, outcome FROM "
                            "owner_choices ORDER BY asked_at, outcome").fetchall()
    kept_at, refused_at = T0 + 5 * M, T0 + 135 * M
    assert audit == [(kept_at, "u", "signed link", "keep", 2.0, T0 + 125 * M, "granted"),
                     (kept_at, "u", "signed link", "keep", 2.0, None, "refused"),
                     (refused_at, "u", "signed link", "keep", 2.0, None, "refused")]


def test_a_tampered_or_foreign_link_is_refused_and_records_nothing(warehouse_file, monkeypatch):
    from gpuledger.alerts import links

    cfg = parse_config_text(CONFIG + ALERTS)
    october(warehouse_file)
    token = links.sign({"cluster": "c1", "job_id": "alpha-1", "user": "u", "choice": "keep", "hours": 2}, SECRET)
    with pytest.raises(links.BadLink, match="not one gpuledger signed"):
        links.verify(token[:-2] + "xx", SECRET, 3600)
    with pytest.raises(links.BadLink, match="not one gpuledger signed"):
        links.verify(token, "another-secret-of-enough-length", 3600)
    server = make_server(warehouse_file, cfg, SECRET, port=0, clock=lambda: T0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        status, text = _post(f"http://127.0.0.1:{server.server_address[1]}/choose?t={token[:-2]}xx")
        assert status == 400 and "altered or cut short" in text
    finally:
        server.shutdown()
        server.server_close()
    with warehouse.open_writer(warehouse_file) as con:
        assert con.execute("SELECT count(*) FROM owner_choices").fetchone()[0] == 0
