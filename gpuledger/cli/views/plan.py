"""How the plan shows in the terminal (gpuledger.cli.views.tables)."""

from gpuledger.cli.views.tables import Column, View

PLAN = View(
    columns=(
        Column("action", "action", key=True),
        Column("cluster", "cluster", default=False),
        Column("job_id", "job", key=True),
        Column("project", "project"),
        Column("priority", "priority", "int"),
        Column("mode", "mode"),
        Column("funded", "funded", "bool"),
        Column("min_runtime_until", "protected until\n(UTC)", "datetime", default=False),
        Column("warned_at", "warned at\n(UTC)", "datetime", default=False),
        Column("rule", "rule", default=False),
        Column("reason", "reason", wrap=True),
        Column("dry_run", "dry\nrun", "bool", default=False),
    ),
    notes=(("mode", "mode: requeue (the job resumes from its checkpoint) or stop"),),
)
