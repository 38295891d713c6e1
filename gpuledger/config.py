"""The gpuledger config file: org tree, shares, budgets, rate card and policy defaults.

One YAML file, validated with pydantic so an error names the field and says what would fix it.
Chosen by ``--config``, else ``$GPULEDGER_CONFIG``, else ``./gpuledger.yaml``, else the example
shipped in the package (``gpuledger/data/example-config.yaml``).
"""

from __future__ import annotations

import os
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import pycountry
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuledger import deadlines
from gpuledger.config_files import (  # noqa: F401  (re-exported: callers import them from here)
    CONFIG_ENV,
    LOCAL_CONFIG,
    example_config_text,
    resolve_config_path,
)
from gpuledger.errors import UsageError
from gpuledger.rules.periods import month_bounds
from gpuledger.rules.promql import check_selector
from gpuledger.rules.severity import Stage

if TYPE_CHECKING:  # polars only for the frames below: `config check` and the read paths never load it
    import polars as pl

Tier = Literal["reserved", "on-demand", "spot"]


class _Strict(BaseModel):
    # no unknown keys; no inf / nan anywhere (infinite shares made fair share NaN)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


MAX_ORG_DEPTH = 32  # levels below the root: real org trees have < 10; deeper is a generated mistake
# money and budgets as the warehouse stores them: DECIMAL(18, 3) GPU-hours, DECIMAL(18, 6) prices
BUDGET_DIGITS, PRICE_DIGITS = 18, 18


def _iso_4217(code: str | None) -> str | None:
    """``code`` when it is an ISO 4217 currency (USD, EUR, JPY...), else a ValueError saying so."""
    if code is None:
        return None

    if code != code.upper() and pycountry.currencies.get(alpha_3=code.upper()) is not None:
        raise ValueError(f"{code!r}: write the ISO 4217 code in capitals, {code.upper()!r}")
    if len(code) != 3 or not code.isalpha() or pycountry.currencies.get(alpha_3=code) is None:
        raise ValueError(f"{code!r} is not an ISO 4217 currency code (e.g. USD, EUR, GBP, JPY)")
    return code


class OrgNode(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    shares: float = Field(default=1.0, gt=0)
    kind: str | None = None  # org / program / project; inferred from depth when absent
    description: str | None = None
    children: list[OrgNode] = Field(default_factory=list)

    def walk(self, parent: str | None = None, depth: int = 0):
        """(node, parent name, depth) for this node and every descendant, depth-first."""
        yield self, parent, depth
        for child in self.children:
            yield from child.walk(self.name, depth + 1)


class Budget(_Strict):
    node: str
    gpu_hours: Decimal = Field(ge=0, max_digits=BUDGET_DIGITS, decimal_places=3)  # < 10^15 GPU-hours
    period: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}$")
    start: date | None = None
    end: date | None = None

    @model_validator(mode="after")
    def _one_period(self) -> Budget:
        if self.period:
            if self.start or self.end:
                raise ValueError("give either `period: YYYY-MM` or `start`/`end`, not both")
            start, end = month_bounds(self.period)
            self.start, self.end = start.date(), end.date()
        elif not (self.start and self.end):
            raise ValueError("a budget needs `period: YYYY-MM` or both `start` and `end` dates")
        if self.end <= self.start:
            raise ValueError(f"budget end {self.end} must be after start {self.start}")
        return self


class Rate(_Strict):
    gpu_model: str = Field(min_length=1)
    tier: Tier = "reserved"
    price_per_gpu_hour: Decimal = Field(ge=0, max_digits=PRICE_DIGITS, decimal_places=6)  # < 10^12 a GPU-hour
    effective_from: date
    budget_weight: float = Field(default=1.0, gt=0)
    currency: Annotated[str | None, AfterValidator(_iso_4217)] = None

    @field_validator("price_per_gpu_hour", mode="before")
    @classmethod
    def _no_float_money(cls, value):
        # A YAML float (2.1) is already inexact; insist on a string or an integer.
        if isinstance(value, float):
            raise ValueError(f'write the price as a quoted string, e.g. "{value}", so it stays exact')
        return value


class DeliveryBalancePolicy(_Strict):
    """Owed-but-undelivered GPU-hours carried forward per settlement period (the usage window W;
    analytics.delivery_balance). ``credit_fair_share``: rank fair share on usage less the balance,
    so a team the cluster still owes is served sooner (off by default; measured in BENCHMARKS.md).
    ``history_periods``: how many periods back the balance starts from 0."""

    credit_fair_share: bool = False
    history_periods: int = Field(default=8, ge=1, le=104)


class UsagePolicy(_Strict):
    mode: Literal["decay", "window"] = "decay"
    window_days: float = Field(default=7, gt=0)
    half_life_days: float = Field(default=7, gt=0)
    delivery_balance: DeliveryBalancePolicy = Field(default_factory=DeliveryBalancePolicy)


class MinRuntimeRule(_Strict):
    """A minimum runtime for Slurm jobs of a QOS and/or partition that declare none (sacct does
    not report --time-min): `{qos: high, hours: 4}`, `{partition: gpu, qos: normal, hours: 1}`."""

    qos: str | None = None
    partition: str | None = None
    hours: float = Field(ge=0)

    @model_validator(mode="after")
    def _names_something(self) -> MinRuntimeRule:
        if not (self.qos or self.partition):
            raise ValueError("a minimum-runtime rule needs `qos`, `partition` or both")
        return self


class FundingPolicy(_Strict):
    min_runtime_cap_hours: float = Field(default=8, ge=0)
    # Most specific rule wins (QOS and partition, then QOS, then partition); the job's own
    # minimum (TimeMin) wins over any rule; the cap applies to both.
    slurm_min_runtime: list[MinRuntimeRule] = Field(default_factory=list)


class SquattingPolicy(_Strict):
    idle_threshold_ratio: float = Field(default=0.01, ge=0, le=1)
    sustained_minutes: float = Field(default=60, gt=0)
    grace_minutes: float = Field(default=30, ge=0)
    warn_minutes: float = Field(default=60, gt=0)
    second_warn_minutes: float = Field(default=105, gt=0)
    preempt_minutes: float = Field(default=120, gt=0)
    min_coverage_ratio: float = Field(default=0.8, gt=0, le=1)
    exempt_namespaces: list[str] = Field(default_factory=list)
    exempt_kinds: list[str] = Field(default_factory=list)
    exempt_labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> SquattingPolicy:
        if not self.warn_minutes < self.second_warn_minutes < self.preempt_minutes:
            raise ValueError(
                "squatting stages must grow: warn_minutes < second_warn_minutes < preempt_minutes "
                "(a warning always comes before a preemption)"
            )
        return self


class TierRule(_Strict):
    """A device (or Slurm job) gets ``tier`` when every condition given here matches; the first
    matching rule of ``policy.chargeback.tier_rules`` wins, else the cloud providers' capacity-type
    node labels (gpuledger.ingest.tiers), else ``default_tier``."""

    tier: Tier
    cluster: str | None = None  # glob on the cluster name, e.g. "aws-*"
    host: str | None = None  # glob on the canonical host (short, lower case), e.g. "spot-*"
    node_labels: dict[str, str] = Field(default_factory=dict)  # Kubernetes node labels; all must match
    partition: str | None = None  # glob on the Slurm partition; prices that partition's jobs

    @model_validator(mode="after")
    def _has_condition(self) -> TierRule:
        if not (self.cluster or self.host or self.node_labels or self.partition):
            raise ValueError(
                "a tier rule needs at least one of cluster, host, node_labels or partition "
                "(for everything else set policy.chargeback.default_tier)"
            )
        return self


class ChargebackPolicy(_Strict):
    idle_cost: Literal["line", "spread"] = "line"
    default_tier: Tier = "reserved"
    tier_rules: list[TierRule] = Field(default_factory=list)
    # A device no longer seen is capacity (and costs idle) until last_seen + this grace, unless
    # the inventory retires it explicitly (gpus.retired_at); so a scrape gap does not retire it.
    retire_after_hours: float = Field(default=24, ge=0)


class QuickLane(_Strict):
    """Ai2's debug queue: small, short work served first whatever its team's fair-share rank, so a
    person testing a change waits seconds, not hours. A job is in the lane when it asks for at most
    ``max_gpus`` and either its kind is one of ``kinds`` or its time limit (Slurm TimeLimit, a pod's
    activeDeadlineSeconds) is at most ``max_minutes`` — the limit is what keeps the lane honest: the
    scheduler ends the job there. Its project must have budget left, and at most
    ``max_running_per_project`` of a project's lane jobs run at once (the rest keep their band).

    ``reserve_share``: the share of each pool's devices (rounded up) held for the lane and lent
    while the lane does not need them — the scheduler's side of the lane, as a Kueue ClusterQueue
    with its own nominal quota in the cohort (lendable; ``reclaimWithinCohort: Any``) or a Slurm
    partition on those nodes with a higher PriorityTier over a scavenger partition
    (PreemptMode=REQUEUE). Work started on the lent reserve runs there as burst (design.md: unfunded
    work runs where GPUs would otherwise idle): when a lane job needs the device back it is
    requeued at once, whatever its funding. 0 (the default): no reserve, the lane is a band only.
    ``reserve_share_whole``: the share on pools of whole GPUs (and shared devices) where it should
    differ (null, the default: ``reserve_share``; 0: the reserve on pools of MIG instances only).
    Exempt services and sessions inside their minimum runtime hold every slice a debug job could
    use far more often than every whole GPU of a pool, so a small share there serves the lane: in
    the what-if at 1,024 GPUs, 0.05 on MIG pools and 0.003 on whole GPUs (4 of 960) took the debug
    p90 wait to 17 s (BENCHMARKS.md, issue 34, session 21)."""

    enabled: bool = False
    max_gpus: float = Field(default=1.0, gt=0)
    max_minutes: float = Field(default=30, gt=0)
    kinds: list[str] = Field(default_factory=lambda: ["debug"])
    max_running_per_project: int = Field(default=4, ge=1)
    reserve_share: float = Field(default=0.0, ge=0, lt=0.5)
    reserve_share_whole: float | None = Field(default=None, ge=0, lt=0.5)

    def reserve_for(self, mig: bool) -> float:
        """The reserve's share of a pool of MIG instances (``mig``) or of whole GPUs."""
        return self.reserve_share if mig or self.reserve_share_whole is None else self.reserve_share_whole


class EnforcementPolicy(_Strict):
    """The safety rails of gpuledger.enforce (README "Enforcement")."""

    dry_run: bool = True  # plans are recorded, nothing is sent to a scheduler unless `apply --yes`
    kill_switch: bool = False  # true: every cycle plans `none` ("kill switch on") and apply acts on nothing
    max_actions_per_cycle: int = Field(default=10, ge=0)  # preemptions per cycle (warn / set-priority disrupt nothing)
    max_preemptions_per_project: int = Field(default=3, ge=0)  # per cycle
    # rolling caps over performed preemptions, across separate apply runs (a cron every minute)
    max_preemptions_per_hour: int = Field(default=20, ge=0)
    max_preemptions_per_project_per_hour: int = Field(default=6, ge=0)
    preemption_cooldown_minutes: float = Field(default=60, ge=0)  # a job preempted is left alone this long
    eviction_grace_period_seconds: int | None = Field(default=None, ge=0)  # None: the pod's own grace period
    scheduler_timeout_seconds: float = Field(default=30, gt=0)  # each Slurm command / Kubernetes call's deadline
    exempt_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    exempt_kinds: list[str] = Field(default_factory=lambda: ["inference"])  # production inference: never preempted, on top
    exempt_labels: dict[str, str] = Field(default_factory=dict)
    # where exempt jobs wait: always on top, or on top while their project is within its share (over
    # it they queue by fair share like funded work — still never preempted), so an exempt service
    # cannot take every freed GPU from teams below their share
    exempt_queue: Literal["on-top", "within-share"] = "on-top"
    # Slurm jobs: exempt by account, user or QOS as pods are by namespace and label (never
    # preempted, on top)
    exempt_accounts: list[str] = Field(default_factory=list)
    exempt_users: list[str] = Field(default_factory=list)
    exempt_qos: list[str] = Field(default_factory=list)
    warn_before_preempt_minutes: float = Field(default=15, ge=0)  # a squatter's warning at least this long before
    max_data_age_minutes: float = Field(default=15, gt=0)  # stale-data guard: older data plans no preemption
    checkpoint_label: str = "gpuledger.io/checkpointing"  # "true" on a pod / workload: it resumes, so requeue
    checkpoint_annotation: str = "gpuledger.io/checkpointing"
    # demand preemption: which unprotected jobs go first, and how much work one may throw away
    victim_order: Literal["priority", "least-lost-work"] = "least-lost-work"
    checkpoint_interval_minutes: float = Field(default=60, gt=0)  # a resumable job checkpoints this often
    max_lost_minutes: float | None = Field(default=5, ge=0)  # a funded victim loses at most this much work (None: any)
    victim_fit: Literal["any", "within-need"] = "within-need"  # within-need: no victim larger than the GPUs still missing
    # demand preemption spares a running job that cannot checkpoint while its project is behind what
    # it is owed in the running settlement period (delivered < owed so far, analytics.fairshare.delivery;
    # squatter reclaim still applies; measured in BENCHMARKS.md, issue 34)
    spare_behind_owed: bool = False
    # demand preemption never takes a running job of the waiting job's own project: the project's
    # allocation is the same either way, the preemption only throws the running job's work away and
    # queues its demand again (rails.own_project_spared; measured in BENCHMARKS.md, issue 34)
    spare_own_project: bool = False
    quick_lane: QuickLane = Field(default_factory=QuickLane)  # small short jobs first (off by default)
    slurm_qos_funded: str | None = None  # also set this QOS on funded pending Slurm jobs (Nice always)
    slurm_qos_unfunded: str | None = None
    pipeline_apply: bool = False  # the Dagster apply asset acts only when true ...
    pipeline_backend: Literal["kueue", "kubernetes", "slurm"] | None = None  # ... on this backend


class RetentionPolicy(_Strict):
    """How long the warehouse keeps raw samples (warehouse/retention.py, `gpuledger warehouse
    prune`). Rollups, jobs, findings, statements and the audit trail are always kept."""

    raw_sample_days: float = Field(default=35, gt=0, le=36_500)  # counted back from the newest sample


class JobInputPolicy(_Strict):
    """What a job record may claim before it is quarantined (gpuledger/ingest/jobs/checks.py)."""

    max_gpus_per_job: float = Field(default=4096, gt=0)
    clock_skew_minutes: float = Field(default=10, ge=0)  # how far in the future a start / end may lie


class QuietHours(_Strict):
    """UTC clock times; alerts below ``urgent_severity`` raised inside are held until ``end``."""

    start: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")  # e.g. "22:00"
    end: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")  # e.g. "07:00" (the next morning when before start)
    urgent_severity: Stage = "preempt-eligible"


class OwnerSelfService(_Strict):
    """What a job's owner may answer to a squatting alert (issue 38): keep the session for a bounded
    time, release it now, or ask for an exemption — through a signed link served by `gpuledger
    alerts links serve` at ``url``, or `gpuledger alerts keep | release | exemption`. The links are
    signed with ``$GPULEDGER_LINK_SECRET`` (or ``link_secret`` in the secrets file), never a
    secret in this file. Keeps count against a team's allowance over a rolling 7 days, so a keep
    cannot become a permanent exemption."""

    url: str | None = None  # the link endpoint as owners reach it, e.g. "https://gpuledger.example.org/self-service"
    keep_links_hours: list[float] = Field(default_factory=lambda: [1.0, 2.0, 4.0])  # the keep links a mail offers
    min_keep_hours: float = Field(default=1.0, gt=0)
    max_keep_hours: float = Field(default=4.0, gt=0, le=24)
    allowance_hours_per_week: float = Field(default=4.0, ge=0)  # per project, unless its team has its own below
    team_allowance_hours: dict[str, float] = Field(default_factory=dict)  # org node -> hours per rolling 7 days
    link_valid_hours: float = Field(default=24.0, gt=0)

    @model_validator(mode="after")
    def _bounded(self):
        if self.min_keep_hours > self.max_keep_hours:
            raise ValueError(f"min_keep_hours {self.min_keep_hours:g} is above max_keep_hours "
                             f"{self.max_keep_hours:g}: make min_keep_hours <= max_keep_hours")
        outside = [h for h in self.keep_links_hours if not self.min_keep_hours <= h <= self.max_keep_hours]
        if outside:
            raise ValueError(f"keep_links_hours {outside} lie outside {self.min_keep_hours:g}..{self.max_keep_hours:g} "
                             "h: offer only keeps the policy grants")
        return self


class AlertsPolicy(_Strict):
    """Who hears about squatters and budgets (gpuledger.alerts). Channels are names only: each one's
    URL (an apprise URL, with any credentials) comes from ``$GPULEDGER_ALERT_<NAME>_URL`` or the
    secrets file ``$GPULEDGER_SECRETS_FILE``, never from this file."""

    on_call: list[str] = Field(default_factory=list)  # channels every alert goes to
    owner_channel: str | None = None  # an e-mail channel; the owner's address is filled in per alert
    owners: dict[str, str] = Field(default_factory=dict)  # user -> e-mail address
    owner_address_template: str | None = None  # e.g. "{user}@example.org", for users not in `owners`
    teams: dict[str, list[str]] = Field(default_factory=dict)  # project -> channels for its daily digest
    min_severity: Stage = "warning"
    quiet_hours: QuietHours | None = None
    digest_hour_utc: int = Field(default=8, ge=0, le=23)  # the digest of the day before goes out then
    budget_thresholds_pct: list[float] = Field(default_factory=lambda: [80.0, 100.0])
    dashboard_url: str | None = None  # links in alerts, e.g. "https://gpuledger.example.org"
    # whom a job's owner asks about a preemption or for an exemption (an address, a channel, a URL)
    contact: str | None = None
    help_url: str | None = None  # a page that explains idle-GPU rules to owners, linked in their mails
    max_attempts: int = Field(default=12, ge=1)
    retry_base_seconds: float = Field(default=30, gt=0)  # backoff: base × 2^(attempt-1), capped at 1 h
    self_service: OwnerSelfService = Field(default_factory=OwnerSelfService)  # the owner's answers to an alert


class ReportsPolicy(_Strict):
    """Finance statements (gpuledger.reports): whether the monthly statement is e-mailed, to which
    channel (an e-mail channel; its URL from the environment like the alert channels)."""

    finance_channel: str | None = None
    top_squatters: int = Field(default=5, ge=1)  # per business unit in the weekly summary


class WhatIfPolicy(_Strict):
    """Defaults of `gpuledger whatif` (gpuledger.whatif), each overridable on the command line."""

    checkpoint_interval_minutes: float = Field(default=60, gt=0)  # a preempted job that resumes loses at most this
    resumable_kinds: list[str] = Field(default_factory=lambda: ["training", "fine-tune"])  # kinds that checkpoint
    cycle_minutes: float = Field(default=15, gt=0)  # how often the simulated enforcement cycle runs
    spot_interruptions_per_hour: float = Field(default=0.05, ge=0, le=60)  # per job on spot (a Poisson rate)


class HardwareCost(_Strict):
    """What owning a GPU costs, for the break-even month of `gpuledger whatif procurement`:
    the purchase price per GPU and its running cost (power, hosting, support) per GPU-hour."""

    gpu_model: str = Field(min_length=1)
    purchase_price_per_gpu: Decimal = Field(ge=0, max_digits=PRICE_DIGITS, decimal_places=2)
    running_cost_per_gpu_hour: Decimal = Field(ge=0, max_digits=PRICE_DIGITS, decimal_places=6)
    currency: Annotated[str | None, AfterValidator(_iso_4217)] = None

    @field_validator("purchase_price_per_gpu", "running_cost_per_gpu_hour", mode="before")
    @classmethod
    def _no_float_money(cls, value):
        if isinstance(value, float):
            raise ValueError(f'write the amount as a quoted string, e.g. "{value}", so it stays exact')
        return value


class SamplePolicy(_Strict):
    """What a DCGM sample may claim before it is quarantined (gpuledger/ingest/metrics/plausible.py)."""

    clock_skew_seconds: float = Field(default=300, ge=0, le=86_400)  # how far after now a sample may be stamped


class Policy(_Strict):
    usage: UsagePolicy = Field(default_factory=UsagePolicy)
    funding: FundingPolicy = Field(default_factory=FundingPolicy)
    squatting: SquattingPolicy = Field(default_factory=SquattingPolicy)
    chargeback: ChargebackPolicy = Field(default_factory=ChargebackPolicy)
    enforcement: EnforcementPolicy = Field(default_factory=EnforcementPolicy)
    jobs: JobInputPolicy = Field(default_factory=JobInputPolicy)
    samples: SamplePolicy = Field(default_factory=SamplePolicy)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    alerts: AlertsPolicy = Field(default_factory=AlertsPolicy)
    reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
    whatif: WhatIfPolicy = Field(default_factory=WhatIfPolicy)


class ScrapeSource(_Strict):
    """dcgm-exporter /metrics endpoints scraped by the pipelines' ingest (one round per run)."""

    targets: list[str] = Field(min_length=1)
    cluster: str = "default"
    timeout_s: float = Field(default=10.0, gt=0)
    retries: int = Field(default=1, ge=0)


class TsdbClusterSource(_Strict):
    """One cluster's series in a TSDB holding several (``sources.prometheus.clusters.<name>``)."""

    # PromQL label matchers, e.g. 'cluster="east"' (default: <cluster_label>="<name>")
    selector: str | None = Field(default=None, min_length=1)
    tenant: str | None = Field(default=None, min_length=1)  # X-Scope-OrgID for this cluster's queries

    @field_validator("selector")
    @classmethod
    def _matchers(cls, value):
        try:
            return None if value is None else check_selector(value, "selector")
        except UsageError as exc:
            raise ValueError(str(exc)) from None


class PrometheusSource(_Strict):
    """A Prometheus server holding DCGM series, backfilled one day partition at a time."""

    url: str = Field(min_length=1)
    cluster: str = "default"
    step_s: int = Field(default=30, gt=0)
    connect_timeout_s: float = Field(default=deadlines.PROMETHEUS.connect_s, gt=0, le=deadlines.MAX_WAIT_S)
    read_timeout_s: float = Field(default=deadlines.PROMETHEUS.read_s, gt=0, le=deadlines.MAX_WAIT_S)
    deadline_s: float = Field(default=deadlines.PROMETHEUS.total_s, gt=0, le=deadlines.MAX_WAIT_S)  # one query, retries included
    # Mimir / Cortex / a multi-tenant Thanos: the X-Scope-OrgID header. A bearer token is named by
    # where it lives (a file, e.g. a mounted Secret, or an environment variable), never written
    # here: the config's text is kept in the warehouse's config versions.
    tenant: str | None = Field(default=None, min_length=1)
    bearer_token_file: str | None = Field(default=None, min_length=1)
    bearer_token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # One TSDB, many clusters (`--aggregate`): the label naming each series' cluster (every value a
    # cluster), and/or the clusters by name, each with a selector and a tenant of its own.
    cluster_label: str | None = Field(default=None, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    clusters: dict[str, TsdbClusterSource] = Field(default_factory=dict)
    # The pipelines' fleet path (`prometheus_aggregates`): one row per GPU and window of this many
    # seconds (`ingest prometheus --aggregate`, 60-300), per cluster, the window still filling stored
    # as far as it has come and again at the next run. None:
    # the pipelines backfill raw samples by day (`prometheus_samples`) instead.
    aggregate_s: int | None = Field(default=None, ge=60, le=300)
    # ...asked up to this long before the wall clock: the TSDB answers for its last seconds by then
    # (VictoriaMetrics' -search.latencyOffset is 30 s by default; remote write and Thanos lag too)
    settle_s: int = Field(default=60, ge=0, le=3600)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_in_the_config(cls, data):
        if isinstance(data, dict) and any(k in data for k in ("bearer_token", "token", "password")):
            key = next(k for k in ("bearer_token", "token", "password") if k in data)
            raise ValueError(f"`{key}`: the config is stored in the warehouse's config versions, so it "
                             "holds no secret; put the token in a file (bearer_token_file: PATH, e.g. a "
                             "mounted Secret) or an environment variable (bearer_token_env: NAME)")
        return data

    @model_validator(mode="after")
    def _one_token_source(self):
        if self.bearer_token_file and self.bearer_token_env:
            raise ValueError("give bearer_token_file or bearer_token_env, not both")
        return self

    @field_validator("aggregate_s")
    @classmethod
    def _whole_windows_an_hour(cls, value):
        if value is not None and 3600 % value:
            raise ValueError(f"{value} s: choose a window that divides an hour (60, 120, 180, 240 or 300 s), "
                             "so no window straddles the hourly rollup")
        return value

    @model_validator(mode="after")
    def _each_cluster_selected(self):
        for name, c in self.clusters.items():
            # a cluster may be a whole tenant (Mimir); else, beside others, it must pick its own series
            if c.selector is None and not self.cluster_label and c.tenant is None and len(self.clusters) > 1:
                raise ValueError(f"clusters.{name}: give it a selector (e.g. selector: 'cluster=\"{name}\"'), "
                                 "or set cluster_label so that it selects <cluster_label>=\"<name>\"")
        return self

    def call_deadline(self) -> deadlines.CallDeadline:
        return deadlines.CallDeadline(self.connect_timeout_s, self.read_timeout_s, self.deadline_s)

    def cluster_names(self) -> list[str]:
        """The clusters this TSDB's series are stored under: the named ones, else ``cluster``
        (a ``cluster_label`` alone names none: its values are found per run, by the CLI)."""
        return list(self.clusters) or ([] if self.cluster_label else [self.cluster])


class KubernetesSource(_Strict):
    """A Kubernetes cluster whose GPU pods and Kueue Workloads become job rows."""

    kubeconfig: str | None = None  # default: $KUBECONFIG, ~/.kube/config, else in-cluster
    context: str | None = None
    cluster: str = "default"
    project_label: str = "gpuledger.io/project"
    user_label: str = "gpuledger.io/user"
    namespace_projects: dict[str, str] = Field(default_factory=dict)


class SlurmSource(_Strict):
    """Slurm accounting: a live ``sacct`` call over the last ``lookback_hours``, or an export file."""

    sacct: str = "sacct"
    file: str | None = None  # a saved `sacct -a -X --json` / `--parsable2` export instead of a live call
    lookback_hours: float = Field(default=24, gt=0)
    tz: str = "UTC"
    cluster: str | None = None


class JobsCsvSource(_Strict):
    """A folder watched for generic job CSV files (one import per new or changed file)."""

    folder: str = Field(min_length=1)
    pattern: str = "*.csv"


class Sources(_Strict):
    """Where the pipelines ingest from; a source left out is skipped (and says so).

    ``kubernetes`` and ``slurm`` take one source or a list, one per cluster (each its own
    ``cluster`` name, which is also its partition in the pipelines)."""

    scrape: ScrapeSource | None = None
    prometheus: PrometheusSource | None = None
    kubernetes: KubernetesSource | list[KubernetesSource] | None = None
    slurm: SlurmSource | list[SlurmSource] | None = None
    jobs_csv: JobsCsvSource | None = None

    @model_validator(mode="after")
    def _one_source_per_cluster(self) -> Sources:
        for key in ("kubernetes", "slurm"):
            given = getattr(self, key)
            if not isinstance(given, list):
                continue
            if not given:
                raise ValueError(f"{key}: an empty list; leave the key out, or give one source per cluster")
            names = [s.cluster for s in given]
            if None in names:
                raise ValueError(f"{key}: in a list, give every source its cluster (cluster: NAME): the name its "
                                 "jobs are stored under and its partition in the pipelines")
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{key}: cluster {', '.join(twice)} named twice; one source per cluster")
        return self

    def kubernetes_by_cluster(self) -> dict[str, KubernetesSource]:
        """Each Kubernetes source by the cluster name its jobs are stored under."""
        return {s.cluster: s for s in _listed(self.kubernetes)}

    def slurm_by_cluster(self) -> dict[str, SlurmSource]:
        """Each Slurm source by its cluster: ``cluster``, else (one source) ``default`` — sacct's own
        Cluster column still names the jobs' cluster then."""
        return {s.cluster or "default": s for s in _listed(self.slurm)}

    def first_kubernetes(self) -> KubernetesSource | None:
        """The one Kubernetes source, or the first of a list (the pipeline's enforcement backend)."""
        listed = _listed(self.kubernetes)
        return listed[0] if listed else None

    def cluster_names(self) -> list[str]:
        """Every cluster the sources name, in the order given (the pipelines' cluster partitions):
        scrape, Prometheus, Kubernetes, then Slurm."""
        names = [self.scrape.cluster] if self.scrape else []
        names += self.prometheus.cluster_names() if self.prometheus else []
        names += [*self.kubernetes_by_cluster(), *self.slurm_by_cluster()]
        return list(dict.fromkeys(names))


def _listed(given) -> list:
    return [] if given is None else given if isinstance(given, list) else [given]


class DashboardAccess(_Strict):
    """Who sees what on the Streamlit dashboards when sign-in is on (sign-in e-mail addresses,
    compared case-insensitively). Admins and finance see everything; a lead sees the jobs, users
    and spend of the projects under the org nodes listed for them, and the org-level aggregates;
    anyone else signed in sees the aggregates only."""

    admins: list[str] = Field(default_factory=list)
    finance: list[str] = Field(default_factory=list)
    leads: dict[str, list[str]] = Field(default_factory=dict)  # e-mail -> org nodes (projects or programs)


EARLIEST_DAY = date(2000, 1, 1)  # nothing before it ran on a GPU this ledger prices


class GridIntensity(_Strict):
    """The carbon intensity of a site's electricity: one constant, or an hourly series in a CSV
    file (columns ``hour`` — ISO 8601 UTC — and ``kg_co2e_per_kwh``; a path relative to the config
    file), read into the warehouse by ``config load`` (gpuledger/analytics/carbon.py)."""

    kg_co2e_per_kwh: float | None = Field(default=None, ge=0.0, le=3.0)  # coal is ~1.0; 3 is a unit error
    csv: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> GridIntensity:
        if (self.kg_co2e_per_kwh is None) == (self.csv is None):
            raise ValueError("give kg_co2e_per_kwh (a constant, e.g. 0.35) or csv (an hourly series file), "
                             "exactly one of them")
        if self.csv is not None and not self.csv.lower().endswith(".csv"):
            raise ValueError(f"csv: {self.csv!r} is not a .csv file (columns hour, kg_co2e_per_kwh)")
        return self


class ClusterSettings(_Strict):
    """Facts about one cluster (``clusters.<name>`` — the name its samples and jobs carry); a
    cluster is the *site* of its energy figures."""

    # the day its first GPU came into service: samples and job times before it are quarantined
    # (a clock at the epoch, a unit error); without it the floor is 2000-01-01
    first_day: date | None = None
    # power usage effectiveness: facility kWh = GPU kWh × pue (1.0 = no overhead; > 3 is a mistake)
    pue: float | None = Field(default=None, ge=1.0, le=3.0)
    grid_intensity: GridIntensity | None = None

    @field_validator("first_day")
    @classmethod
    def _after_the_floor(cls, value: date | None) -> date | None:
        if value is not None and value < EARLIEST_DAY:
            raise ValueError(f"{value} is before {EARLIEST_DAY}; no GPU this ledger prices ran then")
        return value


class Config(_Strict):
    # required in a config file (parse_config_text's require_currency); the default serves
    # configs built in code and stored versions from before the rule
    currency: Annotated[str, AfterValidator(_iso_4217)] = "USD"
    org: OrgNode
    budgets: list[Budget] = Field(default_factory=list)
    rate_card: list[Rate] = Field(default_factory=list)
    hardware: list[HardwareCost] = Field(default_factory=list)  # owning costs (whatif procurement)
    policy: Policy = Field(default_factory=Policy)
    sources: Sources = Field(default_factory=Sources)
    dashboards: DashboardAccess = Field(default_factory=DashboardAccess)
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict)

    def pipeline_clusters(self) -> list[str]:
        """The pipelines' cluster partitions: every cluster the sources name, then those only
        ``clusters:`` describes (their holdings are still linked per cluster)."""
        return list(dict.fromkeys([*self.sources.cluster_names(), *self.clusters]))

    def first_day(self, cluster: str) -> tuple[date, str]:
        """(the earliest plausible day for ``cluster``, where it comes from, for messages)."""
        settings = self.clusters.get(cluster)
        if settings is not None and settings.first_day is not None:
            return settings.first_day, f"clusters.{cluster}.first_day"
        return EARLIEST_DAY, "the earliest gpuledger accepts"

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        level, depth = [self.org], 0
        while level:  # level by level, no recursion: how deep is the tree?
            level = [child for node in level for child in node.children]
            depth += bool(level)
            if depth > MAX_ORG_DEPTH:
                raise ValueError(f"org: the tree is more than {MAX_ORG_DEPTH} levels deep; an org tree "
                                 "that deep is a generated mistake (real ones have fewer than 10)")
        seen: set[str] = set()
        for node, _, _ in self.org.walk():
            if node.name in seen:
                raise ValueError(f"org: node name {node.name!r} appears twice; names must be unique")
            seen.add(node.name)
        for i, budget in enumerate(self.budgets):
            if budget.node not in seen:
                raise ValueError(f"budgets[{i}].node: {budget.node!r} is not in the org tree")
            # Two budgets of one node at one time: which one counts would be a guess.
            for j, other in enumerate(self.budgets[:i]):
                if other.node == budget.node and other.start < budget.end and budget.start < other.end:
                    raise ValueError(
                        f"budgets[{j}] and budgets[{i}]: node {budget.node!r} has two budgets that overlap "
                        f"({other.start}..{other.end} and {budget.start}..{budget.end}, ends exclusive); "
                        "merge them or make the periods meet end to start")
        rates = set()
        for i, rate in enumerate(self.rate_card):
            key = (rate.gpu_model, rate.tier, rate.effective_from)
            if key in rates:
                raise ValueError(f"rate_card[{i}]: a second price for {key}; keep one per date")
            rates.add(key)
        for lead, nodes in self.dashboards.leads.items():
            unknown = [n for n in nodes if n not in seen]
            if unknown:
                raise ValueError(f"dashboards.leads[{lead!r}]: {', '.join(map(repr, unknown))} not in the org tree")
        return self

    # --- views used by the warehouse loader, the simulator and the analytics --------------
    def projects(self) -> list[str]:
        """Leaf nodes: the names jobs may charge to."""
        return [n.name for n, _, _ in self.org.walk() if not n.children]

    def node_names(self) -> set[str]:
        return {n.name for n, _, _ in self.org.walk()}

    def org_frame(self) -> pl.DataFrame:
        import polars as pl  # lazy: `config check` never builds a frame (median 0.49 s without polars, 0.67 s with)

        rows = []
        for node, parent, depth in self.org.walk():
            kind = node.kind or ("org" if depth == 0 else "project" if not node.children else "program")
            rows.append((node.name, parent, kind, node.shares, node.description))
        return pl.DataFrame(
            rows, schema=["node", "parent", "kind", "shares", "description"], orient="row"
        )

    def budgets_frame(self) -> pl.DataFrame:
        import polars as pl  # lazy: as org_frame

        return pl.DataFrame(
            {
                "node": [b.node for b in self.budgets],
                "period_start": [b.start for b in self.budgets],
                "period_end": [b.end for b in self.budgets],
                "budget_gpu_hours": [b.gpu_hours for b in self.budgets],
            },
            schema={"node": pl.String, "period_start": pl.Date, "period_end": pl.Date,
                    "budget_gpu_hours": pl.Decimal(18, 3)},
        )

    def rate_card_frame(self) -> pl.DataFrame:
        import polars as pl  # lazy: as org_frame

        return pl.DataFrame(
            {
                "gpu_model": [r.gpu_model for r in self.rate_card],
                "tier": [r.tier for r in self.rate_card],
                "effective_from": [datetime.combine(r.effective_from, datetime.min.time()) for r in self.rate_card],
                "price_per_gpu_hour": [r.price_per_gpu_hour for r in self.rate_card],
                "currency": [r.currency or self.currency for r in self.rate_card],
                "budget_weight": [r.budget_weight for r in self.rate_card],
            },
            schema={"gpu_model": pl.String, "tier": pl.String, "effective_from": pl.Datetime("us"),
                    "price_per_gpu_hour": pl.Decimal(18, 6), "currency": pl.String,
                    "budget_weight": pl.Float64},
        )


class ConfigError(UsageError):  # a ValueError too; exit 2 at the CLI
    """The config file is unreadable or invalid; the message names the file and field."""


def _describe(error: ValidationError, source: Path, also: list[str] = ()) -> str:
    lines = [f"{source}: {error.error_count() + len(also)} problem(s) in the config"]
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"  - {where}: {item['msg']}")
    lines += [f"  - {line}" for line in also]
    return "\n".join(lines)


MISSING_CURRENCY = ("no `currency:` given; add a top-level `currency: USD` (or the ISO 4217 code your "
                    "prices are in, e.g. EUR) so no amount is read in a guessed currency")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML without the timestamp rule: dates stay text and pydantic parses them, so an impossible
    date (2026-02-30) is reported against its field instead of failing inside the YAML reader.
    libyaml's parser where PyYAML has it: a 1,000-project org tree parses in 0.1 s, not 1 s."""


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """A YAML mapping whose keys are each given once: a second ``budgets:`` silently replacing the
    first is refused, naming both lines."""
    first_line: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (lines {first_line[key] + 1} and "
                    f"{key_node.start_mark.line + 1}); keep one", key_node.start_mark)
            first_line[key] = key_node.start_mark.line
        except TypeError:  # an unhashable key: the constructor below says so
            continue
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)

_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _nesting(value) -> int:
    """How many mappings and lists deep ``value`` goes (iteratively: no recursion limit to hit)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            todo += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _read_text(source: Path) -> str:
    try:
        return source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such config file (see `gpuledger config example`)") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory; pass the config YAML file itself "
                          "(--config FILE)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not a YAML text file (byte {exc.start} is not UTF-8); pass "
                          "the config YAML (see `gpuledger config example`)") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config ({exc.strerror or exc})") from None


def load_config(path: str | os.PathLike | None = None) -> Config:
    source = resolve_config_path(path)
    return parse_config_text(_read_text(source), source, require_currency=True)


MISSING_CURRENCY_DEFAULT = "USD"  # what a stored config version without `currency:` was accepted as


def names_currency(text: str) -> bool:
    """Whether config text gives its top-level ``currency:`` (stored versions loaded before it was
    required may not; they were accepted, and are read, as USD)."""
    try:
        raw = yaml.load(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        return False
    return isinstance(raw, dict) and "currency" in raw


def parse_config_text(text: str, source: str | os.PathLike = "(stored config)", *,
                      require_currency: bool = False) -> Config:
    """Validate config YAML given as text: a file's, or the copy the warehouse keeps of the
    config it was loaded from (gpuledger.ledger.config_versions).

    ``require_currency``: a config *file* must say its currency (``load_config`` and
    ``read_config_file``, so ``config check``, ``config load`` and the pipelines alike); a stored
    version loaded before that rule was accepted as USD and is still read so (``config versions``
    says which)."""
    source = Path(source)
    try:
        raw = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:  # where it went wrong as file:line:column
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else str(source)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    except RecursionError:  # the reader recurses per level: a tree hundreds of levels deep
        raise ConfigError(f"{source}: nested too deeply to read (the org tree may have at most "
                          f"{MAX_ORG_DEPTH} levels)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with at least an `org:` tree")
    if _nesting(raw) > 4 * MAX_ORG_DEPTH:  # libyaml reads any depth; validating it would recurse past its limit
        raise ConfigError(f"{source}: nested too deeply to read (the org tree may have at most "
                          f"{MAX_ORG_DEPTH} levels)")
    missing = MISSING_CURRENCY if require_currency and "currency" not in raw else None
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, also=[f"currency: {missing}"] if missing else [])) from None
    if missing:
        raise ConfigError(f"{source}: {missing}")
    return cfg


def read_config_file(path: str | os.PathLike | None = None) -> tuple[Config, str, Path]:
    """(config, the file's text, its path), the file chosen as load_config chooses it."""
    source = resolve_config_path(path)
    text = _read_text(source)
    return parse_config_text(text, source, require_currency=True), text, source
