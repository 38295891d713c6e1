"""A real full disk for a test: a small tmpfs mounted in a private mount namespace
(``unshare --map-root-user --mount``, no root needed where user namespaces are allowed), on which a
warehouse is seeded, the disk filled to the last byte by a filler file, one writer run, and the
warehouse read back before and after the filler is removed.

:func:`run_on_full_disk` runs this module as a script inside the namespace (the tmpfs vanishes with
it) and returns what it saw as a dict; :func:`available` says whether this machine allows it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}


def available() -> str | None:
    """None when a private tmpfs can be mounted here; else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    ran = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c",
                          "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d && rmdir $d"],
                         capture_output=True, text=True, timeout=30, check=False)
    return None if ran.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {ran.stderr.strip()}"


def run_on_full_disk(mount: Path, size: str, seed: list[list[str]], writer: list[str], after: list[str],
                     cwd: Path, leave_bytes: int = 0) -> dict:
    """Inside a new mount namespace: a ``size`` tmpfs at ``mount`` (an empty folder), the CLI
    commands ``seed`` (``{w}`` is the warehouse on it), the disk filled, ``writer`` run, the table
    counts read, the filler removed, ``after`` run. ``leave_bytes``: room left free for the writer. Returns {"seeded", "writer", "full", "after",
    "freed"}: counts and {"code", "stderr", "stdout"} of each command."""
    spec = json.dumps({"mount": str(mount), "size": size, "seed": seed, "writer": writer, "after": after,
                       "leave": leave_bytes})
    ran = subprocess.run(["unshare", "--map-root-user", "--mount", sys.executable, __file__,
                          spec], cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, **ENV})
    if ran.returncode != 0:
        raise RuntimeError(f"the full-disk driver failed ({ran.returncode}): {ran.stderr[-3000:]}")
    return json.loads(ran.stdout.strip().splitlines()[-1])


def counts(path: Path) -> dict[str, int]:
    with duckdb.connect(str(path), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _cli(args: list[str], w: Path) -> dict:
    """A CLI command, or (``["--python", CODE]``) a Python program, ``{w}`` the warehouse."""
    argv = ["-c", args[1]] if args[0] == "--python" else ["-m", "gpuledger.cli", *args]
    ran = subprocess.run([sys.executable, *(a.replace("{w}", str(w)) for a in argv)],
                         capture_output=True, text=True, timeout=300, check=False)
    return {"code": ran.returncode, "stderr": ran.stderr, "stdout": ran.stdout}


def _fill(folder: Path) -> Path:
    """Write a filler file until the disk refuses another byte."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):  # big pieces, then the last pages, then the last bytes
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    return filler


def _main(spec: dict) -> dict:
    mount = Path(spec["mount"])
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={spec['size']}", "tmpfs", str(mount)], check=True)
    w = mount / "w.duckdb"
    for args in spec["seed"]:
        seeded = _cli(args, w)
        if seeded["code"] != 0:
            raise RuntimeError(f"seeding {args} failed: {seeded['stderr']}")
    out: dict = {"seeded": counts(w)}
    filler = _fill(mount)
    if spec["leave"]:
        os.truncate(filler, max(0, filler.stat().st_size - spec["leave"]))
    out["writer"] = _cli(spec["writer"], w)
    out["full"] = counts(w)  # DuckDB opens it, the write-ahead log replayed in memory
    out["full_read"] = _cli(["warehouse", "summary", "-w", "{w}"], w)
    filler.unlink()
    out["after"] = _cli(spec["after"], w)
    out["freed"] = counts(w)
    return out


if __name__ == "__main__":
    print(json.dumps(_main(json.loads(sys.argv[1]))))
