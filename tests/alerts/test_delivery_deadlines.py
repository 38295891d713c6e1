"""Alert delivery never hangs on a receiver: a webhook or SMTP server that accepts and never answers,
or trickles its answer, fails the try (DeliveryError, which the outbox retries) within the
notifier's deadline. Real apprise against real loopback sockets."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("apprise")

from gpuledger.channels import AppriseNotifier, DeliveryError, JsonWebhook, SmtpNotifier, with_timeouts
from gpuledger.deadlines import CallDeadline
from tests.helpers.hostile_servers import GREET_TRICKLE, SILENT, TRICKLE, HostileServer
from tests.helpers.timing import LOAD_SLACK_S

# real servers and receivers held to wall-clock deadlines (seconds each): the full suite, not test-fast
pytestmark = pytest.mark.slow

QUICK = CallDeadline(connect_s=1, read_s=1, total_s=2)


MAIL = "?from=gpuledger@example.org&to=oncall@example.org&secure=no&mode=insecure"
NOTIFIERS = {  # gpuledger's own JSON webhook and SMTP, and apprise for the other schemes
    "json": lambda port: JsonWebhook(f"json://127.0.0.1:{port}/hook", QUICK),
    "mailto": lambda port: SmtpNotifier(f"mailto://127.0.0.1:{port}{MAIL}", QUICK),
    "apprise-json": lambda port: AppriseNotifier(f"json://127.0.0.1:{port}/hook", QUICK),
    "apprise-mailto": lambda port: AppriseNotifier(f"mailto://127.0.0.1:{port}{MAIL}", QUICK),
}


@pytest.mark.parametrize("misbehaviour", [SILENT, TRICKLE])
@pytest.mark.parametrize("kind", list(NOTIFIERS))
def test_a_receiver_that_never_answers_fails_the_try_within_the_deadline(misbehaviour, kind):
    with HostileServer(misbehaviour) as server:
        began = time.monotonic()
        with pytest.raises(DeliveryError) as raised:
            NOTIFIERS[kind](server.port).send("squatting on node-007", "4 GPUs idle for 2 h")
        took = time.monotonic() - began
    assert f"127.0.0.1:{server.port}: not delivered" in str(raised.value)
    # apprise's call limit (2 s) or its socket timeouts (1 s) end it; without them a trickling
    # webhook held the cycle for apprise's 60 s service limit
    assert took < QUICK.total_s + LOAD_SLACK_S, took


def test_a_channel_urls_own_timeouts_win():
    assert with_timeouts("json://h:1/x?rto=30", QUICK) == "json://h:1/x?rto=30&cto=1"
    assert with_timeouts("json://h:1/x", QUICK) == "json://h:1/x?cto=1&rto=1"


def test_a_secrets_file_that_is_not_yaml_is_one_line_with_its_place(tmp_path, monkeypatch):
    from gpuledger.channels import SECRETS_ENV, channel_url
    from gpuledger.errors import RunError

    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("channels:\n  oncall: [unclosed\n  x: y\n")
    monkeypatch.setenv(SECRETS_ENV, str(secrets))
    with pytest.raises(RunError) as raised:
        channel_url("oncall")
    assert str(raised.value) == (f"{SECRETS_ENV}={secrets}:3:4: cannot read it (expected ',' or ']', but got "
                                 "':'); fix the file or unset it")


def test_an_smtp_server_that_trickles_its_greeting_is_cut_at_the_total_deadline(monkeypatch):
    """One byte every 50 ms never trips the 1 s read timeout; the 2 s total does. The line is ours
    (the endpoint, what happened, what to do); smtplib's words only with --debug."""
    monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
    with HostileServer(GREET_TRICKLE) as server:
        began = time.monotonic()
        with pytest.raises(DeliveryError) as raised:
            NOTIFIERS["mailto"](server.port).send("squatting on node-007", "4 GPUs idle for 2 h")
        took = time.monotonic() - began
    assert str(raised.value) == (
        f"mailto://127.0.0.1:{server.port}: not delivered (the exchange took longer than the 2 s allowed); "
        "check that the mail server is up and the channel URL's host, port and mode=, the outbox retries it")
    assert QUICK.total_s <= took < QUICK.total_s + LOAD_SLACK_S, took  # without the watchdog: smtplib's 8 KiB line, ~7 min


@pytest.mark.parametrize("kind", ["json", "apprise-json", "mailto"])
def test_the_delivery_line_is_ours_and_the_library_text_only_with_debug(kind, monkeypatch):
    with HostileServer(SILENT) as server:
        monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
        with pytest.raises(DeliveryError) as plain:
            NOTIFIERS[kind](server.port).send("s", "b")
        monkeypatch.setenv("GPULEDGER_DEBUG", "1")
        with pytest.raises(DeliveryError) as debug:
            NOTIFIERS[kind](server.port).send("s", "b")
    line = str(plain.value)
    assert line.count("\n") == 0 and "the outbox retries it" in line and "check" in line, line
    for library_word in ("Traceback", "Error", "apprise", "Timeout", "timed out", "HTTPConnectionPool"):
        assert library_word not in line, line
    assert str(debug.value).startswith(line) and "[library: " in str(debug.value), str(debug.value)


@pytest.mark.parametrize("answer,delivered", [(b'{"ok": false, "error": "channel_not_found"}', False),
                                              (b"ok", True), (b'{"ok": true}', True)])
def test_a_slack_receiver_answering_ok_false_is_not_counted_as_sent(answer, delivered):
    from gpuledger.channels import SlackWebhook
    from tests.helpers.hostile_servers import http_answer

    with HostileServer(lambda _l, _r: http_answer(answer.decode(), content_type="application/json")) as server:
        slack = SlackWebhook(f"slack+http://127.0.0.1:{server.port}/services/T/B/X", QUICK)
        if delivered:
            slack.send("squatting on node-007", "4 GPUs idle for 2 h")
            return
        with pytest.raises(DeliveryError) as raised:
            slack.send("squatting on node-007", "4 GPUs idle for 2 h")
    assert "not delivered (it answered HTTP 200 with ok: false, error 'channel_not_found')" in str(raised.value)
