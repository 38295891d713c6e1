"""The rules kernel is used, not copied (issue 40): the one "now" (gpuledger.rules.clock.utc_now), the
one ISO-8601 writer (iso_z / iso_z_us / epoch_iso_z) and the one squatting lookback
(analytics.squatting.LOOKBACK) are written by hand nowhere else in the product's code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("gpuledger", "warehouse", "enforce", "pipelines", "dashboards")
# rule -> (the hand-written copy, the one file allowed to hold it: the kernel's own)
COPIES = {
    "now": (re.compile(r"datetime\.now\((?:UTC|timezone\.utc|tz=UTC)\)\.replace\(tzinfo=None\)"), "gpuledger/rules/clock.py"),
    "ISO Z time": (re.compile(r"%Y-%m-%dT%H:%M:%S(?:\.%f)?Z"), "gpuledger/rules/clock.py"),
    "squatting lookback": (re.compile(r"timedelta\(hours=6\)"), "gpuledger/analytics/squatting.py"),
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


def test_no_kernel_rule_is_written_by_hand():
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("gpuledger/") and rel.split("/")[1] in FOLDERS:  # (links to the folders)
                continue
            for rule, line in copies_in(path.read_text(encoding="utf-8")):
                if COPIES[rule][1] != rel:
                    found.append(f"{rel}:{line}: {rule} (use the kernel's)")
    assert found == []
