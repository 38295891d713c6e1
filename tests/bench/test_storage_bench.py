"""The storage benchmark's wait attribution (benchmarks/storage_bench.py): a pure function over
the readers' wait spans and the writer's phases, checked on hand-made timelines."""

from __future__ import annotations

import pytest

from benchmarks.storage_bench import attribute_waits, phase_stats


def test_a_wait_is_split_over_the_writer_phases_it_overlaps():
    # The reader asked at 10.0 and waited 2.0 s at the gate: [10.0, 12.0]. The writer drained
    # readers 9.0-10.5 (0.5 s of it inside the wait), opened 10.5-10.6 (0.1), worked 10.6-11.8
    # (1.2), closed 11.8-11.9 (0.1); 11.9-12.0 (0.1) no phase covers: "other".
    phases = [("drain", 9.0, 10.5), ("open", 10.5, 10.6), ("work", 10.6, 11.8), ("close", 11.8, 11.9),
              ("let_in", 11.9, 11.9), ("work", 20.0, 21.0)]
    short = (30.0, 0.01, 0.0)  # a short wait at 30.0, overlapping nothing
    split = attribute_waits([short, (10.0, 2.0, 0.0), None], phases, top=0.5)
    assert split["n"] == 1 and split["longest_total_ms"] == pytest.approx(2000)
    got = split["longest_ms"]
    for name, ms in {"drain": 500, "open": 100, "work": 1200, "close": 100, "other": 100, "gate": 0}.items():
        assert got[name] == pytest.approx(ms), name
    assert split["mean_ms_of_top"] == pytest.approx(got)
    assert attribute_waits([None], phases) == {}


def test_phase_stats_count_and_the_longest():
    stats = phase_stats([("work", 0.0, 1.0), ("work", 2.0, 2.5), ("close", 1.0, 1.25)])
    assert stats["work"]["n"] == 2 and stats["work"]["max_ms"] == pytest.approx(1000)
    assert stats["close"] == {"n": 1, "p50_ms": pytest.approx(250), "max_ms": pytest.approx(250)}
    assert "drain" not in stats
