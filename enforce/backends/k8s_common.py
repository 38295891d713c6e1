"""What the Kueue and eviction backends share: the API client, Events saying why, and turning the
client's errors into outcomes (one action's API error) or a CredentialError (stop everything)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuledger.enforce.backends.base import CredentialError

from gpuledger.extras import require

COMPONENT = "gpuledger"
#: Annotations gpuledger writes on the objects it acts on (why, so `kubectl describe` shows it).
ANN_PRIORITY = "gpuledger.io/priority"
ANN_REASON = "gpuledger.io/reason"
ANN_WARNING = "gpuledger.io/warning"
ANN_WARNED_AT = "gpuledger.io/warned-at"
ANN_PREEMPTED = "gpuledger.io/preempted"
ANN_REQUEUE = "gpuledger.io/requeue"  # "pending": deactivated by gpuledger, to be re-activated
MAX_MESSAGE = 1000  # Event messages are limited (1 KiB is what kubectl shows comfortably)
TIMEOUT_S = 30  # every API call's deadline (connect + read), so an API server that never answers stops the run


def client_modules():
    return require("kubernetes.client"), require("kubernetes.config")


def api_client(kubeconfig: str | None = None, context: str | None = None):
    """The official client from a kubeconfig (else $KUBECONFIG / ~/.kube/config / in-cluster).
    An unusable credential (expired exec plugin, unreadable token) is a CredentialError."""
    client_modules()
    # lazy: optional extra gpuledger[kubernetes]
    from gpuledger.ingest.jobs.kubernetes import api_client as make

    try:
        return make(kubeconfig, context)
    except Exception as exc:
        if type(exc).__name__ in ("ConfigException", "ApiException", "FileNotFoundError"):
            raise CredentialError(f"Kubernetes credentials: {str(exc).splitlines()[0]}; refresh them "
                                  "(kubectl config view / --kubeconfig) and retry") from None
        raise


def cluster_for(kubeconfig: str | None, context: str | None, cluster: str | None) -> tuple[str, str]:
    """(the cluster name a Kubernetes backend acts on, how it was learned): ``cluster`` when given,
    else the kubeconfig context's name — the name `gpuledger ingest kubernetes` stores on the jobs
    it reads through the same context — else "in-cluster" (a pod's ServiceAccount)."""
    if cluster:
        return cluster, "--cluster"
    name = context or current_context(kubeconfig)
    if name:
        return name, f"the kubeconfig context {name}, as `ingest kubernetes` names the cluster"
    return "in-cluster", "no kubeconfig context: in-cluster, as `ingest kubernetes` names the cluster"


def current_context(kubeconfig: str | None) -> str | None:
    """The kubeconfig's current context name, or None (no kubeconfig: in-cluster)."""
    try:
        from kubernetes.config import list_kube_config_contexts  # lazy: optional: its absence is handled here

        _, current = list_kube_config_contexts(config_file=str(kubeconfig) if kubeconfig else None)
        return current.get("name") if current else None
    except Exception:  # noqa: BLE001 - no kubeconfig (in-cluster): the caller falls back
        return None


def api_error(exc) -> tuple[int | None, str]:
    """(HTTP status, the server's message) of an ApiException."""
    status = getattr(exc, "status", None)
    message = getattr(exc, "reason", None) or str(exc)
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            message = data.get("message") or message
        except (ValueError, AttributeError):
            pass
    return status, str(message).splitlines()[0] if message else ""


def raise_if_credential(exc, what: str) -> None:
    """401 / 403: nothing else will work either, so stop the run with one line naming the fix."""
    status, message = api_error(exc)
    if status == 401:
        raise CredentialError(f"{what}: the API server says 401 Unauthorized ({message}); the credential "
                              "expired or is wrong — refresh the kubeconfig token and retry") from None
    if status == 403:
        raise CredentialError(f"{what}: the API server says 403 Forbidden ({message}); grant the "
                              "ServiceAccount the rules in deploy/kubernetes/rbac.yaml") from None


def is_api_exception(exc) -> bool:
    """An HTTP error answer (the client raises subclasses per status: UnauthorizedException, ...)."""
    return any(c.__name__ == "ApiException" for c in type(exc).__mro__)


@dataclass
class Write:
    """One request that changes something on the API server: what it is (method, path, the body as
    sent) and how to send it. A dry run lists ``line()`` of each; the real run sends them in the
    same order and lists the same lines — so the dry run says exactly what the real run does."""

    method: str
    path: str
    body: dict
    send: Callable[[], object]

    def line(self) -> str:
        return describe(self.method, self.path, self.body)


def describe(method: str, path: str, body: dict) -> str:
    """One line for a write, from what is sent (also applied to what a server received, in tests):
    an Event by its type, reason, object and message (its timestamps and generated name left out);
    an eviction by its uid precondition and grace period; anything else with its JSON body."""
    if path.endswith("/events"):
        obj = body.get("involvedObject") or {}
        return (f"{method} {path} {body.get('type')} {body.get('reason')} on {obj.get('kind')} "
                f"{obj.get('namespace')}/{obj.get('name')} uid {obj.get('uid')}: {body.get('message')}")
    if path.endswith("/eviction"):
        options = body.get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        return (f"{method} {path} precondition uid {(options.get('preconditions') or {}).get('uid')}, grace "
                f"{'the pod' + chr(39) + 's own' if grace is None else f'{grace} s'}")
    return f"{method} {path} {json.dumps(body, sort_keys=True)}"


def send_all(writes: list[Write], *, dry_run: bool) -> str:
    """Send the writes in order (none in a dry run); the lines that say what was (or would be) sent."""
    if not dry_run:
        for w in writes:
            w.send()
    return ("would send:" if dry_run else "sent:") + "".join(f"\n    {w.line()}" for w in writes)


def event(client, core, *, namespace: str, kind: str, api_version: str, name: str, uid: str | None, reason: str,
          message: str, event_type: str = "Normal", dry_run: str | None = None, timeout_s: float = TIMEOUT_S):
    """A core/v1 Event on the object, so `kubectl describe` and the owner see why. ``client`` is the
    kubernetes.client module, ``core`` a CoreV1Api."""
    return event_write(client, core, namespace=namespace, kind=kind, api_version=api_version, name=name, uid=uid,
                       reason=reason, message=message, event_type=event_type, dry_run=dry_run,
                       timeout_s=timeout_s).send()


def event_write(client, core, *, namespace: str, kind: str, api_version: str, name: str, uid: str | None,
                reason: str, message: str, event_type: str = "Normal", dry_run: str | None = None,
                timeout_s: float = TIMEOUT_S, now: datetime | None = None) -> Write:
    """The Event of ``event`` as a Write (sent only when asked)."""
    now = now or datetime.now(UTC)
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)  # naive times are UTC here
    body = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{name}.gpuledger-", namespace=namespace),
        involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=name,
                                                 namespace=namespace, uid=uid),
        reason=reason, message=message[:MAX_MESSAGE], type=event_type,
        source=client.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
        reporting_instance=COMPONENT, first_timestamp=now, last_timestamp=now, count=1,
    )
    return Write("POST", f"/api/v1/namespaces/{namespace}/events", core.api_client.sanitize_for_serialization(body),
                 lambda: core.create_namespaced_event(namespace, body, dry_run=dry_run, _request_timeout=timeout_s))
