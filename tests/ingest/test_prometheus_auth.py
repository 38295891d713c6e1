"""Tenant (X-Scope-OrgID) and bearer token for a Prometheus-compatible server (issue 20 §2, issue 24
§2): from the config's ``sources.prometheus`` (the token by file or environment variable, never in
the config's text), the options and environment overriding it; sent by the raw backfill's worker
processes and by the aggregate path. Against a real loopback HTTP server that refuses (401) any
request without both headers, like Mimir's gateway behind a token proxy."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.config import ConfigError, parse_config_text
from gpuledger.errors import UsageError
from gpuledger.ingest.metrics.prometheus.auth import auth_headers
from tests.ingest.test_prometheus_aggregate import START, _TSDB, stand_in  # noqa: F401 - the fixture

# a real stand-in server and the CLI in subprocesses (seconds each): the full suite, not test-fast
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ORG = "currency: USD\norg: {name: acme}\n"


def _config(tmp_path: Path, url: str, extra: str) -> Path:
    path = tmp_path / "gpuledger.yaml"
    path.write_text(f"{ORG}sources:\n  prometheus:\n    url: {url}\n{extra}")
    return path


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_PROMETHEUS_")}
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**clean, **(env or {})}, check=False)


def _backfill(url: str, tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return _cli("ingest", "prometheus", "--url", url, "--start", START.isoformat(), "--end",
                (START + timedelta(hours=1)).isoformat(), "--step", "300s", "--workers", "2",
                "--progress", "none", "--cluster", "sim", "-w", str(tmp_path / "w.duckdb"), *extra, env=env)


def test_the_raw_backfill_and_its_workers_send_the_configs_tenant_and_token(stand_in, tmp_path):  # noqa: F811
    (tmp_path / "token").write_text("s3cr3t-token\n")  # a mounted Secret ends in a newline
    config = _config(tmp_path, stand_in, f"    tenant: team-a\n    bearer_token_file: {tmp_path / 'token'}\n")
    _TSDB.prefix, _TSDB.required = "", {"X-Scope-OrgID": "team-a", "Authorization": "Bearer s3cr3t-token"}
    done = _backfill(stand_in, tmp_path, "--config", str(config))
    assert done.returncode == 0, done.stderr
    # discovery here, the chunk's query_range in a worker process: every request had both headers
    assert {p for p, _ in _TSDB.seen} == {"/api/v1/label/__name__/values", "/api/v1/query_range"}
    assert set(_TSDB.tokens) == {"Bearer s3cr3t-token"} and {t for _, t in _TSDB.seen} == {"team-a"}
    with warehouse.open_reader(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 1  # the one point served


def test_the_options_and_environment_override_the_config(stand_in, tmp_path):  # noqa: F811
    config = _config(tmp_path, stand_in, "    tenant: team-a\n    bearer_token_env: SITE_PROM_TOKEN\n")
    _TSDB.prefix, _TSDB.required = "", {"X-Scope-OrgID": "team-b", "Authorization": "Bearer from-env"}
    done = _backfill(stand_in, tmp_path, "--config", str(config), "--aggregate", "5m",
                     env={"GPULEDGER_PROMETHEUS_TENANT": "team-b", "GPULEDGER_PROMETHEUS_BEARER_TOKEN": "from-env",
                          "SITE_PROM_TOKEN": "not-this-one"})
    assert done.returncode == 0, done.stderr
    assert {t for _, t in _TSDB.seen} == {"team-b"} and set(_TSDB.tokens) == {"Bearer from-env"}


def test_without_the_headers_the_server_refuses_and_the_run_fails(stand_in, tmp_path):  # noqa: F811
    # the config names another server: its tenant is not sent here (nor would its token be)
    config = _config(tmp_path, "http://prometheus.other:9090", "    tenant: team-a\n")
    _TSDB.prefix, _TSDB.required = "", {"X-Scope-OrgID": "team-a"}
    done = _backfill(stand_in, tmp_path, "--config", str(config))
    assert done.returncode == 1 and "401" in done.stderr and "Traceback" not in done.stderr
    assert {t for _, t in _TSDB.seen} == {None}


def test_a_token_in_the_config_text_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"sources\.prometheus.*`bearer_token`.*bearer_token_file.*bearer_token_env"):
        parse_config_text(f"{ORG}sources:\n  prometheus: {{url: 'http://p:9090', bearer_token: abc}}\n")


def test_an_unreadable_or_unset_token_names_where_it_was_looked_for(tmp_path):
    source = parse_config_text(f"{ORG}sources:\n  prometheus: {{url: 'http://p:9090', "
                               f"bearer_token_file: '{tmp_path / 'absent'}'}}\n").sources.prometheus
    with pytest.raises(UsageError, match=r"sources\.prometheus\.bearer_token_file .*absent: cannot read"):
        auth_headers(source, environ={})
    source = parse_config_text(f"{ORG}sources:\n  prometheus: {{url: 'http://p:9090', "
                               "bearer_token_env: SITE_TOKEN}\n").sources.prometheus
    with pytest.raises(UsageError, match=r"\$SITE_TOKEN is not set"):
        auth_headers(source, environ={})
    with pytest.raises(UsageError, match=r"\$GPULEDGER_PROMETHEUS_BEARER_TOKEN: .*HTTP header"):
        auth_headers(None, environ={"GPULEDGER_PROMETHEUS_BEARER_TOKEN": "a\r\nX-Evil: 1"})
    assert auth_headers(None, environ={}) == {}  # nothing configured: no headers at all


def test_the_cli_says_one_line_and_exits_2_for_an_unreadable_token_file(tmp_path):
    done = _backfill("http://127.0.0.1:9", tmp_path, "--bearer-token-file", str(tmp_path / "absent"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("gpuledger: --bearer-token-file ")
