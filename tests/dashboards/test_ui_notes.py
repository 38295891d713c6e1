"""The squatters page's note on findings idle for the whole 6-h evidence window: their minutes
(360) are a floor. Shown only when such a finding is in the table; counted to the minute, as
enforcement counts a finding capped (enforce/inputs.py: >= 359)."""

from __future__ import annotations

import polars as pl
from gpuledger.dashboards.ui import capped_idle_note


def test_no_note_without_a_finding_at_the_window():
    assert capped_idle_note(pl.Series([61.0, 200.0, 358.9])) is None
    assert capped_idle_note(pl.Series([], dtype=pl.Float64)) is None


def test_the_note_counts_the_findings_at_the_window():
    assert capped_idle_note(pl.Series([360.0, 75.0])) == (
        "Idle since and idle (min) are counted within the evidence's last 6 h: 1 finding at 360 min was idle at "
        "least that long, since that time or earlier.")
    assert capped_idle_note(pl.Series([360.0, 359.0, 120.0])) == (
        "Idle since and idle (min) are counted within the evidence's last 6 h: 2 findings at 360 min were idle at "
        "least that long, since that time or earlier.")
