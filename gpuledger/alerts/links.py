"""Signed links in an owner's squatting mail (issue 38): keep the session for N hours, release it
now, or ask for an exemption. Each link is an itsdangerous token (HMAC-SHA256, timed) naming the
job, its owner and the choice; `gpuledger alerts links serve` answers it (alerts.link_server) and
enforce.team_store records the choice, each link once.

The secret comes from ``$GPULEDGER_LINK_SECRET`` or ``link_secret`` in the secrets file
(``$GPULEDGER_SECRETS_FILE``), never from the config in git: without one, mails carry no links
and say to use the CLI instead."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlencode

import yaml

from gpuledger.channels import SECRETS_ENV
from gpuledger.errors import RunError

SECRET_ENV = "GPULEDGER_LINK_SECRET"
SALT = "gpuledger.owner-choice.v1"
MIN_SECRET = 16  # characters: a short secret is guessable


class BadLink(ValueError):
    """A link that cannot be honoured: tampered, expired, or not for this server. The message
    says which, for the owner."""


def secret() -> str | None:
    """The link secret, or None when none is configured."""
    if os.environ.get(SECRET_ENV):
        value = os.environ[SECRET_ENV]
    else:
        path = os.environ.get(SECRETS_ENV)
        if not path:
            return None

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise RunError(f"{SECRETS_ENV}={path}: cannot read it ({exc}); fix the file or unset it") from None
        value = data.get("link_secret") if isinstance(data, dict) else None
        if not value:
            return None
    if len(str(value)) < MIN_SECRET:
        raise RunError(f"${SECRET_ENV} (or link_secret in the secrets file) is shorter than {MIN_SECRET} characters: "
                       "use a long random string (e.g. `openssl rand -hex 32`)")
    return str(value)


def _serializer(key: str):
    from itsdangerous import URLSafeTimedSerializer  # lazy: optional extra gpuledger[alerts]

    return URLSafeTimedSerializer(key, salt=SALT)


def sign(choice: dict, key: str) -> str:
    """A token for ``choice``: {cluster, job_id, user, choice, hours}."""
    return _serializer(key).dumps(choice)


def verify(token: str, key: str, max_age_s: float) -> dict:
    """The choice a token names, or BadLink saying why it cannot be honoured."""
    from itsdangerous import BadSignature, SignatureExpired  # lazy: optional extra gpuledger[alerts]

    try:
        return _serializer(key).loads(token, max_age=max_age_s)
    except SignatureExpired:
        raise BadLink(f"this link expired (links are valid {max_age_s / 3600:g} h): use the newest alert, or "
                      "`gpuledger alerts keep JOB --hours H`") from None
    except BadSignature:
        raise BadLink("this link is not one gpuledger signed (altered or cut short): open it from the mail "
                      "as sent") from None


def links_for(cluster: str, job_id: str, user: str, policy, key: str | None) -> list[tuple[str, str]]:
    """(label, URL) of each choice an owner's mail offers; empty without an endpoint or a secret."""
    service = policy.self_service
    if not service.url or not key:
        return []
    base = service.url.rstrip("/")
    out = []
    for hours in service.keep_links_hours:
        token = sign({"cluster": cluster, "job_id": job_id, "user": user, "choice": "keep", "hours": hours}, key)
        out.append((f"Keep it {hours:g} h", f"{base}/choose?{urlencode({'t': token})}"))
    for choice, label in (("release", "Release it now (stop the job)"), ("exemption", "Ask for an exemption")):
        token = sign({"cluster": cluster, "job_id": job_id, "user": user, "choice": choice, "hours": None}, key)
        out.append((label, f"{base}/choose?{urlencode({'t': token})}"))
    return out


def mail_lines(cluster: str, job_id: str, user: str | None, policy, key: str | None) -> list[str]:
    """The owner mail's self-service paragraph: the links (signed with ``key``), or the CLI when
    there are none. ``policy``: config.AlertsPolicy."""
    service = policy.self_service
    links = links_for(cluster, job_id, user or "", policy, key) if user else []
    bounds = (f"a keep lasts {service.min_keep_hours:g}-{service.max_keep_hours:g} h and counts against your team's "
              "allowance of kept hours per rolling week")
    if not links:
        return ["Need it kept for a while (a meeting, a debugging session)? "
                f"`gpuledger alerts keep {job_id} --cluster {cluster} --hours 2` ({bounds})."]
    return ["Need it kept for a while, or done with it? Choose (each link works once; " + bounds + "):",
            *(f"    {label}: {url}" for label, url in links)]
