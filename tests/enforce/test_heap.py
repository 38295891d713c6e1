"""gpuledger.heap.collector_paused, which an enforcement cycle's steps run under (issue 41): the
cyclic collector is off inside and as it was after, an error included; nested pauses keep it off."""

from __future__ import annotations

import gc

import pytest

from gpuledger.heap import collector_paused


@collector_paused()
def _inside() -> bool:
    return gc.isenabled()


def test_paused_inside_and_enabled_again_after():
    assert gc.isenabled()  # pytest runs with the collector on
    assert _inside() is False and gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a step failed")
    assert gc.isenabled()


def test_nested_pauses_and_a_process_that_had_it_off():
    with collector_paused():
        assert _inside() is False and not gc.isenabled()  # the inner one leaves it off
    assert gc.isenabled()
    gc.disable()
    try:
        assert _inside() is False and not gc.isenabled()  # off before: not switched on by the pause
    finally:
        gc.enable()
