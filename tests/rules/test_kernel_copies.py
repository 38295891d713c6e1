"""The rules kernel is used, not copied (issue 40): the one "now" (gpuledger.rules.clock.utc_now), the
one ISO-8601 writer (iso_z / iso_z_us / epoch_iso_z), the one squatting lookback
(rules.severity.LOOKBACK), the billed-line rule (gpuledger.rules.billing, in polars and in SQL)
and the squatting severity ladder (gpuledger.rules.severity: the order of the severities and the
idle minutes each starts at) are written by hand nowhere else in the product's code (Python and
SQL; the migrations are history and are not read)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("gpuledger", "warehouse", "enforce", "pipelines", "dashboards")
# rule -> (the hand-written copy, the one file allowed to hold it: the kernel's own)
COPIES = {
    "now": (re.compile(r"datetime\.now\((?:UTC|timezone\.utc|tz=UTC)\)\.replace\(tzinfo=None\)"), "gpuledger/rules/clock.py"),
    "ISO Z time": (re.compile(r"%Y-%m-%dT%H:%M:%S(?:\.%f)?Z"), "gpuledger/rules/clock.py"),
    "squatting lookback": (re.compile(r"timedelta\(hours=6\)"), "gpuledger/rules/severity.py"),
    # the billed kinds listed by hand (polars / Python), or the memo kinds a SQL filter inverts
    "billed lines": (re.compile(r"""[\[(]\s*["']charge["'],\s*["']idle["']\s*[\])]"""
                                r"""|["']over-allocated["'],\s*["']capacity-unknown["'],\s*["']unpriced["']"""),
                     "gpuledger/rules/billing.py"),
    # the severities in order, a rank table, or a finding's severity picked from the stage minutes
    "severity ladder": (re.compile(r"""["']warning["'],\s*["']second-warning["'],\s*["']preempt-eligible["']"""
                                   r"""|["']info["']:\s*0\b|>=\s*(?:[\w.]+\.)?(?:warn|second_warn|preempt)_minutes\b"""),
                        "gpuledger/rules/severity.py"),
}


def copies_in(text: str) -> list[tuple[str, int]]:
    """(rule, line) of every hand-written copy of a kernel rule in ``text``."""
    return [(rule, text.count("\n", 0, m.start()) + 1)
            for rule, (pattern, _) in COPIES.items() for m in pattern.finditer(text)]


def test_the_finder_sees_each_copy_and_not_the_kernel_call():
    text = ('now = datetime.now(UTC).replace(tzinfo=None)\n'
            'stamp = f"{t:%Y-%m-%dT%H:%M:%SZ}"\nfine = iso_z(t)\n'
            'x = t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")\nback = timedelta(hours=6)\n')
    assert copies_in(text) == [("now", 1), ("ISO Z time", 2), ("ISO Z time", 4), ("squatting lookback", 5)]


def test_the_finder_sees_billed_line_and_severity_copies_and_not_the_kernel_calls():
    text = ('money = lines.filter(pl.col("kind").is_in(["charge", "idle"]))\n'
            "sql = \"WHERE kind NOT IN ('over-allocated', 'capacity-unknown', 'unpriced')\"\n"
            'fine = lines.filter(billed(lines))\n'
            'order = ("warning", "second-warning", "preempt-eligible")\n'
            'rank = {"info": 0, "warning": 1}\n'
            'late = minutes >= squatting.preempt_minutes\n'
            'fine = severity_at(minutes, squatting)\nkinds = (("charge", "charged"), ("idle", "idle"))\n'
            'valid = self.warn_minutes < self.second_warn_minutes\n')
    assert copies_in(text) == [("billed lines", 1), ("billed lines", 2), ("severity ladder", 4),
                               ("severity ladder", 5), ("severity ladder", 6)]


def test_no_kernel_rule_is_written_by_hand():
    found = []
    for folder in FOLDERS:
        for path in sorted([*(ROOT / folder).rglob("*.py"), *(ROOT / folder).rglob("*.sql")]):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("gpuledger/") and rel.split("/")[1] in FOLDERS:  # (links to the folders)
                continue
            if rel.startswith("warehouse/migrations/"):  # applied history: never edited
                continue
            for rule, line in copies_in(path.read_text(encoding="utf-8")):
                if COPIES[rule][1] != rel:
                    found.append(f"{rel}:{line}: {rule} (use the kernel's)")
    assert found == []
