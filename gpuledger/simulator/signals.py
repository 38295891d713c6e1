"""Sample values: what each device's DCGM fields read at a timestamp, in the exporter's units.

``raw_values(sim, ts, nodes)`` returns 2-D arrays (device x timestamp) named by the legacy DCGM
metric (percent, MiB, W, mJ, MHz, C) with the dirt planted (blanks), plus the job holding each
device. Shapes follow the job: training is busy with checkpoint dips, inference follows the day,
notebooks come in bursts, squatters hold memory and do nothing, idle GPUs read zero. MIG instances
read GPU_UTIL 0 (as real) and repeat their GPU's power and energy. Everything is computed from
(seed, device, timestamp) hashes, never from a running state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuledger.simulator import dirt
from gpuledger.simulator.noise import SALT, normalish, uniform
from gpuledger.simulator.workload import (
    BATCH, FAILING, FINE_TUNE, IDLE, INFERENCE, INTERACTIVE, SQUAT, TRAINING,
)

POWER_SPAN = 0.95  # share of (TDP - idle) drawn at full activity
ENERGY_ORIGIN_J = (4e8, 2e9)  # counter value at the window start: the GPUs have run for a while
# Average activity of a job relative to its level, for the energy counter's closed form.
_MEAN_ACT = {IDLE: 0.0, TRAINING: 0.93, FINE_TUNE: 0.93, BATCH: 1.0, INFERENCE: 0.47,
             INTERACTIVE: 0.375, SQUAT: 0.0, FAILING: 0.15}  # interactive: bursts in half the spells x 0.75
_TENSOR = {TRAINING: 0.55, FINE_TUNE: 0.45, BATCH: 0.3, INFERENCE: 0.25, INTERACTIVE: 0.2, FAILING: 0.1}


@dataclass
class RawValues:
    """Device x timestamp arrays for a set of nodes."""

    devices: np.ndarray  # device indices (rows)
    ts: np.ndarray  # epoch s (columns)
    metrics: dict[str, np.ndarray]  # legacy DCGM metric name -> float64 array, exporter units
    job: np.ndarray  # job index holding the device (first lane), -1 when idle


def devices_of_nodes(sim, nodes: np.ndarray | None) -> np.ndarray:
    hw = sim.hardware
    if nodes is None:
        return np.arange(hw.n_devices)
    return np.flatnonzero(np.isin(hw.dev_node, np.asarray(nodes)))


def _lane_jobs(sim, lanes: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Job index on each lane at each t (-1: free), via one searchsorted over (lane, start) keys."""
    wl = sim.workload
    if len(wl.alloc_lane) == 0:
        return np.full((len(lanes), len(ts)), -1, dtype=np.int64)
    keys = (wl.alloc_lane << 32) | wl.alloc_start
    query = (lanes[:, None] << 32) | ts[None, :]
    idx = np.searchsorted(keys, query, side="right") - 1
    safe = np.clip(idx, 0, None)
    valid = (idx >= 0) & (wl.alloc_lane[safe] == lanes[:, None]) & (ts[None, :] < wl.alloc_end[safe])
    return np.where(valid, wl.alloc_job[safe], -1)


def _activity(sim, job: np.ndarray, device: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """SM-active ratio of a lane running ``job`` (-1 = idle) at t."""
    wl = sim.workload
    seed = sim.seed
    j = np.clip(job, 0, None)
    b = np.where(job >= 0, wl.job_behaviour[j], IDLE)
    level = wl.job_level[j]
    elapsed = ts[None, :] - wl.job_start[j]
    n = normalish(seed, SALT["act"], device[:, None], ts[None, :])
    u = uniform(seed, SALT["act"], device[:, None], ts[None, :], 9)
    ckpt = wl.job_ckpt_period_s[j]
    steady = np.where((elapsed % ckpt) < 150, 0.02 + 0.02 * u, level + 0.04 * n)
    train = np.where(elapsed < 300, 0.05 + 0.03 * u, steady)
    batch = np.where(elapsed < 120, 0.1, level + 0.12 * n)
    hour = (ts[None, :] % 86400) / 3600.0
    diurnal = 0.5 + 0.5 * np.cos(2 * np.pi * (hour - 15.0) / 24.0)
    infer = level * (0.1 + 0.75 * diurnal) + 0.04 * n
    # a session at the keyboard runs something in half of its 10-minute spells: an hour with none
    # is rare (1.6 % of hours) and is what the squatting rules should see
    burst = uniform(seed, SALT["burst"], j, ts[None, :] // 600) < 0.5
    notebook = np.where(burst, level * (0.5 + 0.5 * u), 0.003 * u)
    squat = np.where(elapsed < 300, 0.2, 0.002 * u)
    failing = 0.15 + 0.05 * n
    act = np.select(
        [b == TRAINING, b == FINE_TUNE, b == BATCH, b == INFERENCE, b == INTERACTIVE, b == SQUAT,
         b == FAILING],
        [train, train, batch, infer, notebook, squat, failing], 0.0)
    return np.clip(act, 0.0, 1.0)


def alloc_mean_activity(wl) -> np.ndarray:
    """Mean activity ratio (behaviour's mean x the job's level) of each allocation segment, computed
    once per workload: every chunk's energy counter needs it for every segment of the window, and
    a Python lookup per segment per chunk made writing a month of 16,384 GPUs quadratic in its
    length (1.4 M segments x 1,700 chunks)."""
    key = (wl.alloc_job, wl.job_behaviour, wl.job_level)  # the arrays it is computed from, by identity
    cached = wl.__dict__.get("_alloc_mean_activity")
    if cached is None or any(a is not b for a, b in zip(cached[0], key, strict=True)):
        jobs = wl.alloc_job
        mean = np.vectorize(_MEAN_ACT.get, otypes=[float])(wl.job_behaviour[jobs]) * wl.job_level[jobs]
        cached = wl.__dict__["_alloc_mean_activity"] = (key, mean)
    return cached[1]


def _energy_j(sim, phys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Energy counter (J) of physical GPUs at t: closed-form integral of each allocation's mean
    power over [counter origin, t], restarting from 0 at a driver reload."""
    hw, wl = sim.hardware, sim.workload
    reset = dirt.energy_reset_at(sim)[phys]  # (P,)
    after = ts[None, :] >= reset[:, None]
    origin = np.where(after, reset[:, None], sim.start_s)  # (P, T)
    e0 = np.where(after, 0.0, ENERGY_ORIGIN_J[0] + (ENERGY_ORIGIN_J[1] - ENERGY_ORIGIN_J[0])
                  * uniform(sim.seed, SALT["power"], phys)[:, None])
    idle = hw.phys_idle_w[phys][:, None]
    energy = e0 + idle * (ts[None, :] - origin)
    if len(wl.alloc_lane):
        dev = hw.lane_device[wl.alloc_lane]
        seg_phys = hw.dev_phys[dev]
        row_of = np.full(hw.n_phys, -1)
        row_of[phys] = np.arange(len(phys))
        rows = row_of[seg_phys]
        keep = rows >= 0
        rows = rows[keep]
        s, e = wl.alloc_start[keep], wl.alloc_end[keep]
        mean = alloc_mean_activity(wl)[keep]
        w = ((hw.phys_tdp_w - hw.phys_idle_w)[seg_phys[keep]] * POWER_SPAN * mean
             * hw.dev_fraction[dev[keep]] * hw.lane_share[wl.alloc_lane[keep]])
        t0, t1 = ts.min(), ts.max()  # noqa: F841 (t0 documents the split)
        done = e <= t0
        # segments over before the first t: constant per row for each of the two origins
        a_start = np.full(len(phys), sim.start_s)
        a_reset = reset
        const_pre = np.zeros(len(phys))
        const_post = np.zeros(len(phys))
        np.add.at(const_pre, rows[done], w[done] * np.clip(e[done] - np.maximum(s[done], a_start[rows[done]]), 0, None))
        np.add.at(const_post, rows[done], w[done] * np.clip(e[done] - np.maximum(s[done], a_reset[rows[done]]), 0, None))
        energy += np.where(after, const_post[:, None], const_pre[:, None])
        live = ~done & (s <= t1)
        if live.any():
            r = rows[live]
            lo = np.maximum(s[live][:, None], origin[r])
            hi = np.minimum(e[live][:, None], ts[None, :])
            contrib = w[live][:, None] * np.clip(hi - lo, 0, None)
            np.add.at(energy, r, contrib)
    return energy


def first_lane_jobs(ljob: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """Job index per (device row, t): that of the device's lowest lane running a job then (the first
    lane wins the labels), -1 where none does. ``ljob`` (lanes x T) is each lane's job (-1 free),
    ``rows`` each lane's device row, lanes in ascending order. One pass for all lanes (a loop over
    lanes cost 19,000 numpy calls per chunk at 16,384 GPUs)."""
    n_lanes, n_ts = ljob.shape
    lane_k = np.where(ljob >= 0, np.arange(n_lanes)[:, None], n_lanes)
    first = np.full((n_rows, n_ts), n_lanes)
    np.minimum.at(first, rows, lane_k)
    if n_lanes == 0:
        return np.full((n_rows, n_ts), -1, dtype=np.int64)
    return np.where(first < n_lanes, ljob[np.minimum(first, n_lanes - 1), np.arange(n_ts)[None, :]], -1)


def raw_values(sim, ts: np.ndarray, nodes: np.ndarray | None = None) -> RawValues:
    """Exporter-unit values for every device of ``nodes`` (all when None) at epoch seconds ``ts``."""
    hw, wl = sim.hardware, sim.workload
    ts = np.asarray(ts, dtype=np.int64)
    devices = devices_of_nodes(sim, nodes)
    dev_row = np.full(hw.n_devices, -1)
    dev_row[devices] = np.arange(len(devices))
    lanes = np.flatnonzero(dev_row[hw.lane_device] >= 0)
    lane_dev = hw.lane_device[lanes]
    ljob = _lane_jobs(sim, lanes, ts)
    lact = _activity(sim, ljob, lane_dev, ts)
    share = hw.lane_share[lanes][:, None]
    rows = dev_row[lane_dev]
    shape = (len(devices), len(ts))
    act = np.zeros(shape)
    np.add.at(act, rows, lact * share)
    act = np.clip(act, 0, 1)
    j = np.clip(ljob, 0, None)
    held = np.where(ljob >= 0, wl.job_fb_ratio[j], 0.0)
    fb_ratio = np.zeros(shape)
    np.add.at(fb_ratio, rows, held * share)
    tensor_frac = np.zeros(shape)
    tf = np.vectorize(lambda b: _TENSOR.get(b, 0.0), otypes=[float])(
        np.where(ljob >= 0, wl.job_behaviour[j], IDLE))
    np.maximum.at(tensor_frac, rows, tf)
    job = first_lane_jobs(ljob, rows, len(devices))

    dev_col = devices[:, None]
    u = uniform(sim.seed, SALT["tensor"], dev_col, ts[None, :])
    busy = act > 0.005
    gr = np.clip(np.where(busy, act * 1.06 + 0.01 * u, 0.0), 0, 1)
    tensor = np.clip(act * tensor_frac * (0.9 + 0.2 * u), 0, 1)
    dram = np.clip(act * (0.3 + 0.2 * uniform(sim.seed, SALT["dram"], dev_col, ts[None, :])), 0, 1)
    is_mig = hw.dev_is_mig[devices][:, None]
    util = np.where(busy & ~is_mig, np.clip(np.round(35 + 65 * np.sqrt(gr)), 0, 100), 0.0)
    fb_total = hw.dev_fb_total_mib[devices][:, None]
    fb_used = np.round(fb_ratio * fb_total)
    fb_free = fb_total - fb_used
    fb_reserved = np.broadcast_to(
        (hw.devices["fb_reserved_mib"].to_numpy()[devices]).astype(float)[:, None], shape)

    # device-level: power, energy, clocks, temperature per physical GPU, repeated on MIG instances
    phys = np.unique(hw.dev_phys[devices])
    phys_row = np.full(hw.n_phys, -1)
    phys_row[phys] = np.arange(len(phys))
    prow = phys_row[hw.dev_phys[devices]]
    phys_act = np.zeros((len(phys), len(ts)))
    np.add.at(phys_act, prow, act * hw.dev_fraction[devices][:, None])
    phys_act = np.clip(phys_act, 0, 1)
    idle_w, tdp_w = hw.phys_idle_w[phys][:, None], hw.phys_tdp_w[phys][:, None]
    pn = normalish(sim.seed, SALT["power"], phys[:, None], ts[None, :])
    power = np.clip(idle_w + (tdp_w - idle_w) * POWER_SPAN * phys_act + 0.015 * idle_w * pn, idle_w * 0.9, tdp_w)
    power = np.round(power, 3)
    energy_mj = np.round(_energy_j(sim, phys, ts) * 1000.0)
    clock = np.where(phys_act > 0.01,
                     np.round(hw.phys_max_clock[phys][:, None] * (0.88 + 0.1 * uniform(sim.seed, SALT["clock"], phys[:, None], ts[None, :]))),
                     345.0)
    temp = np.round(29 + 45 * phys_act + 2 * uniform(sim.seed, SALT["temp"], phys[:, None], ts[None, :]))

    metrics = {
        "DCGM_FI_PROF_SM_ACTIVE": np.round(act, 6),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.round(gr, 6),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.round(tensor, 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": np.round(dram, 6),
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_FB_USED": fb_used,
        "DCGM_FI_DEV_FB_FREE": fb_free,
        "DCGM_FI_DEV_FB_RESERVED": np.array(fb_reserved),
        "DCGM_FI_DEV_POWER_USAGE": power[prow],
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy_mj[prow],
        "DCGM_FI_DEV_SM_CLOCK": clock[prow],
        "DCGM_FI_DEV_GPU_TEMP": temp[prow],
    }
    for name, blank in dirt.SENTINEL_FIELDS.items():
        mask = dirt.sentinel_mask(sim, name, dev_col, ts[None, :])
        if mask.any():
            metrics[name] = np.where(mask, blank, metrics[name])
    return RawValues(devices=devices, ts=ts, metrics=metrics, job=job)
