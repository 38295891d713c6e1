"""Where alerts go: named channels whose URLs (apprise URLs, credentials included) come from the
environment or a secrets file, never from the config in git; and the one small interface a
notifier has.

* ``$GPULEDGER_ALERT_<NAME>_URL`` (NAME upper-cased, other characters as ``_``), else
* ``$GPULEDGER_SECRETS_FILE``: YAML ``channels: {name: url}``.

URL forms apprise delivers (checked offline, ../shared/notes/verified-apis.md): ``json://host:port/path``
(a generic JSON webhook), ``mmost://host:port/token`` (Slack-compatible ``{"text": ...}`` posted to
``/hooks/<token>``), ``mailto://host:port?from=...&to=...`` (SMTP; ``user:password@`` for auth).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from gpuledger.deadlines import ALERTS, CallDeadline
from gpuledger.errors import RunError

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
        import yaml

        path = Path(secrets)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise RunError(f"{SECRETS_ENV}={secrets}: cannot read it ({exc}); fix the file or unset it") from None
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
    """The receiver did not take the message (down, refused); the outbox retries it."""


class Notifier(Protocol):
    def send(self, subject: str, body: str, *, attachments: list[Path] | None = None) -> None:
        """Deliver one message or raise DeliveryError."""


@dataclass
class AppriseNotifier:
    """A notifier over one apprise URL."""

    url: str
    deadline: CallDeadline = ALERTS  # a receiver that never answers fails this try; the outbox retries

    def send(self, subject: str, body: str, *, attachments: list[Path] | None = None) -> None:
        from gpuledger.extras import require

        apprise = require("apprise")
        ap = apprise.Apprise()
        if not ap.add(with_timeouts(self.url, self.deadline)):
            raise DeliveryError(f"apprise does not understand the channel URL {self.redacted()}")
        attach = apprise.AppriseAttachment([str(p) for p in attachments]) if attachments else None
        with apprise.LogCapture(level=apprise.logging.WARNING) as log:
            ok = ap.notify(body=body, title=subject, attach=attach, timeout=self.deadline.total_s)
        if not ok:
            detail = " ".join(log.getvalue().split())[-300:] or "no detail"
            raise DeliveryError(f"{self.redacted()}: not delivered ({detail})")

    def redacted(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}"


def notifier_for(channel: str, recipient: str | None = None) -> Notifier:
    url = channel_url(channel)
    return AppriseNotifier(with_recipient(url, recipient) if recipient else url)
