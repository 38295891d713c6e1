"""Where alerts and finance statements go: named channels whose URLs (apprise URLs, credentials
included) come from the environment or a secrets file, never from the config in git; and the one
small interface a notifier has. Below both gpuledger.alerts and gpuledger.reports (the statement's
e-mail), which share it.

* ``$GPULEDGER_ALERT_<NAME>_URL`` (NAME upper-cased, other characters as ``_``), else
* ``$GPULEDGER_SECRETS_FILE``: YAML ``channels: {name: url}``.

Channel types, chosen by the URL's scheme; each receives the alert's structure, not only text:

* ``mailto://[user:password@]host[:port]?from=...&to=...[&mode=insecure|starttls|ssl]`` (SMTP,
  ``mailtos://`` = ssl): an e-mail with a plain-text and an HTML part that keep the lines, lists
  and the dashboard link; urgent severities marked ``Importance: high`` / ``X-Priority: 1``.
* ``json://host:port/path`` (``jsons://`` over https): the versioned JSON below, POSTed.
* ``slack+https://hooks.slack.com/services/...`` (``slack+http://`` for a local receiver): Slack
  Block Kit (header, the same fields, the link) with a ``text`` fallback.
* anything else apprise delivers (``mmost://host:port/token``: Slack-compatible ``{"text"}``),
  with the severity as apprise's notify type (info / warning / failure).

The JSON webhook body, schema ``gpuledger.alert`` version 1 (docs: README "Alerts")::

    {"schema": "gpuledger.alert", "version": 1, "id": <idempotency key>, "kind": "squatting" |
     "digest" | "budget" | "preempted" | "statement" | "message", "severity": <gpuledger severity or null>,
     "level": "info" | "warning" | "critical", "title": <subject>, "message": <plain text>,
     "link": <dashboard URL or null>, "fields": {<the alert's structured fields: job_id, cluster,
     project, owner, severity, gpus_idle, gpus_total, idle_since, gpu_hours_idle, idle_cost, currency, next,
     dashboard for squatting; node, level, consumed_pct, projected_exhaustion, dashboard for
     budgets; project, day, findings, gpu_hours_idle for digests; job_id, name, cluster, project,
     owner, preempted_at, mode, rule, reason, gpus, gpu_model, gpu_hours_held for a preempted job>}}

New fields may be added within a version; a field's meaning or type changes only with a new version.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import os
import re
import smtplib
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from html import escape
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
import yaml

from gpuledger.deadlines import ALERTS, CallDeadline, why_unreachable
from gpuledger.errors import RunError, debug_wanted, printable
from gpuledger.extras import require
from gpuledger.ingest.http_get import OutOfTime, TooLarge, get_within
from gpuledger.rules.clock import iso_z

SECRETS_ENV = "GPULEDGER_SECRETS_FILE"


def channel_env(name: str) -> str:
    return f"GPULEDGER_ALERT_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}_URL"


def channel_url(name: str) -> str:
    """The URL of channel ``name``, or a RunError naming where to put it."""
    env = channel_env(name)
    if os.environ.get(env):
        return os.environ[env]
    secrets = os.environ.get(SECRETS_ENV)
    if secrets:
        path = Path(secrets)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            mark = getattr(exc, "problem_mark", None)  # one line: file:line:column and the problem
            where = f"{secrets}:{mark.line + 1}:{mark.column + 1}" if mark else secrets
            problem = getattr(exc, "problem", None) or getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise RunError(f"{SECRETS_ENV}={where}: cannot read it ({problem}); fix the file or unset it") from None
        url = (data.get("channels") or {}).get(name) if isinstance(data, dict) else None
        if url:
            return str(url)
    raise RunError(f"alert channel {name!r} has no URL: set ${env} or add it under `channels:` in the secrets "
                   f"file ${SECRETS_ENV}")


def with_recipient(url: str, address: str) -> str:
    """A mailto channel URL sending to ``address`` instead of its own ``to=``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "to"]
    query.append(("to", address))
    return urlunsplit(parts._replace(query=urlencode(query)))


def with_timeouts(url: str, deadline: CallDeadline) -> str:
    """``url`` with apprise's connect / read timeouts (``cto`` / ``rto``) unless it sets its own."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = {k for k, _ in query}
    query += [(k, f"{v:g}") for k, v in (("cto", deadline.connect_s), ("rto", deadline.read_s)) if k not in given]
    return urlunsplit(parts._replace(query=urlencode(query)))


class DeliveryError(RuntimeError):
    """The receiver did not take the message (down, refused); the outbox retries it. The text is
    one line of ours (the endpoint, what happened, what to do); the library's own words
    (``library``) are added only with --debug / $GPULEDGER_DEBUG."""

    def __init__(self, message: str, *, library: str | None = None) -> None:
        if library and debug_wanted():
            message = f"{message} [library: {' '.join(library.split())[:300]}]"
        super().__init__(message)


_RETRIED = "the outbox retries it"


SCHEMA, SCHEMA_VERSION = "gpuledger.alert", 1
# gpuledger severity -> the level every channel type maps to its own types
LEVELS = {"info": "info", "warning": "warning", "second-warning": "warning", "preempt-eligible": "critical",
          "80": "warning", "100": "critical", "exhaustion": "critical", "preempted": "warning"}


@dataclass
class Message:
    """One alert or report as every channel receives it: the subject, the body's lines (a line
    ``- ...`` is a list item, ``label: value`` a field), and the structured fields."""

    subject: str
    body: str
    kind: str = "message"
    severity: str | None = None
    key: str | None = None
    fields: dict = field(default_factory=dict)
    attachments: list[Path] = field(default_factory=list)

    @property
    def level(self) -> str:
        return LEVELS.get(str(self.severity), "info")

    @property
    def link(self) -> str | None:
        return self.fields.get("dashboard")

    @property
    def text(self) -> str:
        return self.body + (f"\n\n(alert id {self.key})" if self.key else "")

    def html(self) -> str:
        """The body as HTML: paragraphs, lists and links kept (escaped; no script, no remote part)."""
        out = [f"<h3>{escape(self.subject)}</h3>"]
        items: list[str] = []

        def flush():
            if items:
                out.append("<ul>" + "".join(items) + "</ul>")
                items.clear()

        for line in self.body.splitlines():
            if not line.strip():
                flush()
                continue
            choice = re.fullmatch(r" {2,}([^:]{1,60}): (https?://\S+)", line)
            if choice:  # an indented "label: URL" (an owner's self-service links): the label is the link
                items.append(f'<li><a href="{escape(choice[2])}">{escape(choice[1])}</a></li>')
                continue
            shown = escape(line)
            for url in re.findall(r"https?://\S+", line):
                shown = shown.replace(escape(url), f'<a href="{escape(url)}">{escape(url)}</a>')
            if line.startswith(("- ", "  ")):
                items.append(f"<li>{shown[2:] if line.startswith('- ') else shown}</li>")
            else:
                flush()
                label, sep, _ = line.partition(": ")
                if sep and len(label) <= 24 and " " not in label.strip():
                    shown = f"<b>{escape(label)}:</b> {shown[len(escape(label)) + 2:]}"
                out.append(f"<p>{shown}</p>")
        flush()
        if self.key:
            out.append(f'<p style="color:#777">alert id {escape(self.key)}</p>')
        return "<html><body>" + "\n".join(out) + "</body></html>"

    def json_body(self) -> dict:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "id": self.key, "kind": self.kind,
                "severity": self.severity, "level": self.level, "title": self.subject, "message": self.text,
                "link": self.link, "fields": plain_fields(self.fields)}

    def slack_blocks(self) -> list[dict]:
        """Block Kit: a header, the fields as a section (the same fields as the JSON), the body, the link."""
        icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(self.level, ":information_source:")
        blocks = [{"type": "header", "text": {"type": "plain_text", "text": f"{self.subject}"[:150]}}]
        shown = slack_fields(self.fields)
        if shown:
            blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"}
                                                         for k, v in shown[:10]]})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"{icon} {self.body}"[:3000]}})
        if self.link:
            blocks.append({"type": "actions", "elements": [{"type": "button", "text": {
                "type": "plain_text", "text": "Open in gpuledger"}, "url": self.link}]})
        if self.key:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"alert id {self.key}"}]})
        return blocks


#: Slack shows ten fields: the ones a reader needs first, in this order, under their words (the
#: JSON body keeps every field under its machine name)
SLACK_FIELDS = (("name", "job"), ("job_id", "id"), ("project", "project"), ("severity", "severity"),
                ("owner", "owner"), ("node", "budget node"), ("level", "threshold"),
                ("consumed_pct", "consumed"), ("projected_exhaustion", "runs out"), ("gpus_idle", "GPUs idle"),
                ("gpus_total", "GPUs held"), ("idle_cost", "idle cost"), ("gpu_hours_idle", "idle GPU-hours"),
                ("idle_since", "idle since"), ("mode", "preempted as"), ("gpu_hours_held", "GPU-hours held"),
                ("preempted_at", "preempted at"), ("cluster", "cluster"), ("hosts", "host"),
                ("gpu_model", "GPU model"), ("next", "next"), ("day", "day"), ("findings", "findings"))


def slack_fields(fields: dict) -> list[tuple[str, str]]:
    """(label, value as people read it) of the fields, most important first: money with its
    currency, hours and ratios rounded, times in UTC words."""
    out = []
    for key, label in SLACK_FIELDS:
        value = fields.get(key)
        if value in (None, "") or (key == "name" and value == fields.get("job_id")):
            continue
        if key == "idle_cost" and fields.get("currency"):
            text = f"{value} {fields['currency']}"
        elif key == "consumed_pct":
            text = f"{float(value):,.1f} %"
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, int):
            text = f"{value:,}"
        elif isinstance(value, float):
            text = f"{value:,.2f}"
        elif isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?Z?", value):
            text = value[:16].replace("T", " ") + " UTC"
        elif hasattr(value, "strftime"):
            text = value.strftime("%Y-%m-%d %H:%M UTC")
        else:
            text = str(value)
        out.append((label, text))
    return out


def plain_fields(fields: dict) -> dict:
    def one(v):
        if isinstance(v, datetime):
            return iso_z(v)
        if isinstance(v, date):
            return v.isoformat()
        if isinstance(v, Decimal):
            return str(v)
        return v

    return {k: one(v) for k, v in fields.items()}


class Notifier(Protocol):
    def deliver(self, message: Message) -> None:
        """Deliver one message or raise DeliveryError."""


class _Sends:
    """``send(subject, body, attachments=)``: a plain message, for callers without structure."""

    def send(self, subject: str, body: str, *, attachments: list[Path] | None = None) -> None:
        self.deliver(Message(subject=subject, body=body, attachments=list(attachments or [])))

    def redacted(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}"


@dataclass
class AppriseNotifier(_Sends):
    """A notifier over one apprise URL (text; the level as apprise's notify type)."""

    url: str
    deadline: CallDeadline = ALERTS  # a receiver that never answers fails this try; the outbox retries

    def deliver(self, message: Message) -> None:
        apprise = require("apprise")
        ap = apprise.Apprise()
        if not ap.add(with_timeouts(self.url, self.deadline)):
            raise DeliveryError(f"apprise does not understand the channel URL {self.redacted()}")
        attach = apprise.AppriseAttachment([str(p) for p in message.attachments]) if message.attachments else None
        kind = {"critical": apprise.NotifyType.FAILURE, "warning": apprise.NotifyType.WARNING}.get(
            message.level, apprise.NotifyType.INFO)
        with apprise.LogCapture(level=apprise.logging.WARNING) as log:
            ok = ap.notify(body=message.text, title=message.subject, attach=attach, notify_type=kind,
                           timeout=self.deadline.total_s)
        if not ok:  # apprise's log says why in its words: ours, and its only with --debug
            raise DeliveryError(
                f"{self.redacted()}: not delivered (the receiver refused it, is down, or did not answer within "
                f"{self.deadline.total_s:g} s); check that it is up and the channel URL (its token or "
                f"password), {_RETRIED}", library=log.getvalue() or None)


@dataclass
class JsonWebhook(_Sends):
    """``json://`` / ``jsons://``: the versioned gpuledger.alert JSON POSTed."""

    url: str
    deadline: CallDeadline = ALERTS

    def deliver(self, message: Message) -> None:
        _post(self, self.url.replace("jsons://", "https://", 1).replace("json://", "http://", 1), message.json_body())


@dataclass
class SlackWebhook(_Sends):
    """``slack+https://`` / ``slack+http://``: Slack Block Kit with a text fallback."""

    url: str
    deadline: CallDeadline = ALERTS

    def deliver(self, message: Message) -> None:
        answer = _post(self, self.url.split("+", 1)[1], {"text": f"{message.subject}\n{message.text}",
                                                          "blocks": message.slack_blocks()})
        refused = _slack_refusal(answer)
        if refused is not None:
            raise DeliveryError(f"{self.redacted()}: not delivered (it answered HTTP 200 with ok: false, {refused}); "
                                f"check the channel URL and the Slack app's permissions, {_RETRIED}")


def _slack_refusal(answer: bytes) -> str | None:
    """Why Slack refused a message it answered 200 for, else None. Incoming webhooks answer "ok";
    Slack's Web API and some relays answer HTTP 200 with {"ok": false, "error": "..."}."""
    try:
        doc = json.loads(answer)
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("ok") is False:
        return f"error {printable(str(doc.get('error') or 'unnamed'), 80)!r}"
    return None


def _post(notifier, target: str, body: dict) -> bytes:
    limits = notifier.deadline
    try:  # the whole exchange within the deadline (total_s): a receiver that trickles its answer ends too
        status, _, answer = get_within(None, target, method="POST", json=body, deadline=limits,
                                  give_up=time.monotonic() + limits.total_s, max_bytes=2**20)
    except OutOfTime as exc:
        raise DeliveryError(f"{notifier.redacted()}: not delivered (no complete answer within {limits.total_s:g} s); "
                            f"check the receiver, {_RETRIED}", library=repr(exc)) from None
    except TooLarge as exc:
        raise DeliveryError(f"{notifier.redacted()}: not delivered (its answer is over 1 MiB: is the URL the "
                            f"webhook's?); check the channel URL, {_RETRIED}", library=repr(exc)) from None
    except (requests.RequestException, OSError) as exc:
        raise DeliveryError(f"{notifier.redacted()}: not delivered ({why_unreachable(exc, limits)}); check "
                            f"that the receiver is up and the channel URL, {_RETRIED}", library=repr(exc)) from None
    if status >= 300:
        raise DeliveryError(f"{notifier.redacted()}: not delivered (it answered HTTP {status}); check the "
                            f"channel URL and the receiver's log, {_RETRIED}")
    return answer


@dataclass
class SmtpNotifier(_Sends):
    """``mailto://`` / ``mailtos://``: one e-mail, plain text and HTML alternatives, attachments."""

    url: str
    deadline: CallDeadline = ALERTS

    def deliver(self, message: Message) -> None:
        parts = urlsplit(self.url)
        query = dict(parse_qsl(parts.query))
        mode = query.get("mode") or ("ssl" if parts.scheme == "mailtos" else
                                     "insecure" if query.get("secure") == "no" else "starttls")
        sender = query.get("from") or (f"{parts.username}@{parts.hostname}" if parts.username else "gpuledger@localhost")
        to = [a.strip() for a in query.get("to", "").split(",") if a.strip()]
        if not to:
            raise DeliveryError(f"{self.redacted()}: the mailto URL names no recipient (to=)")
        mail = EmailMessage()
        mail["Subject"], mail["From"], mail["To"] = message.subject, sender, ", ".join(to)
        mail["Date"], mail["Message-ID"] = formatdate(usegmt=True), make_msgid(domain="gpuledger")
        if message.key:
            mail["X-Gpuledger-Alert-Id"] = message.key
        if message.level == "critical":
            mail["Importance"], mail["X-Priority"] = "high", "1"
        mail.set_content(message.text)
        mail.add_alternative(message.html(), subtype="html")
        for path in message.attachments:
            kind = (mimetypes.guess_type(path.name)[0] or "application/octet-stream").split("/", 1)
            mail.add_attachment(path.read_bytes(), maintype=kind[0], subtype=kind[1], filename=path.name)
        port = parts.port or {"ssl": 465, "starttls": 587}.get(mode, 25)
        limits = self.deadline
        # connect_s to connect; read_s for each answer; total_s for the whole exchange: a server that
        # trickles its answers byte by byte never trips a socket timeout, so a watchdog cuts the
        # connection when the total is spent
        smtp = (smtplib.SMTP_SSL if mode == "ssl" else smtplib.SMTP)(timeout=limits.connect_s)  # no host: not yet connected
        out_of_time = threading.Event()

        def cut() -> None:
            out_of_time.set()
            sock = smtp.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(limits.total_s, cut)
        watchdog.daemon = True
        watchdog.start()
        connected = False
        try:
            smtp.connect(parts.hostname, port)  # and its greeting, within connect_s
            smtp.sock.settimeout(limits.read_s)
            connected = True
            if mode == "starttls":
                smtp.starttls()
            if parts.username:
                smtp.login(parts.username, parts.password or "")
            smtp.send_message(mail)
            with contextlib.suppress(OSError, smtplib.SMTPException):
                smtp.quit()  # sent: a server that drops the connection at QUIT does not unsend it
        except (OSError, smtplib.SMTPException) as exc:
            why = ("the exchange took longer than the {0:g} s allowed".format(limits.total_s) if out_of_time.is_set()
                   else _smtp_problem(exc, limits.read_s if connected else limits.connect_s))
            raise DeliveryError(f"{self.redacted()}: not delivered ({why}); {_smtp_fix(exc)}, {_RETRIED}",
                                library=f"{type(exc).__name__}: {exc}") from None
        finally:
            watchdog.cancel()
            smtp.close()


def _smtp_problem(exc: BaseException, wait_s: float) -> str:
    """A few words for an SMTP failure, never smtplib's own text (``wait_s``: the timeout in force)."""
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):  # smtplib wraps a timeout in a disconnect
        return f"no answer within {wait_s:g} s"
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return f"the server refused the login ({exc.smtp_code})"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return f"the server refused the recipient(s) {', '.join(exc.recipients)}"
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return f"the server refused the sender {exc.sender}"
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        return "the server does not offer what the URL asks (STARTTLS or login)"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"the server answered {exc.smtp_code}"
    if isinstance(exc, smtplib.SMTPServerDisconnected | smtplib.SMTPConnectError):
        return "the server closed the connection or does not speak SMTP"
    return why_unreachable(exc, CallDeadline(wait_s, wait_s, max(wait_s, 1.0)))


def _smtp_fix(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return "check the user and password in the channel URL"
    if isinstance(exc, smtplib.SMTPRecipientsRefused | smtplib.SMTPSenderRefused):
        return "check the channel URL's from= / to= addresses"
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        return "set the channel URL's mode= (ssl, starttls or insecure) to what the server offers"
    return "check that the mail server is up and the channel URL's host, port and mode="


def notifier_for(channel: str, recipient: str | None = None) -> Notifier:
    url = channel_url(channel)
    url = with_recipient(url, recipient) if recipient else url
    scheme = urlsplit(url).scheme
    if scheme in ("mailto", "mailtos"):
        return SmtpNotifier(url)
    if scheme in ("json", "jsons"):
        return JsonWebhook(url)
    if scheme.startswith("slack+"):
        return SlackWebhook(url)
    return AppriseNotifier(url)
