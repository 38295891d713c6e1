"""The enforcement plan of each cycle and, separately, its application.

* ``enforcement_plan`` decides at the data's "now" (or ``as_of``) from budgets, fair share,
  squatting findings and the earlier actions (gpuledger.enforce), and records every action in the
  warehouse's audit (plus the warnings it issues). It calls no scheduler.
* ``enforcement_actions`` applies the plan of its own cycle — the one the latest
  ``enforcement_plan`` materialization recorded (its ``plan_id``), never an older one: a quiet
  cycle that recorded no rows sends nothing, rather than the previous cycle's refused eviction
  again — through ``policy.enforcement.pipeline_backend``, only when ``pipeline_apply`` is true,
  the kill switch is off, and (for anything but a dry run) ``dry_run`` is false. Each action is
  performed at most once; each preemption is checked again at apply time (the scheduler's live
  object, the rolling caps, its cluster's data freshness by the wall clock).
"""


import dagster as dg
from gpuledger.enforce import audit, cycle
from gpuledger.enforce import backends as registry
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.squatting.assets import squatting_findings

from gpuledger import facts
from gpuledger.rules.clock import parse_iso, utc_now


class EnforcementCycle(dg.Config):
    as_of: str | None = None  # ISO time, UTC (default: the newest sample or job time)


@dg.asset(deps=[*INGEST_DEPS, dg.AssetDep(squatting_findings)], group_name="enforcement",
          kinds={"duckdb", "python"})
def enforcement_plan(context: dg.AssetExecutionContext, config: EnforcementCycle, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """This cycle's set-priority / warn / preempt / none actions with their reasons (table
    enforcement_audit, phase planned; warnings in enforcement_warnings)."""
    cfg = gpuledger_config.load()
    with warehouse.writer():  # the schema up to date before reading
        pass
    with warehouse.reader() as con:
        now = parse_iso(config.as_of) if config.as_of else facts.data_now(con)
    observed = observed_by = observed_cluster = None
    rails = cfg.policy.enforcement
    if rails.pipeline_apply and rails.pipeline_backend:  # the live view every preemption needs
        try:
            observed, observed_by, observed_cluster = cycle.look(_backend(cfg))
        except Exception as exc:  # noqa: BLE001 - planning goes on without it (then nothing is preempted)
            context.log.warning(f"could not read the {rails.pipeline_backend} jobs' live state: {exc}")
    actions, plan_id, _ = cycle.plan(warehouse.reader, warehouse.writer, cfg, now, observed=observed,
                                     observed_by=observed_by, observed_cluster=observed_cluster)
    counts = {k: sum(1 for a in actions if a.action == k) for k in ("set-priority", "warn", "preempt", "hold", "release",
                                                                     "none")}
    context.log.info(f"plan {plan_id} at {now.isoformat()}: {counts}")
    return dg.MaterializeResult(metadata={
        "plan_id": plan_id, "planned_at_utc": now.isoformat(), "dry_run": cfg.policy.enforcement.dry_run,
        "kill_switch": cfg.policy.enforcement.kill_switch,
        **{k.replace("-", "_"): v for k, v in counts.items()},
    })


@dg.asset(deps=[enforcement_plan], group_name="enforcement", kinds={"python"})
def enforcement_actions(context: dg.AssetExecutionContext, warehouse: Warehouse,
                        gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The newest plan applied through the configured backend (enforcement_audit, phase applied);
    does nothing unless policy.enforcement.pipeline_apply is true."""
    cfg = gpuledger_config.load()
    rails = cfg.policy.enforcement
    off = ("policy.enforcement.pipeline_apply is false" if not rails.pipeline_apply
           else "the kill switch is on" if rails.kill_switch
           else "policy.enforcement.pipeline_backend is not set" if rails.pipeline_backend is None else None)
    if off:
        context.log.info(f"not applying: {off}")
        return dg.MaterializeResult(metadata={"applied": False, "why_not": off})
    latest = context.instance.get_latest_materialization_event(enforcement_plan.key)
    own = None if latest is None or latest.asset_materialization is None else \
        latest.asset_materialization.metadata.get("plan_id")
    if own is None:
        return dg.MaterializeResult(metadata={"applied": False, "why_not": "no plan recorded yet"})
    with warehouse.reader() as con:  # this cycle's plan only: a quiet one holds no action to send
        plan_id, planned_at, actions = audit.load_plan(con, own.value)
    if not actions:
        return dg.MaterializeResult(metadata={"applied": False, "plan_id": own.value,
                                              "why_not": "this cycle's plan holds nothing to act on"})
    backend = _backend(cfg)
    run = cycle.apply_plan(warehouse.reader, warehouse.writer, actions, backend, dry_run=rails.dry_run,
                           planned_at=planned_at, cfg=cfg, applied_at=utc_now())
    if run.fatal is not None:
        raise dg.Failure(str(run.fatal))
    outcomes: dict[str, int] = {}
    for _, o in run.results:
        outcomes[o.outcome] = outcomes.get(o.outcome, 0) + 1
    return dg.MaterializeResult(metadata={
        "applied": True, "plan_id": plan_id, "backend": backend.name, "dry_run": rails.dry_run,
        "performed": run.performed, "already_done": len(run.already_done),
        **{f"outcome_{k.replace('-', '_')}": v for k, v in outcomes.items()},
    })


def _backend(cfg):
    """The configured backend (Kubernetes credentials from sources.kubernetes)."""
    rails = cfg.policy.enforcement
    if rails.pipeline_backend in ("kueue", "kubernetes"):
        source = cfg.sources.first_kubernetes()  # a list of sources: the first one's cluster
        # the cluster the pipeline's own ingest stores this source's jobs under
        return registry.get(rails.pipeline_backend, kubeconfig=source.kubeconfig if source else None,
                            context=source.context if source else None, timeout_s=rails.scheduler_timeout_seconds,
                            cluster=source.cluster if source else None)
    return registry.get(rails.pipeline_backend, qos_funded=rails.slurm_qos_funded,
                        qos_unfunded=rails.slurm_qos_unfunded, timeout_s=rails.scheduler_timeout_seconds)
