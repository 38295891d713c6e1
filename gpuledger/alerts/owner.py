"""What a job's owner reads, in the manner of Princeton's Job Defense Shield: a greeting, the job by
the name they gave it (its id beside), what was seen (GPUs, model, host, since when, what it cost),
what happens next and when, the exact commands to check or stop it in its scheduler's words, and
whom to ask — an exemption included. No operator's words (modes, rails): those go to on-call.

Pure: the alert planner (alerts.plan) passes the job's identity (``job_identities.sql``) and policy."""

from __future__ import annotations

from datetime import datetime


def called(ident: dict | None, job_id: str) -> str:
    """A job as people know it: its name with the id beside, or the id alone."""
    name = (ident or {}).get("name")
    return f"{name} (id {job_id})" if name and name != job_id else job_id


def where(ident: dict | None, cluster: str) -> str:
    """'on cluster C, host h1 (GPU model H100)' — as much as is known."""
    ident = ident or {}
    out = f"on cluster {cluster}"
    if ident.get("hosts"):
        out += f", host{'s' if ',' in ident['hosts'] else ''} {ident['hosts']}"
    model = ident.get("models") or ident.get("gpu_model")
    return out + (f" ({model})" if model else "")


def commands(ident: dict | None, job_id: str) -> tuple[str, str, str]:
    """(check its GPUs, stop it, see what happened to it): the commands for the job's own scheduler."""
    ident = ident or {}
    source = str(ident.get("source") or "")
    ns, name = ident.get("namespace"), ident.get("name") or job_id
    if source.startswith("slurm"):
        sid = ident.get("scheduler_job") or job_id
        return (f"srun --jobid={sid} --overlap nvidia-smi   (or: scontrol show job {sid})", f"scancel {sid}",
                f"sacct -j {sid}   (or: scontrol show job {sid})")
    if source == "kueue":
        return (f"kubectl -n {ns} describe workload {name}",
                f"kubectl -n {ns} patch workload {name} --type=merge -p '{{\"spec\":{{\"active\":false}}}}'",
                f"kubectl -n {ns} describe workload {name}")
    pod = (ident.get("scheduler_job") or "").split("/")[-1] or name
    return (f"kubectl -n {ns} exec {pod} -- nvidia-smi",
            f"kubectl -n {ns} delete pod {pod}   (a pod its Job or Deployment recreates: delete that instead)",
            f"kubectl -n {ns} get events --field-selector involvedObject.name={pod}")


def ask(alerts, job_id: str, cluster: str) -> list[str]:
    """Where to ask, and how to ask for an exemption."""
    who = alerts.contact or "your platform team"
    lines = [f"Questions, or the GPUs are idle on purpose (a meeting, a debugging session)? Ask {who} for an "
             f"exemption, naming job {job_id} on {cluster}."]
    if alerts.help_url:
        lines.append(f"Help: {alerts.help_url}")
    if alerts.dashboard_url:
        lines.append(f"Dashboard: {alerts.dashboard_url.rstrip('/')}/squatters?cluster={cluster}&job={job_id}")
    return lines


def _t(moment: datetime | None) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%d %H:%M} UTC"


def squatting(ep: dict, ident: dict | None, alerts, *, threshold: float, next_words: str, currency: str,
              choices: list[str] = ()) -> tuple[str, str]:
    """(subject, body) of the owner's mail about an idle job at one severity."""
    job, cluster = ep["job_id"], ep["cluster"]
    name = (ident or {}).get("name") or job
    n_idle, n_total = ep.get("gpus_idle"), ep.get("gpus_total")
    cost = ep.get("idle_cost")
    check, stop, _ = commands(ident, job)
    subject = f"Your job {name} on {cluster} holds {n_idle} idle GPU{'' if n_idle == 1 else 's'}"
    idle = ("idle" if n_total == 1 else "all idle") if n_idle == n_total else f"{n_idle} of them idle"
    body = [
        f"Hello {ep.get('user_name') or 'there'},",
        "",
        f"your job {called(ident, job)} of project {ep.get('project')}, {where(ident, cluster)}, holds "
        f"{n_total} GPU{'' if n_total == 1 else 's'}, {idle} (activity under {threshold * 100:g} %) since "
        f"{_t(ep.get('idle_since'))}: {ep.get('gpu_hours_idle') or 0:,.2f} idle GPU-hours so far"
        + (f", {cost:,.2f} {ep.get('currency') or currency}." if cost is not None else "."),
        "",
        f"What happens next: {next_words}." if next_words else "",
        "",
        "To check whether it uses its GPUs:",
        f"    {check}",
        "If you no longer need it, stop it so others can use the GPUs:",
        f"    {stop}",
        "",
        *choices,  # keep it a while, release it, ask for an exemption (alerts.links)
        "" if choices else None,
        *ask(alerts, job, cluster),
    ]
    return subject, "\n".join(_tidy([line for line in body if line is not None]))


def preempted(r: dict, ident: dict | None, alerts, *, checkpoint_label: str) -> tuple[str, str]:
    """(subject, body) of the owner's mail about a job gpuledger preempted (preempted_jobs.sql)."""
    job, cluster = r["job_id"], r["cluster"]
    name = (ident or {}).get("name") or r.get("name") or job
    requeued = r.get("mode") == "requeue"
    held = None
    if r.get("start_time") and r.get("preempted_at") and r.get("gpus") is not None:
        hours = max((r["preempted_at"] - r["start_time"]).total_seconds(), 0.0) / 3600
        held = (float(r["gpus"]), hours, float(r["gpus"]) * hours)
    for_waiting = r.get("rule") in ("unfunded-burst", "past-min-runtime")
    subject = (f"Your job {name} on {cluster} was {'requeued' if requeued else 'stopped'}"
               + (" for waiting funded work" if for_waiting else ""))
    _, _, state = commands(ident, job)
    body = [
        f"Hello {r.get('user_name') or 'there'},",
        "",
        f"your job {called(ident, job)} of project {r.get('project')}, {where(ident, cluster)}, was preempted "
        f"at {_t(r.get('preempted_at'))}.",
        f"Why: {r['reason']}",
        (f"It held {held[0]:g} GPU{'' if held[0] == 1 else 's'} for {held[1]:,.2f} h: {held[2]:,.2f} GPU-hours."
         if held else ""),
        ("It was requeued: it resumes from its last checkpoint when GPUs are free again; you need do nothing."
         if requeued else "It was stopped (it declares no checkpointing): resubmit it when you need it."),
        "",
        "To see what happened to it:",
        f"    {state}",
        "To keep a job from preemption: run it under a project with budget left and declare a minimum runtime "
        "(it is protected that long); a job that checkpoints is requeued, not stopped, when it says so "
        f"(label {checkpoint_label}=true; Slurm: --requeue).",
        "",
        *ask(alerts, job, cluster),
        f"The full record: gpuledger enforce explain {job} --cluster {cluster}",
    ]
    return subject, "\n".join(_tidy(body))


def _tidy(lines: list[str]) -> list[str]:
    """No empty sentence lines, no double blank lines."""
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    return out[:-1] if out and out[-1] == "" else out
