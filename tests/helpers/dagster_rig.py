"""Real Dagster servers for tests: start a webserver and a daemon as their own process groups,
talk to the webserver's GraphQL API, kill a process tree the way a crashed pod dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

LOCATION_MODULE = "gpuledger.pipelines.definitions"
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN = """query Run($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status startTime endTime } } }"""
RUN_EVENTS = """
query Events($id: ID!) {
  logsForRun(runId: $id) { __typename ... on EventConnection { events { __typename ... on MessageEvent { message } } } }
}"""
RUNS = """
query Runs($filter: RunsFilter!) { runsOrError(filter: $filter) { __typename ... on Runs { results { runId status } } } }"""
LOCATIONS = """{ repositoriesOrError { __typename ... on RepositoryConnection { nodes { name location { name } } } } }"""
TICKS = """
query Ticks($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) {
    __typename
    ... on Schedule { scheduleState { status ticks(limit: 10) { status runIds timestamp skipReason } } }
  }
}"""
SCHEDULE_ID = """
query Schedule($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) { __typename ... on Schedule { scheduleState { id status } } }
}"""
STOP_SCHEDULE = """
mutation Stop($id: String!) {
  stopRunningSchedule(id: $id) { __typename ... on ScheduleStateResult { scheduleState { status } } }
}"""
SCHEDULES = """
query Schedules($selector: RepositorySelector!) {
  repositoryOrError(repositorySelector: $selector) { __typename ... on Repository { schedules { name } } }
}"""
ALL_RUNS = """
query Runs($filter: RunsFilter!) { runsOrError(filter: $filter) { __typename ... on Runs { results { runId jobName } } } }"""
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}
UNFINISHED = ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def until(deadline: float, what: str, probe, interval: float = 1.0):
    """Poll ``probe`` until it returns something truthy or the deadline (monotonic) passes."""
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except requests.RequestException as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class GraphQL:
    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}/graphql"

    def __call__(self, query: str, **variables) -> dict:
        response = requests.post(self.url, json={"query": query, "variables": variables}, timeout=30)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    def location(self, deadline: float) -> tuple[str, str]:
        """(location, repository) once the code location has loaded."""
        nodes = until(deadline, "the code location to load",
                      lambda: self(LOCATIONS)["repositoriesOrError"].get("nodes"))
        return nodes[0]["location"]["name"], nodes[0]["name"]

    def launch(self, location: str, repository: str, job: str, tags: dict[str, str] | None = None) -> str:
        launched = self(LAUNCH, params={
            "selector": {"repositoryLocationName": location, "repositoryName": repository, "jobName": job},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
        })["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def run(self, run_id: str) -> dict:
        return self(RUN, id=run_id)["runOrError"]

    def finished(self, run_id: str, deadline: float) -> dict:
        return until(deadline, f"run {run_id} to finish",
                     lambda: (r := self.run(run_id))["status"] in FINISHED and r)

    def runs(self, job: str, statuses: list[str]) -> list[str]:
        """Ids of ``job``'s runs in one of ``statuses`` (e.g. STARTED)."""
        found = self(RUNS, filter={"pipelineName": job, "statuses": statuses})["runsOrError"]["results"]
        return [r["runId"] for r in found]

    def messages(self, run_id: str) -> list[str]:
        events = self(RUN_EVENTS, id=run_id)["logsForRun"]["events"]
        return [e.get("message") or "" for e in events]

    def schedules(self, location: str, repository: str) -> list[str]:
        selector = {"repositoryLocationName": location, "repositoryName": repository}
        return [s["name"] for s in self(SCHEDULES, selector=selector)["repositoryOrError"]["schedules"]]

    def stop_schedule(self, location: str, repository: str, schedule: str, deadline: float) -> None:
        """Stop ``schedule`` (as the UI's toggle does): it launches nothing more.

        A schedule running by default has no stored state until the daemon first evaluates it;
        Dagster's stop reads the state, then inserts a STOPPED one, so a daemon storing its state
        between the two makes the insert a duplicate key and the mutation a 500 (seen in CI on
        PostgreSQL). As a user would click again, the stop is retried on the state now stored."""
        selector = {"repositoryLocationName": location, "repositoryName": repository, "scheduleName": schedule}

        def stopped() -> bool:
            state = self(SCHEDULE_ID, selector=selector)["scheduleOrError"]["scheduleState"]
            if state["status"] != "RUNNING":
                return True
            result = self(STOP_SCHEDULE, id=state["id"])["stopRunningSchedule"]
            assert result["scheduleState"]["status"] == "STOPPED", result
            return True

        until(deadline, f"{schedule} to stop", stopped, 1.0)

    def unfinished_runs(self, statuses: list[str] | None = None) -> list[tuple[str, str]]:
        """(job, run id) of every run not finished (or in ``statuses``), of any job."""
        found = self(ALL_RUNS, filter={"statuses": statuses or UNFINISHED})["runsOrError"]["results"]
        return [(r["jobName"], r["runId"]) for r in found]

    def ticks(self, location: str, repository: str, schedule: str) -> dict:
        selector = {"repositoryLocationName": location, "repositoryName": repository, "scheduleName": schedule}
        return self(TICKS, selector=selector)["scheduleOrError"]["scheduleState"]


def ingest_run_tags(gql: GraphQL, location: str, repository: str, deadline: float,
                    cluster: str = "sim") -> dict[str, str]:
    """The tags of an ingest_job run launched by hand: its cluster partition (the packaged example
    names one cluster, sim), once ingest_schedule's first tick has made the cluster partitions."""
    until(deadline, "ingest_schedule's first tick (it makes the cluster partitions)",
          lambda: any(t["status"] == "SUCCESS" for t in gql.ticks(location, repository, "ingest_schedule")["ticks"]),
          1.0)
    return {"dagster/partition": cluster}


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    """A server in its own session (process group), output to ``log``."""
    out = open(log, "a")  # noqa: SIM115 - the child keeps it; closed with the process
    try:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        out.close()


def migrate_instance(env: dict, log: Path) -> None:
    """Dagster's schema made by one process first, as the deployments do (the StatefulSet's
    dagster-instance init container, gpuledger-migrate.service): a webserver and a daemon making it
    at once on an empty PostgreSQL collide ("type asset_keys already exists")."""
    with open(log, "a") as out:
        done = subprocess.run([str(BIN / "dagster"), "instance", "migrate"], cwd=REPO, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, log.read_text()[-3000:]


def webserver(env: dict, port: int, log: Path) -> subprocess.Popen:
    return start([str(BIN / "dagster-webserver"), "-m", LOCATION_MODULE, "-h", "127.0.0.1", "-p", str(port)],
                 env, log)


def daemon(env: dict, log: Path) -> subprocess.Popen:
    return start([str(BIN / "dagster-daemon"), "run", "-m", LOCATION_MODULE], env, log)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc: a run worker may sit in its own process group)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def kill_tree(proc: subprocess.Popen) -> list[int]:
    """SIGKILL ``proc`` and every process below it at once (a pod's container dying, OOM): the
    daemon, its code server and the run workers that server launched. Returns the pids killed."""
    tree = [proc.pid, *descendants(proc.pid)]
    _signal(tree, signal.SIGKILL)
    proc.wait(timeout=10)
    assert not _wait_gone(tree[1:], 30), "a process of the killed tree survived SIGKILL"
    return tree


def stop(proc: subprocess.Popen) -> None:
    """SIGINT the process group (Ctrl-C), SIGKILL what is left after 30 s, and every child."""
    if proc.poll() is not None:
        return
    tree = [proc.pid, *descendants(proc.pid)]
    try:
        os.killpg(os.getpgid(proc.pid), signal.SIGINT)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    _signal(_wait_gone(tree, 10), signal.SIGKILL)
    proc.wait(timeout=10)
    assert not _wait_gone(tree, 10), "a server process survived SIGKILL"
