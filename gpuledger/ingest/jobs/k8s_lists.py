"""A Kubernetes list read in pages (``limit`` + ``continue``), as the API server wants large lists
read: one unpaged LIST of 50,000 Kueue Workloads is a response of hundreds of MB that the server
builds in memory and a client deadline may cut. Used by the job ingest and by enforcement's live view."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import orjson

log = logging.getLogger(__name__)
HTTP_GONE = 410
PAGE_SIZE = 500


def decode(data: bytes | str) -> Any:
    """A page's JSON as the standard parser gives it, through orjson (a page of 500 Kueue Workloads
    decodes several times faster: issue 41). The API's integers are int32 / int64 (its OpenAPI
    formats), which orjson reads exactly; what orjson refuses and JSON allows (a lone surrogate
    escape, 1e400) goes through the standard parser."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def list_in_pages(call: Callable[..., Any], *args: Any, page_size: int | None = None,
                  request_timeout: Any = None) -> tuple[list[dict], str | None]:
    """Every item of a list (as plain dicts) and the list's resourceVersion. An expired continue
    token (410) lists again from the start: pages of two snapshots would not be consistent."""
    for _attempt in range(3):
        items: list[dict] = []
        token: str | None = None
        version: str | None = None
        try:
            while True:
                kwargs: dict[str, Any] = {"limit": page_size or PAGE_SIZE, "_preload_content": False}
                if request_timeout is not None:
                    kwargs["_request_timeout"] = request_timeout
                if token:
                    kwargs["_continue"] = token
                body = decode(call(*args, **kwargs).data)
                meta = body.get("metadata") or {}
                items.extend(body.get("items") or [])
                version = version or meta.get("resourceVersion")
                token = meta.get("continue")
                if not token:
                    return items, version
        except Exception as exc:  # the client's ApiException, by its status (no import: the extra may be absent)
            if getattr(exc, "status", None) != HTTP_GONE or not token:
                raise
            log.info("list continue token expired; listing again from the start")
    raise RuntimeError("the API server expired the list three times running; is it overloaded?")
