"""Who gpuledger is to a Prometheus-compatible server: the tenant (``X-Scope-OrgID``: Mimir, Cortex,
a multi-tenant Thanos or VictoriaMetrics' vmauth) and a bearer token (``Authorization: Bearer``),
as HTTP headers for every query of a backfill or an aggregate, its worker processes included.

Where each comes from, first found wins (the command line and the environment override the config):

* tenant: ``--tenant`` / ``$GPULEDGER_PROMETHEUS_TENANT``, else ``sources.prometheus.tenant``;
* token: ``--bearer-token-file`` / ``$GPULEDGER_PROMETHEUS_BEARER_TOKEN_FILE``, else
  ``$GPULEDGER_PROMETHEUS_BEARER_TOKEN``, else ``sources.prometheus.bearer_token_file``, else the
  variable named by ``sources.prometheus.bearer_token_env``.

The token itself is never an option (it would show in ``ps``) nor a config key (the config's text is
kept in the warehouse's config versions)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from gpuledger.errors import UsageError

TENANT_ENV = "GPULEDGER_PROMETHEUS_TENANT"
TOKEN_ENV = "GPULEDGER_PROMETHEUS_BEARER_TOKEN"
TOKEN_FILE_ENV = "GPULEDGER_PROMETHEUS_BEARER_TOKEN_FILE"
_HEADER_VALUE = re.compile(r"^[\x21-\x7e]+(?: [\x21-\x7e]+)*$")  # visible ASCII, no CR / LF


def _checked(value: str, where: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise UsageError(f"{where}: the {what} is empty")
    if not _HEADER_VALUE.match(value):
        raise UsageError(f"{where}: the {what} has characters an HTTP header cannot carry "
                         "(only visible ASCII; no line breaks)")
    return value


def _read_token(path: str, where: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise UsageError(f"{where} {path}: cannot read the bearer token ({reason})") from None
    return _checked(text, f"{where} {path}", "bearer token")


def auth_headers(source=None, *, tenant: str | None = None, token_file: str | None = None,
                 environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers to send, from the option values given here (``tenant``, ``token_file``), the
    environment and ``source`` (a config ``PrometheusSource``, or None). UsageError naming the
    option / variable / config field when a named token cannot be read."""
    env = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    if tenant:
        chosen = (tenant, "--tenant")
    elif env.get(TENANT_ENV):
        chosen = (env[TENANT_ENV], f"${TENANT_ENV}")
    elif source is not None and source.tenant:
        chosen = (source.tenant, "sources.prometheus.tenant")
    else:
        chosen = None
    if chosen:
        headers["X-Scope-OrgID"] = _checked(chosen[0], chosen[1], "tenant")

    token = None
    if token_file:
        token = _read_token(token_file, "--bearer-token-file")
    elif env.get(TOKEN_FILE_ENV):
        token = _read_token(env[TOKEN_FILE_ENV], f"${TOKEN_FILE_ENV}")
    elif env.get(TOKEN_ENV):
        token = _checked(env[TOKEN_ENV], f"${TOKEN_ENV}", "bearer token")
    elif source is not None and source.bearer_token_file:
        token = _read_token(source.bearer_token_file, "sources.prometheus.bearer_token_file")
    elif source is not None and source.bearer_token_env:
        name = source.bearer_token_env
        if not env.get(name):
            raise UsageError(f"sources.prometheus.bearer_token_env: ${name} is not set (or empty); set it "
                             "to the token, or remove bearer_token_env from the config")
        token = _checked(env[name], f"${name} (sources.prometheus.bearer_token_env)", "bearer token")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def source_for(url: str, config) -> object | None:
    """``config.sources.prometheus`` when it names the server at ``url`` (its tenant and token are
    that server's: never sent to another), else None."""
    source = config.sources.prometheus if config is not None else None
    if source is None or source.url.strip().rstrip("/") != url.strip().rstrip("/"):
        return None
    return source
