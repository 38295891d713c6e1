"""The warehouse's stored config — the reader, and the policy in force — low enough for every layer.

The warehouse, not the working folder, holds the config a command uses (numbered versions in
``config_versions``, written only by ``gpuledger.ledger.config_versions.load_version``: ``config
load`` and the pipelines' reference tables). This module only reads: ingest (pricing tiers, job
limits), analytics callers, the ledger, the finance files, alerts, metrics and the dashboards ask
it, and it imports nothing of theirs.

"The policy in force" is :func:`policy_in_force`: an explicit policy, else the stored config's,
else, for a warehouse never given a config, the file the CLI's readers take then (the same answer
as ledger.config_versions.config_in_force). A stored config that no longer validates is an error
naming its version, never a silent fall back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from gpuledger.warehouse.engine import duckdb
from gpuledger.warehouse.snapshot import reader_memo

from gpuledger.config_files import resolve_config_path

if TYPE_CHECKING:  # pydantic's models: imported when a config is validated, not to read the table
    from gpuledger.config import Config, Policy

_COLUMNS = ("version", "content_sha256", "source_path", "loaded_at", "loaded_by", "content_text")


@dataclass(frozen=True)
class StoredConfig:
    version: int
    content_sha256: str
    source_path: str
    loaded_at: datetime
    loaded_by: str
    content_text: str
    content_json: str | None = None  # migration 017: the validated content, canonical JSON

    @cached_property
    def config(self) -> Config:
        """The validated config; each content is parsed once per process (a version never
        changes): the CLI's read and the facts' "is this the policy in force" share one parse."""
        # lazy: reading the stored config needs no pydantic or polars; validating it does
        from gpuledger.config import parse_config_text

        if self.content_sha256 not in _CONFIG_BY_SHA:
            _CONFIG_BY_SHA[self.content_sha256] = parse_config_text(
                self.content_text, f"warehouse config version {self.version}")
        return _CONFIG_BY_SHA[self.content_sha256]

    def setting(self, path: str):
        """One setting by its dotted path (``policy.usage.mode``), defaults included: from the
        stored canonical JSON when the version has it (no validation: it was validated when
        loaded; a read that uses the policy validates it whole), else from the validated config."""
        if self.content_json is not None:
            value = json.loads(self.content_json)
            try:
                for key in path.split("."):
                    value = value[key]
                return value
            except (KeyError, TypeError):
                pass  # a key this release added after the version was stored: validate for its default
        value = self.config
        for key in path.split("."):
            value = getattr(value, key)
        return value

    def describe(self) -> str:
        return (f"config version {self.version} (sha256 {self.content_sha256[:12]}, loaded from "
                f"{self.source_path} at {self.loaded_at:%Y-%m-%d %H:%M} UTC by {self.loaded_by})")


def _has_table(con: duckdb.DuckDBPyConnection) -> bool:
    # duckdb_tables(), not information_schema (~5 ms more a query, on every read command's path)
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'config_versions'"
    ).fetchall()[0][0])


def stored_config(con: duckdb.DuckDBPyConnection, version: int | None = None) -> StoredConfig | None:
    """The latest config version (or ``version``); None for a warehouse never given a config.
    Read once per open_reader connection (gpuledger.warehouse.snapshot), whose file has the table."""
    memo = reader_memo(con)
    if memo is None:
        return _read_stored(con, version) if _has_table(con) else None
    if ("stored_config", version) not in memo:
        memo["stored_config", version] = _read_stored(con, version)
    return memo["stored_config", version]


def _read_stored(con: duckdb.DuckDBPyConnection, version: int | None) -> StoredConfig | None:
    cursor = con.execute(  # every column: content_json is there only from migration 017 on
        "SELECT * FROM config_versions WHERE ? IS NULL OR version = ? ORDER BY version DESC LIMIT 1",
        [version, version],
    )
    row = cursor.fetchall()
    if not row:
        return None
    got = dict(zip((d[0] for d in cursor.description), row[0], strict=True))
    return StoredConfig(*(got[c] for c in _COLUMNS), content_json=got.get("content_json"))


_CONFIG_BY_SHA: dict[str, Config] = {}  # a version never changes: parse each content once per process


def stored_config_in_force(con: duckdb.DuckDBPyConnection) -> Config | None:
    """The current stored config, validated (ConfigError naming the version when it no longer
    does); None for a warehouse never given one."""
    stored = stored_config(con)
    return None if stored is None else stored.config


def policy_in_force(con: duckdb.DuckDBPyConnection, policy: Policy | None = None) -> Policy:
    """``policy`` when given, else the warehouse's stored config's, else — a warehouse never given
    one — the policy of the file a reader's ledger.config_versions.config_in_force takes
    ($GPULEDGER_CONFIG, ./gpuledger.yaml, the packaged example): one answer to "the policy in
    force", never bare defaults that differ from it (tier rules, exemptions)."""
    if policy is not None:
        return policy
    cfg = stored_config_in_force(con)
    if cfg is not None:
        return cfg.policy

    return _file_policy(resolve_config_path(None))


def _file_policy(path: Path) -> Policy:
    from gpuledger.config import read_config_file  # lazy: see StoredConfig.config

    key = (str(path), path.stat().st_mtime_ns if path.exists() else None)
    if key not in _POLICY_BY_FILE:  # scrape batches ask often: read each file version once
        _POLICY_BY_FILE[key] = read_config_file(path)[0].policy
    return _POLICY_BY_FILE[key]


_POLICY_BY_FILE: dict[tuple, Policy] = {}
