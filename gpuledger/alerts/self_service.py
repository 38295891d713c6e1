"""An owner answers a squatting alert (issue 38): the choice from a signed link or the CLI is
checked and recorded (enforce.team_store.owner_choice: the job is theirs, a link acts once, a keep
fits its bounds and the team's weekly allowance), an exemption request goes to on-call through the
outbox, and `gpuledger alerts links serve` is the small HTTP endpoint the links point at.

The endpoint never acts on a GET (mail scanners and link previews open links): GET shows what
the link would do with a button, the button POSTs. Time is injected (``clock``) for tests."""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from gpuledger import warehouse
from gpuledger.alerts import links
from gpuledger.alerts.outbox import Alert, enqueue
from gpuledger.enforce.team_store import owner_choice
from gpuledger.rules.clock import utc_now

CHOICE_WORDS = {"keep": "keep it running for {hours:g} h (no warning or preemption meanwhile)",
                "release": "release it now: gpuledger stops the job at its next enforcement cycle",
                "exemption": "ask on-call for an exemption"}


def describe(choice: dict) -> str:
    words = CHOICE_WORDS.get(choice.get("choice"), "?").format(hours=float(choice.get("hours") or 0))
    return f"job {choice['job_id']} on {choice['cluster']} (owner {choice['user']}): {words}"


def record(path, cfg, choice: dict, *, identity: str, now: datetime, token: str | None = None
           ) -> tuple[str, str, datetime | None]:
    """Record ``choice`` ({cluster, job_id, user, choice, hours}) for its job: (outcome, why,
    kept until). An exemption asked for is also an alert to on-call (``policy.alerts.on_call``)."""
    with warehouse.open_writer(path) as con:
        outcome, why, until = owner_choice(con, cfg, cluster=choice["cluster"], job_id=choice["job_id"],
                                           user=choice["user"], identity=identity, choice=choice["choice"],
                                           hours=choice.get("hours"), now=now, token=token)
    if outcome == "granted" and choice["choice"] == "exemption":
        _tell_on_call(path, cfg, choice, now)
    return outcome, why, until


def _tell_on_call(path, cfg, choice: dict, now: datetime) -> None:
    alerts = cfg.policy.alerts
    subject = f"exemption asked: job {choice['job_id']} on {choice['cluster']} by its owner {choice['user']}"
    body = (f"{choice['user']} asks for an exemption from idle-GPU enforcement for job {choice['job_id']} on "
            f"{choice['cluster']} (from a squatting alert, {now:%Y-%m-%d %H:%M} UTC). Enforcement goes on until "
            "someone adds it to policy.enforcement.exempt_* or answers them.")
    enqueue(path, [Alert(key=f"exemption|{choice['cluster']}|{choice['job_id']}|{now:%Y-%m-%dT%H:%M:%S}|{c}",
                         kind="exemption", channel=c, subject=subject, body=body, created_at=now, not_before=now,
                         severity="info", payload={k: choice.get(k) for k in ("cluster", "job_id", "user")})
                   for c in alerts.on_call])


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family: sans-serif; max-width: 40em; margin: 2em auto'><h1>{html.escape(title)}</h1>"
            f"{body}</body></html>").encode()


def make_server(path, cfg, key: str, *, host: str = "127.0.0.1", port: int = 0,
                clock: Callable[[], datetime] = utc_now) -> ThreadingHTTPServer:
    """The link endpoint: GET /choose?t=TOKEN (what it does, a button), POST /choose (t=TOKEN:
    record it), GET /healthz. Answers 200 granted, 409 refused, 400 a bad link."""
    max_age = cfg.policy.alerts.self_service.link_valid_hours * 3600

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, title: str, body: str) -> None:
            page = _page(title, body)
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def _token(self, query: str) -> tuple[str | None, dict | None]:
            token = (parse_qs(query).get("t") or [None])[0]
            if not token:
                self._send(400, "Not a gpuledger link", "<p>The link has no token: open it from the mail as sent.</p>")
                return None, None
            try:
                return token, links.verify(token, key, max_age)
            except links.BadLink as exc:
                self._send(400, "This link cannot be used", f"<p>{html.escape(str(exc))}</p>")
                return None, None

        def do_GET(self):  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            if url.path == "/healthz":
                return self._send(200, "ok", "<p>ok</p>")
            if url.path != "/choose":
                return self._send(404, "Not found", "<p>Use a link from a gpuledger alert.</p>")
            token, choice = self._token(url.query)
            if choice is None:
                return None
            return self._send(200, "Confirm your choice", (
                f"<p>{html.escape(describe(choice))}.</p><form method='post' action='/choose'>"
                f"<input type='hidden' name='t' value='{html.escape(token, quote=True)}'>"
                "<button type='submit'>Confirm</button></form>"))

        def do_POST(self):  # noqa: N802
            url = urlsplit(self.path)
            if url.path != "/choose":
                return self._send(404, "Not found", "<p>Use a link from a gpuledger alert.</p>")
            length = int(self.headers.get("Content-Length") or 0)
            token, choice = self._token(self.rfile.read(length).decode())
            if choice is None:
                return None
            outcome, why, _ = record(path, cfg, choice, identity="signed link", now=clock(), token=token)
            title = "Done" if outcome == "granted" else "Refused"
            return self._send(200 if outcome == "granted" else 409, title,
                              f"<p>{html.escape(describe(choice))}.</p><p><b>{title}:</b> {html.escape(why)}</p>")

        def log_message(self, *args):  # the access log would print tokens
            pass

    return ThreadingHTTPServer((host, port), Handler)
