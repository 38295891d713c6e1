"""The NVML agent.

The no-driver path runs for real: this test machine has no NVIDIA driver, so the genuine pynvml
fails in nvmlInit and the agent must exit 1 with one line. Readings are tested with a fake NVML
module passed in as a parameter — a stand-in for the driver, since no GPU can run here; the
fake mirrors pynvml's function names, units (mW, mJ, percent, bytes) and NotSupported errors.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.ingest.metrics.nvml import read_devices, readings_frames, write_readings
from gpuledger.cli.ingest.agent import app as nvml_app
from gpuledger.ingest.metrics.agent import run_agent

GIB = 2**30
TS = datetime(2026, 11, 29, 12, 0, 0)


class FakeNVMLError(Exception):
    pass


class FakeNotSupported(FakeNVMLError):
    pass


class FakeNVML:
    """pynvml's surface for two GPUs: GPU 0 an H100 at 73 % busy, GPU 1 an A100 with MIG on
    (instances 1g.10gb and 3g.40gb; NVML reports no utilisation or power for MIG instances)."""

    NVMLError = FakeNVMLError
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: int = 2):
        self.gpus = gpus
        self.initialised = False
        self.energy_mj = 5_000_000

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self.initialised = True

    def nvmlShutdown(self):  # noqa: N802
        self.initialised = False

    def nvmlDeviceGetCount(self):  # noqa: N802
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return ("gpu", i)

    def nvmlDeviceGetUUID(self, h):  # noqa: N802
        return f"GPU-0000000{h[1]}"

    def nvmlDeviceGetName(self, h):  # noqa: N802
        if h[0] == "mig":
            return "NVIDIA A100-SXM4-80GB MIG " + ("1g.10gb" if h[2] == 0 else "3g.40gb")
        return b"NVIDIA H100 80GB HBM3" if h[1] == 0 else "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetPciInfo(self, h):  # noqa: N802
        return SimpleNamespace(busId=f"00000000:{h[1] + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        if h[0] == "mig" or h[1] == 1:
            raise FakeNotSupported("Not Supported")
        return SimpleNamespace(gpu=73, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        if h[0] == "mig":
            return SimpleNamespace(used=GIB * (1 + h[2]), total=GIB * (10 if h[2] == 0 else 40), free=0)
        return SimpleNamespace(used=20 * GIB, total=80 * GIB, free=60 * GIB)

    def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
        if h[0] == "mig":
            raise FakeNotSupported("Not Supported")
        return 350_500  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):  # noqa: N802
        if h[0] == "mig":
            raise FakeNotSupported("Not Supported")
        self.energy_mj += 1000
        return self.energy_mj

    def nvmlDeviceGetMigMode(self, h):  # noqa: N802
        if h[1] == 0:
            return [0, 0]
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):  # noqa: N802
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):  # noqa: N802
        if slot > 1:
            raise FakeNVMLError("Not Found")
        return ("mig", h[1], slot)

    def nvmlDeviceGetGpuInstanceId(self, h):  # noqa: N802
        return [7, 1][h[2]]


def test_readings_map_units_models_and_mig():
    readings = read_devices(FakeNVML())
    inventory, samples = readings_frames([(TS, readings)], cluster="lab", host="node-1")
    assert inventory.height == 4 and samples.height == 4
    h100 = samples.filter(gpu_uuid="GPU-00000000").row(0, named=True)
    assert h100["gpu_util_ratio"] == pytest.approx(0.73)
    assert (h100["fb_used_bytes"], h100["fb_total_bytes"]) == (20 * GIB, 80 * GIB)
    assert h100["power_w"] == pytest.approx(350.5) and h100["energy_total_j"] == pytest.approx(5001.0)
    inv = {(r["gpu_uuid"], r["mig_instance_id"]): r for r in inventory.iter_rows(named=True)}
    assert inv[("GPU-00000000", -1)]["model"] == "H100"
    assert inv[("GPU-00000000", -1)]["pci_bus_id"] == "00000000:18:00.0"
    assert inv[("GPU-00000001", -1)]["model"] == "A100"
    small = inv[("GPU-00000001", 7)]
    assert (small["mig_profile"], small["gpu_fraction"], small["model"]) == (
        "1g.10gb",
        pytest.approx(1 / 7),
        "A100",
    )
    assert inv[("GPU-00000001", 1)]["gpu_fraction"] == pytest.approx(3 / 7)
    mig = samples.filter(gpu_uuid="GPU-00000001", mig_instance_id=7).row(0, named=True)
    # Not supported on MIG: NULL, never a made-up 0; device power/energy stay on the parent row.
    assert mig["gpu_util_ratio"] is None and mig["power_w"] is None and mig["energy_total_j"] is None
    assert mig["fb_total_bytes"] == 10 * GIB


def test_write_is_idempotent(tmp_path):
    readings = read_devices(FakeNVML())
    inventory, samples = readings_frames([(TS, readings)], cluster="lab", host="node-1")
    with warehouse.open_writer(tmp_path / "wh.duckdb") as con:
        assert write_readings(con, inventory, samples) == 4
        assert write_readings(con, inventory, samples) == 0
        counts = warehouse.table_counts(con, ("gpus", "gpu_samples"))
        sources = con.execute("SELECT DISTINCT source FROM gpu_samples").fetchall()
    assert counts == {"gpus": 4, "gpu_samples": 4} and sources == [("nvml",)]


def test_a_node_clock_at_the_epoch_is_quarantined_not_stored(tmp_path):
    # issue 36: the agent stamps with this node's clock; one at 1970 would register its GPUs as
    # present since then and bill decades of idle capacity
    from datetime import datetime

    readings = read_devices(FakeNVML())
    inventory, samples = readings_frames([(datetime(1970, 1, 1, 0, 0, 5), readings), (TS, readings)],
                                         cluster="lab", host="node-1")
    with warehouse.open_writer(tmp_path / "wh.duckdb") as con:
        assert write_readings(con, inventory, samples) == 4  # the good round only
        bad = con.execute("SELECT source, reason FROM quarantine").fetchall()
        oldest = con.execute("SELECT min(ts) FROM gpu_samples").fetchone()[0]
        first_seen = con.execute("SELECT min(first_seen) FROM gpus").fetchone()[0]
    assert oldest == TS and first_seen == TS  # not present since 1970
    assert len(bad) == 4 and {s for s, _ in bad} == {"nvml"}  # one row per device
    assert all("sample time before 2000-01-01" in r for _, r in bad)


def test_agent_loop_with_fake_driver(tmp_path):
    fake = FakeNVML(gpus=1)
    stamps = iter([datetime(2026, 11, 29, 12, 0, s) for s in range(10)])
    written = run_agent(
        warehouse_file=tmp_path / "wh.duckdb",
        cluster="lab",
        host="node-1",
        interval_s=0,
        rounds_per_write=2,
        count=3,
        nvml=fake,
        clock=lambda: next(stamps),
    )
    assert written == 3 and not fake.initialised  # shut down after the last write
    with warehouse.open_reader(tmp_path / "wh.duckdb") as con:
        energy = [r[0] for r in con.execute("SELECT energy_total_j FROM gpu_samples ORDER BY ts").fetchall()]
    assert energy == [5001.0, 5002.0, 5003.0]


def test_no_driver_exits_1_with_one_line(tmp_path):
    # Real pynvml on this GPU-less machine: nvmlInit fails (library not found / driver not loaded).
    result = CliRunner().invoke(nvml_app, ["nvml", "--once", "--warehouse", str(tmp_path / "wh.duckdb")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuledger ingest agent nvml: no NVIDIA driver on this host (NVML: ")
    assert lines[0].endswith("run it on a GPU node")
    assert not (tmp_path / "wh.duckdb").exists()


def test_no_driver_in_a_real_process(tmp_path):
    code = "from gpuledger.cli.ingest.agent import app; app()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "nvml", "--once", "--warehouse", str(tmp_path / "w.duckdb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no NVIDIA driver on this host" in proc.stderr
