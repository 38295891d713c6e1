"""The config the warehouse was loaded from, kept as numbered versions.

The warehouse, not the working folder, is where a command finds the org tree, budgets, rate card
and policy: a report or an import run in a folder without ``gpuledger.yaml`` must not silently
swap in the packaged example. So:

* :func:`load_version` (``gpuledger config load``) is the only thing that replaces the current
  reference tables (org_nodes / budgets / rate_card). It adds a version — content as loaded,
  content hash, source path, who and when — plus copies of that version's rate card and budgets,
  an audit row, and returns what changed (printed by the CLI).
* :func:`config_in_force` is the one answer to "which config is in force" (the CLI, the pipelines,
  the dashboards): the stored config. An explicit ``--config`` (or ``$GPULEDGER_CONFIG``) that
  differs from it is refused with the fix (run ``config load``) at the CLI, loaded as a new version
  by the pipelines' reference tables, kept out by readers; only an empty warehouse takes the
  file's config (the packaged example included), and says so.

A version's hash is over the *validated* content (canonical JSON), so a comment or a reordered
key in the YAML is not a new version; a changed price is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

import duckdb
import polars as pl
import yaml

from gpuledger.config import Config, names_currency, parse_config_text, read_config_file
from gpuledger.config_files import packaged_example_path
from gpuledger.config_store import StoredConfig, stored_config  # noqa: F401  (StoredConfig: this module's callers)
from gpuledger.errors import UsageError
from gpuledger.ingest.tiers import apply_tier_rules
from gpuledger.ledger import audit
from gpuledger.ledger.grid_intensity import replace_grid_intensity
from gpuledger.ledger.periods import closed_periods
from gpuledger.rules.periods import next_month
from gpuledger.warehouse.db import transaction
from gpuledger.warehouse.writes import replace_reference

LIBRARY_SOURCE = "(library)"


class ConfigMismatch(UsageError):
    """An explicit config file differs from the one the warehouse holds."""


def canonical_json(cfg: Config) -> str:
    """The validated config as canonical JSON (every setting, defaults filled in, sorted keys)."""
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def fingerprint(cfg: Config) -> str:
    """sha256 of the validated config as canonical JSON (sorted keys): the content hash."""
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()


def same_content(stored: StoredConfig, sha: str) -> bool:
    """Whether a config whose fingerprint is ``sha`` says what ``stored`` says. The stored hash was
    taken by the release that loaded it; a release that adds a config key (with its default) dumps
    the same text differently, so the stored text is also fingerprinted as this release reads it —
    an upgrade alone never makes the same file "differ" from the warehouse's."""
    return stored.content_sha256 == sha or fingerprint(stored.config) == sha


def config_as_text(cfg: Config) -> str:
    """YAML of a config that came with no file text (library callers); parses back to the same
    content hash."""
    data = {"currency": cfg.currency, **cfg.model_dump(mode="json", exclude_defaults=True)}  # a file must name it
    for budget in data.get("budgets", []):
        if budget.get("period"):  # start / end were derived from it by the validator
            budget.pop("start", None)
            budget.pop("end", None)
    text = yaml.safe_dump(data, sort_keys=False)
    if fingerprint(parse_config_text(text, "(generated config text)")) != fingerprint(cfg):
        raise RuntimeError("config_as_text: the generated YAML does not parse back to the same config; "
                           "pass the file's text to load_version instead")
    return text


def config_versions(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every version: version, content_sha256, source_path, loaded_at, loaded_by, changes."""
    return con.sql("SELECT version, content_sha256, source_path, loaded_at, loaded_by, changes "
                   "FROM config_versions ORDER BY version").pl()


def versions_without_currency(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Stored versions whose text gives no top-level ``currency:``: loaded before a config file
    had to name it, they were accepted as USD and are read as USD (a file that now says
    ``currency: USD`` is the same content: ``config load`` finds it unchanged)."""
    rows = con.execute("SELECT version, content_text FROM config_versions ORDER BY version").fetchall()
    return [version for version, text in rows if not names_currency(text)]


def rate_card_version(con: duckdb.DuckDBPyConnection, version: int) -> pl.DataFrame:
    """The rate card as it stood in config ``version`` (rate_card table shape)."""
    return con.sql("SELECT gpu_model, tier, effective_from, price_per_gpu_hour, currency, budget_weight "
                   "FROM rate_card_versions WHERE version = ? ORDER BY effective_from",
                   params=[version]).pl()


# --- what changed ------------------------------------------------------------------------------

def _rates(cfg: Config) -> dict[tuple, tuple]:
    return {(r.gpu_model, r.tier, r.effective_from): (r.price_per_gpu_hour, r.currency or cfg.currency,
                                                       r.budget_weight) for r in cfg.rate_card}


def _budgets(cfg: Config) -> dict[tuple, tuple]:
    return {(b.node, b.start): (b.end, b.gpu_hours) for b in cfg.budgets}


def _nodes(cfg: Config) -> dict[str, tuple]:
    return {n.name: (parent, n.shares) for n, parent, _ in cfg.org.walk()}


def config_changes(old: Config | None, new: Config) -> list[str]:
    """One line per change from ``old`` to ``new``: nodes, prices, budgets, tier rules, policy."""
    if old is None:
        return [(f"first config: {len(new.node_names())} org nodes, {len(new.budgets)} budgets, "
                 f"{len(new.rate_card)} rates")]
    out: list[str] = []
    on, nn = _nodes(old), _nodes(new)
    out += [f"node added: {n} (under {nn[n][0]})" for n in sorted(nn.keys() - on.keys())]
    out += [f"node removed: {n}" for n in sorted(on.keys() - nn.keys())]
    for n in sorted(on.keys() & nn.keys()):
        if on[n][0] != nn[n][0]:
            out.append(f"node moved: {n} from {on[n][0]} to {nn[n][0]}")
        if on[n][1] != nn[n][1]:
            out.append(f"shares changed: {n} {on[n][1]:g} -> {nn[n][1]:g}")
    orates, nrates = _rates(old), _rates(new)
    for key in sorted(nrates.keys() - orates.keys()):
        out.append(f"price added: {key[0]}/{key[1]} from {key[2]} {nrates[key][0]} {nrates[key][1]}")
    for key in sorted(orates.keys() - nrates.keys()):
        out.append(f"price removed: {key[0]}/{key[1]} from {key[2]} (was {orates[key][0]} {orates[key][1]})")
    for key in sorted(orates.keys() & nrates.keys()):
        (op, oc, ow), (np_, nc, nw) = orates[key], nrates[key]
        if (op, oc) != (np_, nc):
            out.append(f"price changed: {key[0]}/{key[1]} from {key[2]} {op} {oc} -> {np_} {nc}")
        if ow != nw:
            out.append(f"budget weight changed: {key[0]}/{key[1]} from {key[2]} {ow:g} -> {nw:g}")
    ob, nb = _budgets(old), _budgets(new)
    for key in sorted(nb.keys() - ob.keys()):
        out.append(f"budget added: {key[0]} {key[1]}..{nb[key][0]} {nb[key][1]} h")
    for key in sorted(ob.keys() - nb.keys()):
        out.append(f"budget removed: {key[0]} {key[1]}..{ob[key][0]} (was {ob[key][1]} h)")
    for key in sorted(ob.keys() & nb.keys()):
        if ob[key] != nb[key]:
            out.append(f"budget changed: {key[0]} {key[1]}: {ob[key][1]} h -> {nb[key][1]} h"
                       + (f", end {ob[key][0]} -> {nb[key][0]}" if ob[key][0] != nb[key][0] else ""))
    if old.currency != new.currency:
        out.append(f"currency changed: {old.currency} -> {new.currency}")
    opol, npol = old.policy.model_dump(mode="json"), new.policy.model_dump(mode="json")
    if opol["chargeback"]["tier_rules"] != npol["chargeback"]["tier_rules"]:
        out.append(f"tier rules changed: {len(opol['chargeback']['tier_rules'])} -> "
                   f"{len(npol['chargeback']['tier_rules'])} rules (devices re-tiered)")
    for section in npol:
        for key, value in npol[section].items():
            if key != "tier_rules" and opol.get(section, {}).get(key) != value:
                out.append(f"policy changed: {section}.{key} {opol.get(section, {}).get(key)!r} -> {value!r}")
    odump, ndump = old.model_dump(mode="json"), new.model_dump(mode="json")
    for section in sorted(set(odump) | set(ndump)):
        if section not in ("currency", "org", "budgets", "rate_card", "policy") and odump.get(section) != ndump.get(section):
            out.append(f"{section} changed")
    if not out:
        out.append("no change to the tree, prices, budgets or policy (the content differs elsewhere)")
    return out


def _pair_windows(cfg: Config) -> dict[tuple[str, str], list[tuple[datetime, datetime | None]]]:
    """Per (model, tier): [effective_from, next effective_from) windows."""
    by_pair: dict[tuple[str, str], list] = {}
    for r in sorted(cfg.rate_card, key=lambda r: r.effective_from):
        by_pair.setdefault((r.gpu_model, r.tier), []).append(
            datetime.combine(r.effective_from, datetime.min.time()))
    return {pair: [(d, ds[i + 1] if i + 1 < len(ds) else None) for i, d in enumerate(ds)]
            for pair, ds in by_pair.items()}


def repriced_windows(old: Config, new: Config) -> list[tuple[str, str, datetime, datetime | None]]:
    """(model, tier, from, until) spans whose price in force differs between the two rate cards."""
    out = []
    ow, nw = _pair_windows(old), _pair_windows(new)
    orates, nrates = _rates(old), _rates(new)

    def price_at(windows, rates, pair, t):
        for lo, hi in windows.get(pair, []):
            if lo <= t and (hi is None or t < hi):
                return rates[(pair[0], pair[1], lo.date())][:2]
        return None

    for pair in set(ow) | set(nw):
        cuts = sorted({lo for lo, _ in ow.get(pair, [])} | {lo for lo, _ in nw.get(pair, [])})
        for i, t in enumerate(cuts):
            if price_at(ow, orates, pair, t) != price_at(nw, nrates, pair, t):
                out.append((pair[0], pair[1], t, cuts[i + 1] if i + 1 < len(cuts) else None))
    return sorted(out, key=lambda w: (w[0], w[1], w[2]))


# --- loading -----------------------------------------------------------------------------------

@dataclass
class LoadResult:
    version: int  # the version now current
    added: bool  # False when the content equals the current version's
    changes: list[str] = field(default_factory=list)
    closed_periods_affected: list[str] = field(default_factory=list)  # kept as issued; need a correction
    open_periods_repriced: list[str] = field(default_factory=list)  # past open months now priced anew
    warnings: list[str] = field(default_factory=list)  # grid-intensity CSV lines quarantined


def load_version(
    con: duckdb.DuckDBPyConnection, cfg: Config, *, text: str | None = None, source: str | Path = LIBRARY_SOURCE,
    by: str | None = None, now: datetime | None = None,
) -> LoadResult:
    """Make ``cfg`` the warehouse's current config: a new version unless its content hash equals
    the current one. Replaces org_nodes / budgets / rate_card, keeps the version's rate card and
    budgets, re-applies the tier rules to every device, audits the load. Closed periods are not
    touched: their statements stay as issued (see :mod:`gpuledger.ledger.periods`)."""
    sha = fingerprint(cfg)
    now = now or audit.utc_now()
    who = audit.actor(by)
    with transaction(con):
        # the series lives in a file beside the config: read on every load, so a changed file
        # counts even when the config text does not
        grid_warnings = replace_grid_intensity(con, cfg, source=source)
        current = stored_config(con)
        if current is not None and same_content(current, sha):
            return LoadResult(version=current.version, added=False, warnings=grid_warnings)
        old = current.config if current else None
        changes = config_changes(old, cfg)
        version = (current.version if current else 0) + 1
        con.execute(
            "INSERT INTO config_versions (version, content_sha256, source_path, loaded_at, loaded_by, content_text, "
            "changes, content_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [version, sha, str(source), now, who, text if text is not None else config_as_text(cfg),
             "\n".join(changes), canonical_json(cfg)],
        )
        rates, budgets = cfg.rate_card_frame(), cfg.budgets_frame()
        for table, frame in (("rate_card_versions", rates), ("budget_versions", budgets)):
            if frame.height:
                con.register("_version_rows", frame.with_columns(pl.lit(version).alias("version")).to_arrow())
                try:
                    names = ", ".join(["version", *frame.columns])
                    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _version_rows")
                finally:
                    con.unregister("_version_rows")
        replace_reference(con, cfg.org_frame(), budgets, rates)
        apply_tier_rules(con, cfg.policy.chargeback)
        closed, repriced = _periods_touched(con, old, cfg, now)
        audit.record(con, who=who, action="config-load", subject=f"config v{version}",
                     detail=f"sha256 {sha} from {source}; " + "; ".join(changes), at=now)
    return LoadResult(version=version, added=True, changes=changes, closed_periods_affected=closed,
                      open_periods_repriced=repriced, warnings=grid_warnings)


def _periods_touched(con, old: Config | None, new: Config, now: datetime) -> tuple[list[str], list[str]]:
    """Closed periods whose prices in force changed (they keep their statement), and past months
    still open that the change re-prices (said aloud, not silently)."""
    if old is None:
        return [], []

    windows = repriced_windows(old, new)
    tiers_changed = (old.policy.chargeback.model_dump() != new.policy.chargeback.model_dump())
    closed = closed_periods(con)
    hit_closed = []
    for period, (start, end) in closed.items():
        if tiers_changed or any(lo < end and (hi is None or hi > start) for _, _, lo, hi in windows):
            hit_closed.append(period)
    hit_open = []
    # Months before the warehouse's first device or job hold nothing to re-price.
    data_from = con.execute("SELECT least((SELECT min(first_seen) FROM gpus), "
                            "(SELECT min(coalesce(start_time, submit_time)) FROM jobs))").fetchall()[0][0]
    if windows and data_from is not None:
        first = max(min(lo for _, _, lo, _ in windows), data_from)
        start = datetime(first.year, first.month, 1)
        while (end := next_month(start)) <= now:  # months that are over
            name = f"{start:%Y-%m}"
            if name not in closed and any(lo < end and (hi is None or hi > start) for _, _, lo, hi in windows):
                hit_open.append(name)
            start = end
    return sorted(hit_closed), sorted(hit_open)


# --- which config a command uses ---------------------------------------------------------------

@dataclass(frozen=True)
class InForce:
    """The config in force for a warehouse, and how it came to be."""

    config: Config
    version: int | None  # the stored version; None: the file's, for this run only (an empty warehouse)
    source: str  # the file it was loaded from (for a stored version: as recorded)
    note: str | None = None  # a line to show the user, or None
    loaded: LoadResult | None = None  # set when this call stored a new version


def config_in_force(
    con: duckdb.DuckDBPyConnection, option: Path | None, *, write: bool, by: str | None = None,
    differing: Literal["refuse", "load", "stored"] = "refuse",
) -> InForce:
    """Which config is in force: the one answer for the CLI, the pipelines and the dashboards.

    The warehouse's stored config when it has one. ``option`` names a file (``--config``,
    ``$GPULEDGER_CONFIG``; for the pipelines also ./gpuledger.yaml); when its content differs from
    the stored one, ``differing`` says what happens: ``refuse`` (the CLI: :class:`ConfigMismatch`
    says to run ``gpuledger config load``), ``load`` (the pipelines' reference tables: a new
    version through :func:`load_version`, the path ``config load`` takes, said in the result), or
    ``stored`` (readers that must not fail on it: the stored one stays in force). No ``option`` never
    replaces a stored config — above all not with the packaged example.

    A warehouse without a config: the file's (``option``, else ./gpuledger.yaml, else the packaged
    example, named as such); writers (``write=True``) store it as version 1, readers use it for
    this run only; either way the note says so.
    """
    current = stored_config(con)
    if current is not None:
        if option is None:
            return InForce(current.config, current.version, current.source_path)
        cfg, text, path = read_config_file(option)
        if same_content(current, fingerprint(cfg)):
            return InForce(current.config, current.version, current.source_path)
        if differing == "refuse":
            raise ConfigMismatch(
                f"--config {path} differs from the warehouse's {current.describe()}; run "
                f"`gpuledger config load --config {path}` to replace it (it prints what changes), "
                "or leave --config out to use the stored one"
            )
        if differing == "stored":
            return InForce(current.config, current.version, current.source_path,
                           note=f"note: {path} differs from the warehouse's {current.describe()}, which stays "
                                "in force until it is loaded (`gpuledger config load`)")
        result = load_version(con, cfg, text=text, source=path, by=by)
        return InForce(cfg, result.version, str(path), loaded=result,
                       note=f"{path}: loaded as config version {result.version}")
    cfg, text, path = read_config_file(option)
    example = Path(path).resolve() == packaged_example_path().resolve()
    what = f"{path} (the packaged example config)" if example else str(path)
    if not write:
        return InForce(cfg, None, str(path), note=f"note: the warehouse holds no config yet; using {what} for this run")
    result = load_version(con, cfg, text=text, source=path, by=by)
    return InForce(cfg, result.version, str(path), loaded=result,
                   note=(f"the warehouse had no config: loaded {what} as config version {result.version} "
                         "(replace it with `gpuledger config load --config FILE`)"))


def config_for_command(
    con: duckdb.DuckDBPyConnection, option: Path | None, *, write: bool, by: str | None = None,
) -> tuple[Config, str | None]:
    """(the config a command must use, a note to print or None): :func:`config_in_force` as the
    CLI asks it (a differing ``--config`` is refused)."""
    chosen = config_in_force(con, option, write=write, by=by)
    return chosen.config, chosen.note


def ensure_config(con: duckdb.DuckDBPyConnection, cfg: Config, *, source: str | Path = LIBRARY_SOURCE,
                  by: str | None = None) -> int:
    """For writers handed a Config (the simulator): store it when the warehouse has none, accept it
    when it equals the stored one, refuse it otherwise (only `config load` replaces a config).
    Returns the current version."""
    current = stored_config(con)
    if current is None:
        return load_version(con, cfg, source=source, by=by).version
    if not same_content(current, fingerprint(cfg)):
        raise ConfigMismatch(
            f"this config differs from the warehouse's {current.describe()}; load it first with "
            "`gpuledger config load --config FILE` (it prints what changes)"
        )
    return current.version
