"""DuckDB's buffer manager is bounded beside polars (warehouse/memory.py): half of what the process
may use by default, the smaller of RAM and the cgroup's limit; GPULEDGER_DUCKDB_MEMORY_LIMIT sets it.
The /proc and cgroup files here are laid out as Linux writes them (v2: ``0::/path`` and
``memory.max``; v1: ``N:memory:/path`` and ``memory.limit_in_bytes``)."""

from __future__ import annotations

import pytest
from gpuledger.warehouse.memory import MEMORY_LIMIT_ENV, MemoryLimitError, memory_limit, usable_bytes

from gpuledger import warehouse

GIB = 2**30


def _proc(tmp_path, cgroup_lines: str, mem_kib: int = 16 * 2**20):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       {mem_kib} kB\nMemFree:        1000 kB\n")
    (proc / "self/cgroup").write_text(cgroup_lines)
    return proc


def test_a_cgroup_v2_limit_above_the_process_bounds_what_it_may_use(tmp_path):
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n")  # 16 GiB of RAM
    root = tmp_path / "cgroup"
    (root / "kubepods/pod1/ctr").mkdir(parents=True)
    (root / "kubepods/pod1/ctr/memory.max").write_text("max\n")  # the container sets none ...
    (root / "kubepods/pod1/memory.max").write_text(f"{2 * GIB}\n")  # ... its pod 2 GiB
    assert usable_bytes(proc, root) == 2 * GIB
    # the default: half of 2 GiB = 1024 MiB
    assert memory_limit({}, lambda: usable_bytes(proc, root)) == "1024MiB"


def test_a_cgroup_v1_limit_and_v1_unlimited(tmp_path):
    proc = _proc(tmp_path, "4:memory:/process_api/abc\n3:cpuset:/\n", mem_kib=8 * 2**20)  # 8 GiB
    root = tmp_path / "cgroup"
    (root / "memory/process_api/abc").mkdir(parents=True)
    (root / "memory/process_api/abc/memory.limit_in_bytes").write_text("9223372036854771712\n")  # none
    assert usable_bytes(proc, root) == 8 * GIB  # the machine's RAM
    (root / "memory/process_api/abc/memory.limit_in_bytes").write_text(f"{3 * GIB}\n")
    assert usable_bytes(proc, root) == 3 * GIB
    # 30 % of 3 GiB = 921.6 MiB, floored to whole MiB
    assert memory_limit({MEMORY_LIMIT_ENV: "30%"}, lambda: usable_bytes(proc, root)) == "921MiB"


def test_the_setting_takes_a_size_or_a_share_and_refuses_anything_else():
    assert memory_limit({MEMORY_LIMIT_ENV: "4GiB"}, lambda: None) == "4GiB"
    assert memory_limit({MEMORY_LIMIT_ENV: " 512 MB "}, lambda: None) == "512MB"
    assert memory_limit({}, lambda: None) is None  # nothing to take half of: DuckDB's own default
    # a share never goes below DuckDB's ~128 MB per thread (a query would fail, not spill)
    assert memory_limit({MEMORY_LIMIT_ENV: "1%"}, lambda: 1 * GIB) == "128MiB"
    for bad in ("lots", "0%", "150%", "4 gigs"):
        with pytest.raises(MemoryLimitError, match=MEMORY_LIMIT_ENV):
            memory_limit({MEMORY_LIMIT_ENV: bad}, lambda: GIB)


def test_every_warehouse_connection_carries_the_limit_and_a_bad_one_is_one_clear_line(tmp_path, monkeypatch):
    path = tmp_path / "gpuledger.duckdb"
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "300MiB")
    with warehouse.open_writer(path) as con:
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "300.0 MiB"
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "200MiB")
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "200.0 MiB"
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(warehouse.WarehouseError, match="GPULEDGER_DUCKDB_MEMORY_LIMIT='lots': give a size"), \
            warehouse.open_reader(path):
        pass
