"""Real receivers for the alert tests: a local HTTP server recording every POST (the JSON and
Slack-compatible webhooks) and aiosmtpd (SMTP), with the channel URLs set in the environment."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers.prometheus_rig import free_port


class Receiver:
    """A real HTTP server recording every POST body; stop() closes the port, start() reopens it."""

    def __init__(self, port: int):
        self.port, self.bodies, self.paths, self.server = port, [], [], None

    def start(self):
        bodies, paths = self.bodies, self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                paths.append(self.path)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(name="receivers")
def receivers_fixture(monkeypatch):
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    mails = []

    class Keep(Message):
        def handle_message(self, message):
            mails.append(message)

    smtp_port = free_port()
    controller = Controller(Keep(), hostname="127.0.0.1", port=smtp_port)
    controller.start()
    hook = Receiver(free_port())
    hook.start()
    mail = f"mailto://127.0.0.1:{smtp_port}?from=gpuledger@example.org&to=oncall@example.org&secure=no&mode=insecure"
    monkeypatch.setenv("GPULEDGER_ALERT_ONCALL_HOOK_URL", f"json://127.0.0.1:{hook.port}/hook")
    monkeypatch.setenv("GPULEDGER_ALERT_ONCALL_MAIL_URL", mail)
    monkeypatch.setenv("GPULEDGER_ALERT_OWNER_MAIL_URL", mail)
    yield hook, mails
    controller.stop()
    hook.stop() if hook.server else None


def wait_for(check, what: str, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)
