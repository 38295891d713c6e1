"""A small stand-in for the Kubernetes API server, speaking its real HTTP protocol.

Enough of the API for the official ``kubernetes`` Python client to list and watch pods, nodes and
Kueue Workloads without patching anything:

* ``GET /api/v1/pods?limit=N&continue=T`` — a real ``PodList`` with ``metadata.continue`` paging and
  ``metadata.resourceVersion`` (the list's consistent snapshot version).
* ``GET /api/v1/pods?watch=true&resourceVersion=X&allowWatchBookmarks=true&timeoutSeconds=S`` — a
  chunked stream of newline-delimited watch events (ADDED / MODIFIED / DELETED / BOOKMARK); every
  change after X is replayed, then the stream waits for new ones until S seconds pass.
  A resourceVersion older than the compaction point is answered the way the real server does:
  HTTP 200 and one ``ERROR`` event carrying a ``Status`` with code 410 (or, with
  ``gone_as_http=True``, a plain HTTP 410 Status response).
* ``GET /api/v1/nodes`` and ``GET /apis/kueue.x-k8s.io/v1beta1/workloads`` — lists.

Tests drive it from their own thread (``add_pod``, ``modify_pod``, ``delete_pod``, ``bookmark``,
``compact``) and synchronise on ``requests`` (a queue of every request served), never on sleeps.
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

POD_LIST = "/api/v1/pods"
NODE_LIST = "/api/v1/nodes"
WORKLOAD_LIST = "/apis/kueue.x-k8s.io/v1beta1/workloads"


class KubeStandIn:
    """State of the fake cluster plus the HTTP server in front of it."""

    def __init__(self, *, gone_as_http: bool = False) -> None:
        self._lock = threading.Condition()
        self._rv = 100
        self._compacted_rv = 0
        self._pods: dict[tuple[str, str], dict] = {}
        self._events: list[tuple[int, str, dict]] = []  # (rv, type, object)
        self.nodes: list[dict] = []
        self.workloads: list[dict] = []
        self.gone_as_http = gone_as_http
        self.requests: queue.Queue[tuple[str, dict[str, str]]] = queue.Queue()
        self._closed = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> KubeStandIn:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def write_kubeconfig(self, path: Path, context: str = "standin") -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: {context}\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: anonymous\n  user: {{}}\n"
            f"contexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: anonymous\n"
            f"current-context: {context}\n"
        )
        return path

    # --- cluster changes (called by tests) ----------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _record(self, kind: str, obj: dict) -> dict:
        self._rv += 1
        obj = copy.deepcopy(obj)
        if isinstance(obj.get("metadata"), dict):
            obj["metadata"]["resourceVersion"] = str(self._rv)
        self._events.append((self._rv, kind, obj))
        self._lock.notify_all()
        return obj

    @staticmethod
    def _key(pod: dict) -> tuple[str, str]:
        meta = pod.get("metadata") or {}
        return (str(meta.get("namespace")), str(meta.get("name") or meta.get("uid")))

    def add_pod(self, pod: dict) -> None:
        with self._lock:
            self._pods[self._key(pod)] = self._record("ADDED", pod)

    def modify_pod(self, pod: dict) -> None:
        with self._lock:
            self._pods[self._key(pod)] = self._record("MODIFIED", pod)

    def delete_pod(self, pod: dict) -> None:
        with self._lock:
            self._pods.pop(self._key(pod), None)
            self._record("DELETED", pod)

    def bookmark(self) -> int:
        """Send a BOOKMARK at a new resourceVersion (as the server does when nothing changed)."""
        with self._lock:
            self._record("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {}})
            return self._rv

    def compact(self) -> int:
        """Forget history: any watch from an older resourceVersion now gets 410 Gone."""
        with self._lock:
            self._rv += 1
            self._compacted_rv = self._rv
            self._events.clear()
            return self._rv

    # --- serving ------------------------------------------------------------------------
    def list_page(self, items: list[dict], kind: str, api_version: str, query: dict[str, str]) -> dict:
        with self._lock:
            rv = self._rv
            items = sorted((copy.deepcopy(i) for i in items), key=self._key)
        start = 0
        token = query.get("continue")
        if token:
            start, rv = (int(part) for part in token.split(":"))
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        meta: dict = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = f"{start + limit}:{rv}"
            meta["remainingItemCount"] = len(items) - start - limit
        return {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": page}

    def pods_snapshot(self) -> list[dict]:
        with self._lock:
            return list(self._pods.values())

    def watch_events(self, since: int, bookmarks: bool, timeout_s: float):
        """Yield (rv, type, obj) after ``since``; None when the history before it is gone."""
        import time

        deadline = time.monotonic() + timeout_s
        cursor = since
        with self._lock:
            if since < self._compacted_rv:
                yield None
                return
        while True:
            with self._lock:
                pending = [e for e in self._events if e[0] > cursor]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed:
                        return
                    self._lock.wait(left)
                    continue
            for rv, kind, obj in pending:
                cursor = rv
                if kind == "BOOKMARK" and not bookmarks:
                    continue
                yield rv, kind, obj


def _status_410(rv: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {rv}",
        "reason": "Expired",
        "code": 410,
    }


def _handler_for(state: KubeStandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - quiet test output
            pass

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_GET(self):  # noqa: N802 - http.server's spelling
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            state.requests.put((url.path, query))
            watching = query.get("watch") in ("true", "1")
            if url.path == POD_LIST and watching:
                return self._watch(query)
            if url.path == POD_LIST:
                return self._json(200, state.list_page(state.pods_snapshot(), "PodList", "v1", query))
            if url.path == NODE_LIST:
                return self._json(200, state.list_page(state.nodes, "NodeList", "v1", query))
            if url.path == WORKLOAD_LIST:
                return self._json(
                    200, state.list_page(state.workloads, "WorkloadList", "kueue.x-k8s.io/v1beta1", query)
                )
            self._json(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": f"{url.path} not found",
                },
            )

        def _watch(self, query: dict[str, str]) -> None:
            since = int(query.get("resourceVersion") or 0)
            bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
            timeout_s = float(query.get("timeoutSeconds") or 5)
            events = state.watch_events(since, bookmarks, timeout_s)
            first = next(events, "end")
            if first is None and state.gone_as_http:
                return self._json(410, _status_410(str(since)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if first is None:
                    self._chunk(
                        json.dumps({"type": "ERROR", "object": _status_410(str(since))}).encode() + b"\n"
                    )
                elif first != "end":
                    for rv, kind, obj in _chain(first, events):
                        if kind == "BOOKMARK":
                            obj = {
                                "kind": "Pod",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": str(rv)},
                            }
                        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def _chain(first, rest):
    yield first
    yield from rest
