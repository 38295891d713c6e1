"""E-mailing a statement to finance: the PDF, HTML, XLSX and CSV of the org's statement attached,
its state, total and reconciliation (per currency and per GPU pool) in the body, through the finance channel (an apprise mailto URL from the
environment, gpuledger.channels)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from gpuledger.channels import notifier_for
from gpuledger.errors import UsageError


def email_statement(policy, manifest: dict, out: Path, *, notifier=None) -> str:
    """Send the statement in ``out`` (described by ``manifest``); returns the channel's name."""
    channel = policy.reports.finance_channel
    if notifier is None:
        if not channel:
            raise UsageError("--email: set policy.reports.finance_channel in the config (a channel name; its "
                             "URL comes from the environment)")
        notifier = notifier_for(channel)
    top = [f for f in manifest["files"]
           if "/" not in f["path"] and f["path"].endswith((".pdf", ".html", ".xlsx", ".csv"))]
    body = [f"GPU statement {manifest['period']} for {manifest['scope']}: {manifest['status_text']}",
            manifest["status_sentence"],
            f"config version {manifest['config_version']}, data through "
            f"{manifest['data_through'].replace('T', ' ').removesuffix(':00Z')} UTC", ""]
    body += [f"total owed: {Decimal(a):,.2f} {c}" for c, a in manifest["totals"].items()]
    body += [r["statement"] for r in manifest["reconciliation"]]
    if manifest.get("reconciliation_per_pool"):
        body += ["", "per GPU pool:"] + [f"  {p['statement']}" for p in manifest["reconciliation_per_pool"]]
    if manifest.get("showback"):
        body += ["", f"showback by {manifest['showback']['basis']} (not the ledger):"] + \
            [f"  {line}" for line in manifest["showback"]["per_pool"]]
    body += ["", "files attached (sha256):"] + [f"  {f['path']}  {f['sha256']}" for f in top]
    notifier.send(f"GPU statement {manifest['period']} for {manifest['scope']}: {manifest['status']}",
                  "\n".join(body), attachments=[out / f["path"] for f in top])
    return channel or "(given notifier)"
