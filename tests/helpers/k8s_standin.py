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
* ``GET /api/v1/nodes`` and ``GET /apis/kueue.x-k8s.io/v1beta2/workloads`` — lists (the workloads
  list pages over ``workloads`` and the enforcement tests' ``kueue_workloads`` alike).

For enforcement (gpuledger.enforce.backends): Kueue ``v1beta2`` Workloads (``GET`` list / get,
``PATCH`` as ``application/merge-patch+json``; lists per namespace too), ``GET`` one pod or one
namespace's pods, ``POST .../events``, ``POST .../pods/<p>/eviction`` honouring
``deleteOptions.preconditions.uid`` (409 Conflict when the pod was recreated under the same name, as
the real apiserver answers) and PodDisruptionBudgets (429 with a ``DisruptionBudget`` cause when
none may be disrupted, 500 when several select the pod), ``dryRun=All`` (validated, nothing stored), a bearer token (401
without it, ``forbid`` gives 403) and one-shot faults (``fail_next``). Every such request, with its
body, is in ``calls``.

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

import orjson

POD_LIST = "/api/v1/pods"
NODE_LIST = "/api/v1/nodes"
WORKLOAD_LIST = "/apis/kueue.x-k8s.io/v1beta2/workloads"
KUEUE_V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2"
NAMESPACED = "/api/v1/namespaces/"


class KubeStandIn:
    """State of the fake cluster plus the HTTP server in front of it."""

    def __init__(self, *, gone_as_http: bool = False) -> None:
        self._lock = threading.Condition()
        self._rv = 100
        self._compacted_rv = 0
        self._pods: dict[tuple[str, str], dict] = {}
        self._events: list[tuple[int, str, dict]] = []  # (rv, type, object)
        self._order: tuple[tuple[int, ...], list[dict]] | None = None  # list_page's last sort, by identity
        self.nodes: list[dict] = []
        self.workloads: list[dict] = []
        # enforcement: v1beta2 Workloads by (namespace, name), PodDisruptionBudgets, Events, calls
        self.kueue_workloads: dict[tuple[str, str], dict] = {}
        self.pdbs: list[dict] = []
        self.events: list[dict] = []
        self.calls: list[dict] = []  # {"method", "path", "query", "body", "content_type"}
        self.token: str | None = None  # when set, requests need "Authorization: Bearer <token>"
        self.forbid = False  # every enforcement request answered 403
        self.fail_next: dict[tuple[str, str], tuple[int, dict]] = {}  # (method, path) -> one answer
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
        start = 0
        token = query.get("continue")
        with self._lock:  # sorted by reference, only the page copied (a benchmark lists 50,000 in pages)
            rv = self._rv
            items = self._sorted(items)
            if token:
                start, rv = (int(part) for part in token.split(":"))
            limit = int(query.get("limit") or 0) or len(items) or 1
            page = orjson.loads(orjson.dumps(items[start : start + limit]))  # a copy, as deepcopy but 10x sooner
        meta: dict = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = f"{start + limit}:{rv}"
            meta["remainingItemCount"] = len(items) - start - limit
        return {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": page}

    def _sorted(self, items: list[dict]) -> list[dict]:
        """``items`` in key order, sorted once while the same objects are listed page after page
        (the API server pages one snapshot; sorting 50,000 per page of 500 was most of its time)."""
        ids = tuple(map(id, items))
        if self._order is None or self._order[0] != ids:
            self._order = (ids, sorted(items, key=self._key))
        return self._order[1]

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


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
           "reason": reason, "code": code}
    if details:
        out["details"] = details
    return out


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (null deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _selects(pdb: dict, pod: dict) -> bool:
    meta = pod.get("metadata") or {}
    if (pdb.get("metadata") or {}).get("namespace") != meta.get("namespace"):
        return False
    wanted = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _enforcement_request(state: KubeStandIn, method: str, path: str, query: dict[str, str], body,
                         content_type: str) -> tuple[int, dict]:
    """The answer to one enforcement request (see the module docstring); dryRun=All stores nothing."""
    dry = query.get("dryRun") == "All"
    parts = path.strip("/").split("/")
    with state._lock:
        # /apis/kueue.x-k8s.io/v1beta2/workloads (all namespaces)
        if method == "GET" and parts == ["apis", "kueue.x-k8s.io", "v1beta2", "workloads"]:  # ingest pages it
            return 200, state.list_page([*state.workloads, *state.kueue_workloads.values()], "WorkloadList",
                                        "kueue.x-k8s.io/v1beta2", query)
        # /apis/kueue.x-k8s.io/v1beta2/namespaces/<ns>/workloads/<name>
        if parts[:3] == ["apis", "kueue.x-k8s.io", "v1beta2"] and len(parts) == 7 and parts[5] == "workloads":
            key = (parts[4], parts[6])
            current = state.kueue_workloads.get(key)
            if current is None:
                return 404, _status(404, "NotFound", f'workloads.kueue.x-k8s.io "{key[1]}" not found')
            if method == "GET":
                return 200, copy.deepcopy(current)
            if method == "PATCH":
                if content_type.split(";")[0] != "application/merge-patch+json":
                    return 415, _status(415, "UnsupportedMediaType", f"unsupported patch type {content_type}")
                patched = merge_patch(current, body)
                if dry:
                    return 200, patched
                state._rv += 1
                patched["metadata"]["resourceVersion"] = str(state._rv)
                state.kueue_workloads[key] = patched
                return 200, copy.deepcopy(patched)
        # /apis/kueue.x-k8s.io/v1beta2/namespaces/<ns>/workloads (one namespace: a namespaced Role)
        if method == "GET" and parts[:4] == ["apis", "kueue.x-k8s.io", "v1beta2", "namespaces"] and len(parts) == 6:
            items = [copy.deepcopy(w) for (ns, _), w in sorted(state.kueue_workloads.items()) if ns == parts[4]]
            return 200, {"kind": "WorkloadList", "apiVersion": "kueue.x-k8s.io/v1beta2",
                         "metadata": {"resourceVersion": str(state._rv)}, "items": items}
        # GET /api/v1/namespaces/<ns>/pods and /api/v1/namespaces/<ns>/pods/<name>
        if method == "GET" and parts[:3] == ["api", "v1", "namespaces"] and len(parts) in (5, 6) and parts[4] == "pods":
            if len(parts) == 5:
                items = [copy.deepcopy(p) for k, p in sorted(state._pods.items()) if k[0] == parts[3]]
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(state._rv)},
                             "items": items}
            pod = state._pods.get((parts[3], parts[5]))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{parts[5]}" not found')
            return 200, copy.deepcopy(pod)
        # /api/v1/namespaces/<ns>/events
        if method == "POST" and len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
            event = copy.deepcopy(body)
            meta = event.setdefault("metadata", {})
            if not meta.get("name"):
                meta["name"] = f"{meta.get('generateName', 'event.')}{len(state.events):05d}"
            meta["namespace"] = parts[3]
            if not dry:
                state.events.append(event)
            return 201, event
        # /api/v1/namespaces/<ns>/pods/<name>/eviction
        if (method == "POST" and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"]
                and parts[4] == "pods" and parts[6] == "eviction"):
            key = (parts[3], parts[5])
            pod = state._pods.get(key)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{key[1]}" not found')
            # deleteOptions.preconditions.uid: the real apiserver refuses with 409 Conflict when the
            # pod under this name has another uid (it was recreated)
            wanted = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            have = (pod.get("metadata") or {}).get("uid")
            if wanted is not None and wanted != have:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods "{key[1]}": '
                                    f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {have}",
                                    {"name": key[1], "kind": "pods"})
            budgets = [b for b in state.pdbs if _selects(b, pod)]
            if len(budgets) > 1:
                return 500, _status(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                                                          "which the eviction subresource does not support.")
            if budgets and int((budgets[0].get("status") or {}).get("disruptionsAllowed", 0)) <= 0:
                name = budgets[0]["metadata"]["name"]
                return 429, _status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                    "disruption budget.",
                                    {"causes": [{"reason": "DisruptionBudget",
                                                 "message": f"The disruption budget {name} needs 1 healthy pods "
                                                            "and has 1 currently"}]})
            if not dry:
                if budgets:
                    budgets[0]["status"]["disruptionsAllowed"] -= 1
                state._pods.pop(key, None)
                state._record("DELETED", pod)
            return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    return 404, _status(404, "NotFound", f"{method} {path} not found")


KubeStandIn.enforcement_request = _enforcement_request


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
            data = orjson.dumps(body)  # compact, as the API server answers
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
            if url.path.startswith(KUEUE_V1BETA2) or url.path.startswith(NAMESPACED):
                return self._enforcement("GET", url.path, query, None)
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

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else None

        def do_PATCH(self):  # noqa: N802
            url = urlparse(self.path)
            self._enforcement("PATCH", url.path, {k: v[-1] for k, v in parse_qs(url.query).items()}, self._body())

        def do_POST(self):  # noqa: N802
            url = urlparse(self.path)
            self._enforcement("POST", url.path, {k: v[-1] for k, v in parse_qs(url.query).items()}, self._body())

        def _enforcement(self, method: str, path: str, query: dict[str, str], body) -> None:
            state.calls.append({"method": method, "path": path, "query": query, "body": body,
                                "content_type": self.headers.get("Content-Type")})
            if state.token is not None and self.headers.get("Authorization") != f"Bearer {state.token}":
                return self._json(401, _status(401, "Unauthorized", "Unauthorized"))
            if state.forbid:
                return self._json(403, _status(403, "Forbidden", f"{method} {path} is forbidden"))
            fault = state.fail_next.pop((method, path), None)
            if fault is not None:
                return self._json(*fault)
            code, answer = state.enforcement_request(method, path, query, body,
                                                     self.headers.get("Content-Type") or "")
            self._json(code, answer)

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
