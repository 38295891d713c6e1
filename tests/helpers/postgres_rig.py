"""A real PostgreSQL (Debian's ``postgresql`` package, installed by scripts/install-test-deps.sh)
for tests: a private data directory, a free 127.0.0.1 port, trust authentication, one database.

``with PostgresRig() as pg: pg.env`` gives the DAGSTER_PG_* variables the production instance
config (deploy/kubernetes/base/dagster.yaml) reads. PostgreSQL refuses to run as root, so as
root the server runs as the ``postgres`` user the package creates; its data directory is then a
fresh ``mkdtemp`` folder that user can reach (pytest's tmp_path sits under a root-only folder).
Stopped with SIGINT (PostgreSQL's "fast" shutdown), then the folder is removed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DB = "dagster"
USER = "gpuledger"


def pg_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin holding initdb and postgres, else None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def have_postgres() -> bool:
    return pg_bindir() is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresRig:
    def __init__(self, ready_timeout_s: float = 60.0):
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server: run scripts/install-test-deps.sh (Debian's postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="gpuledger-pg-"))
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.data = self.root / "data"
        self.port = _free_port()
        self.log_path = self.root / "postgres.log"
        self._run([str(bindir / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                   "--no-sync"])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - open for the server's life
        self.process = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=100"],
            stdout=self._log, stderr=subprocess.STDOUT, user=self.user)
        deadline = time.monotonic() + ready_timeout_s
        while subprocess.run([str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                             capture_output=True).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start; see {self.log_path}")
            time.sleep(0.2)
        self._run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, DB])

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, user=self.user, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stderr[-2000:]}")

    def sql(self, statement: str) -> str:
        """``statement`` run by psql in the database; its unaligned output."""
        done = subprocess.run([str(pg_bindir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                               "-d", DB, "-At", "-v", "ON_ERROR_STOP=1", "-c", statement],
                              capture_output=True, text=True, user=self.user, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr[-2000:]}")
        return done.stdout

    def tables(self) -> set[str]:
        """The tables of the database's public schema."""
        return set(self.sql("select tablename from pg_tables where schemaname = 'public'").split())

    @property
    def env(self) -> dict[str, str]:
        """What deploy/kubernetes/base/dagster.yaml reads."""
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_DB": DB,
                "DAGSTER_PG_USER": USER, "DAGSTER_PG_PASSWORD": ""}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if hasattr(self, "_log"):
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresRig:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
