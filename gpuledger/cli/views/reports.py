"""Which columns each report shows in the terminal, under which header, with which unit.

The default set answers the report's question and fits 80 columns (as `sshare` / `sreport` do);
``--wide`` adds the rest. Column names are the machine names (csv / parquet / json keep them);
headers carry the units. A report column missing here still shows under ``--wide``.
"""

from __future__ import annotations

from gpuledger.cli.views.tables import Column, View
from gpuledger.rules.severity import LOOKBACK

GPU_H = "GPU-h"  # allocated GPU-hours: one whole GPU held for one hour
NORM_LEGEND = "nGPU-h = normalised GPU-hours (GPU-hours × the model's rate-card weight), the budget unit"
OWN_LEGEND = "own budget: yes = the node's own budget, no = the sum of its descendants' budgets"


def _h(name: str, header: str, *, default: bool = True, decimals: int = 1) -> Column:
    return Column(name, header, "num", decimals=decimals, default=default)


FAIRSHARE = View(
    columns=(
        Column("node", "node", key=True),
        _h("shares_norm", "share", decimals=3),
        _h("usage_effective", "usage\n(eff.)", decimals=3),
        _h("level_fs", "level\nFS", decimals=3),
        Column("fs_rank", "rank", "int"),
        _h("fairshare_factor", "FS\nfactor", decimals=3),
        _h("usage_raw_gpu_hours", f"usage\n{GPU_H}"),
        _h("delivery_ratio", "delivered\n/owed", decimals=3),
        _h("occupancy_ratio", "occupancy", default=False, decimals=3),
        Column("parent", "parent", default=False),
        Column("depth", "depth", "int", default=False),
        Column("kind", "kind", default=False),
        _h("shares_raw", "shares\n(raw)", default=False),
        _h("share_global", "share of\ncluster", default=False, decimals=3),
        _h("usage_norm", "usage\n(norm.)", default=False, decimals=3),
        Column("order", "order", "int", default=False),
        _h("gpu_hours_window", f"window\n{GPU_H}", default=False),
        _h("gpu_hours_decayed", f"decayed\n{GPU_H}", default=False),
    ),
    notes=(("usage_raw_gpu_hours", f"{GPU_H} = allocated GPU-hours; share and usage are fractions of the node's siblings"),),
    indent=("node", "depth"),
)

BUDGET = View(
    columns=(
        Column("node", "node", key=True),
        Column("period_start", "period\nstart", "date", default=False),
        Column("period_end", "period end\n(exclusive)", "date", default=False),
        _h("budget_gpu_hours", "budget\nnGPU-h"),
        Column("budget_own", "own\nbudget", "bool", default=False),
        _h("consumed_gpu_hours", "consumed\nnGPU-h", default=False),  # budget - remaining; 80 columns
        _h("remaining_gpu_hours", "remaining\nnGPU-h"),
        _h("burn_gpu_hours_per_day", "burn\nnGPU-h/d"),
        _h("unweighted_gpu_hours", f"unweighted\n{GPU_H}", default=False),
        Column("unweighted_models", "unweighted\nmodels", default=False),
        Column("projected_exhaustion", "exhausts at\nthis rate (UTC)", "date", default=False),
        Column("runs_out", "runs out\n(UTC)", "date"),
        _h("left_at_period_end", "left at\nperiod end"),
        Column("status", "status"),
    ),
    notes=(("", NORM_LEGEND), ("budget_own", OWN_LEGEND),
           ("runs_out", ("runs out: at the 7-day burn rate, before its period ends (blank: it lasts the period); "
                         "left at period end: what that rate leaves unspent")),
           ("unweighted_gpu_hours", "unweighted: GPU-hours of models the rate card has no weight for, counted at 1")),
)

BALANCE = View(
    columns=(
        Column("node", "node", key=True),
        Column("period_start", "period start\n(UTC)", "datetime"),
        Column("period_end", "period end\n(UTC, excl.)", "datetime", default=False),
        # the default set fits 80 columns with the balance in it; allocated, due, repaid and burst: --wide
        _h("gpu_hours_owed", f"owed\n{GPU_H}"),
        _h("gpu_hours_carried_in", f"carried in\n{GPU_H}"),
        _h("gpu_hours_delivered", f"delivered\n{GPU_H}"),
        _h("gpu_hours_balance", f"balance\n{GPU_H}"),
        _h("gpu_hours_allocated", f"allocated\n{GPU_H}", default=False),
        _h("gpu_hours_due", f"due\n{GPU_H}", default=False),
        _h("gpu_hours_repaid", f"repaid\n{GPU_H}", default=False),
        _h("gpu_hours_above_due", f"above due\n{GPU_H}", default=False),
    ),
    notes=(("gpu_hours_balance", "balance = owed but not delivered, carried into the next period "
                                 "(due = owed + carried in; above due = burst, never negative)"),),
)

FUNDING = View(
    columns=(
        Column("cluster", "cluster", default=False),
        Column("job_id", "job", key=True),
        Column("project", "project"),
        Column("funded", "funded", "bool"),
        Column("protected_until", "protected until\n(UTC)", "datetime"),
        Column("protected", "protected\nnow", "bool", default=False),
        Column("min_runtime_s_effective", "min runtime\n(s)", "int", default=False),
        Column("unfunded_reason", "why unfunded", wrap=True),
    ),
    notes=(("protected_until", ("protected until = its start + its minimum runtime (capped): no preemption before "
                                "it; a time already past: protection over; blank: not running, or unfunded")),),
)

SQUATTERS = View(
    columns=(
        Column("cluster", "cluster", default=False),
        Column("job_id", "job", key=True),
        Column("project", "project"),
        Column("user_name", "user", default=False),
        Column("namespace", "namespace", default=False),
        Column("job_kind", "kind", default=False),
        Column("finding", "finding", default=False),
        Column("severity", "severity", wrap="hyphen"),  # preempt-eligible: 80 columns hold every other value
        Column("gpus_idle", "GPUs\nidle", "int"),
        Column("gpus_total", "GPUs\nheld", "int"),
        Column("idle_since", "idle since\n(UTC)", "datetime", default=False),
        _h("idle_minutes", "idle\nmin", decimals=0),
        _h("gpu_hours_idle", f"wasted\n{GPU_H}"),
        Column("idle_cost", "cost\n({currency})", "money"),
        Column("currency", "currency", default=False),
        Column("fb_used_bytes_idle", "memory\nGiB", "gib"),
        Column("activity_signal", "signal", default=False),
        Column("exempt", "exempt", "bool", default=False),
        Column("exempt_reason", "exempt because", default=False),
    ),
    notes=(("gpus_idle", "GPUs count devices: a MIG slice or a shared GPU is one"),
           ("gpu_hours_idle", ("wasted GPU-h = idle hours × each device's share of a GPU "
                               "(a 1g.10gb MIG slice is 1/7)")),
           ("idle_minutes", (f"idle min are counted within the evidence's last {LOOKBACK.total_seconds() / 3600:g} h: "
                             f"{LOOKBACK.total_seconds() / 60:.0f} means idle at least that long")),
           ("fb_used_bytes_idle", "memory = GPU memory held on the idle GPUs, GiB = 2^30 bytes")),
)

_CHARGE_TAIL = (
    Column("gpu_model", "model"),
    Column("tier", "tier"),
    Column("gpu_hours", f"alloc.\n{GPU_H}", "num", decimals=2),
    Column("amount", "amount\n({currency})", "money"),
    Column("currency", "currency", default=False),
    Column("idle_amount_included", "idle incl.\n({currency})", "money", default=False),
)
CHARGEBACK = View(
    columns=(
        Column("period", "period", default=False),
        Column("period_start", "period start\n(UTC)", "datetime", default=False),
        Column("period_end", "period end\n(UTC, excl.)", "datetime", default=False),
        Column("line_kind", "line"),
        Column("cluster", "cluster", default=False),
        Column("job_id", "job", key=True),
        Column("node", "node", key=True),
        Column("project", "project", key=True),
        Column("user_name", "user", default=False),
        *_CHARGE_TAIL,
        Column("billed", "in total", "bool", default=False),
        Column("billed_through", "billed through\n(UTC)", "datetime", default=False),
        Column("provisional", "provisional", "bool", default=False),
        Column("note", "note", default=False, wrap=True),
    ),
    notes=(("gpu_hours", f"{GPU_H} = allocated GPU-hours; an idle line is installed capacity nobody held"),),
)

_USAGE_FIGURES = (
    _h("gpu_hours_allocated", f"alloc.\n{GPU_H}"),
    _h("gpu_hours_active", f"active\n{GPU_H}"),
    _h("gpu_hours_idle", f"idle\n{GPU_H}"),
    _h("efficiency_ratio", "effic-\niency", decimals=3),
    _h("gpu_hours_unknown", f"no data\n{GPU_H}", default=False),
    _h("energy_kwh", "energy\nkWh", default=False),
)
USAGE = View(
    columns=(
        Column("hour", "hour\n(UTC)", "datetime", key=True),
        Column("cluster", "cluster", default=False),
        Column("job_id", "job", key=True),
        Column("node", "node", key=True),
        Column("project", "project", key=True),
        Column("user_name", "user", key=True),
        *_USAGE_FIGURES,
    ),
    notes=(("gpu_hours_allocated", f"{GPU_H} = GPU-hours; efficiency = active ÷ allocated GPU-hours"),
           ("gpu_hours_unknown", "no data = allocated GPU-hours without activity samples")),
)

UTILIZATION = View(
    columns=(
        Column("hour", "hour\n(UTC)", "datetime", key=True),
        Column("cluster", "cluster", key=True),
        Column("model", "model", key=True),
        Column("kind", "kind", key=True),
        _h("gpu_hours_capacity", f"capacity\n{GPU_H}"),
        _h("gpu_hours_allocated", f"alloc.\n{GPU_H}"),
        _h("gpu_hours_active", f"active\n{GPU_H}"),
        _h("gpu_hours_unknown", f"no data\n{GPU_H}", default=False),
        _h("share_of_allocated_pct", "share of\nalloc. %"),
        _h("allocation_pct", "alloc.\n%"),
        _h("active_pct", "active\n%"),
        _h("active_of_allocated_pct", "active/\nalloc. %"),
    ),
    notes=(("allocation_pct", f"% of installed capacity; {GPU_H} = GPU-hours, MIG slices by compute slices"),
           ("share_of_allocated_pct", "share of alloc. = this kind's part of all allocated GPU-hours")),
)

SUMMARY = View(columns=(Column("figure", "figure", key=True), Column("value", "value", key=True)))

QUARANTINE = View(
    columns=(
        Column("quarantined_at", "quarantined\n(UTC)", "datetime", default=False),
        Column("source", "source", key=True),
        Column("location", "location", key=True),
        Column("reason", "reason", wrap=True),
        Column("raw_text", "raw text\n(first 80 characters)", wrap="anywhere"),
    ),
)


WAIT_NOTE = "s = seconds, submit → start; still waiting = counted with its wait so far"
FIRST_GPU_NOTE = "1st GPU = a job's first submission → its first start (all runs of a requeued job)"
CAUSE_NOTE = ("cause: scheduler = the scheduler's own reason or delay, squatters = idle jobs held GPUs of its pool, "
              "budget = unfunded for want of budget, fair-share = later work ranked above it started first, "
              "pool-full = every GPU of the kind asked busy with work that came first, none = started when submitted")


def waits_view(*, by_job: bool, causes: bool) -> View:
    """`gpuledger report waits`: per group (or per job with ``by_job``); ``causes`` (--cause)
    shows the cause columns by default."""
    s = lambda name, header, default=True: Column(name, header, "num", decimals=0, default=default)  # noqa: E731
    if by_job:
        return View(columns=(
            Column("cluster", "cluster", default=False), Column("job_id", "job", key=True),
            Column("project", "project"), Column("user_name", "user", default=False),
            Column("job_class", "class"), Column("submit_time", "submitted\n(UTC)", "datetime"),
            Column("start_time", "started\n(UTC)", "datetime", default=False), s("wait_s", "wait\n(s)"),
            Column("still_waiting", "still\nwaiting", "bool"), s("first_gpu_s", "1st GPU\n(s)", default=False),
            Column("cause", "cause", wrap="hyphen"), Column("cause_detail", "why", wrap=True, default=causes),
            Column("scheduler_reason", "scheduler\nsays"),
            Column("scheduler_message", "scheduler's\nmessage", wrap=True, default=False),
        ), notes=(("wait_s", WAIT_NOTE), ("first_gpu_s", FIRST_GPU_NOTE), ("cause", CAUSE_NOTE)))
    return View(columns=(
        Column("bucket", "from\n(UTC)", "datetime", key=True), Column("project", "project", key=True),
        Column("user_name", "user", key=True), Column("job_class", "class", key=True),
        Column("jobs", "jobs", "int"), Column("still_waiting", "still\nwaiting", "int"),
        s("wait_p50_s", "wait p50\n(s)"), s("wait_p90_s", "wait p90\n(s)"), s("wait_max_s", "wait max\n(s)"),
        s("first_gpu_p50_s", "1st GPU\np50 (s)", default=False), s("first_gpu_p90_s", "1st GPU\np90 (s)", default=False),
        Column("main_cause", "main\ncause", wrap="hyphen"), Column("causes", "causes (jobs)", wrap=True, default=causes),
    ), notes=(("wait_p50_s", WAIT_NOTE), ("first_gpu_p50_s", FIRST_GPU_NOTE), ("main_cause", CAUSE_NOTE)))
