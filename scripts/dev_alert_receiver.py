"""`make dev`'s alert receiver: a local HTTP endpoint for the ``dev-alerts`` channel (apprise's
``json://`` posts ``{"title", "message", "type"}``) that writes each alert, as a person reads it,
to a text file and to stdout.

    python scripts/dev_alert_receiver.py --port 8025 --out data/dev/alerts.txt
    # then GPULEDGER_ALERT_DEV_ALERTS_URL=json://127.0.0.1:8025/alerts
"""

from __future__ import annotations

import argparse
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuledger.stopping import StopSignals


def readable(body: dict, received: datetime) -> str:
    """One alert as text: when it arrived (UTC), its kind and title, then its message indented."""
    message = "\n".join(f"    {line}" for line in str(body.get("message", "")).splitlines())
    return f"{received:%Y-%m-%d %H:%M:%S} UTC  [{body.get('type', 'info')}] {body.get('title', '')}\n{message}\n\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.touch()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"title": "(not JSON)", "message": raw.decode(errors="replace")}
            text = readable(body if isinstance(body, dict) else {"message": str(body)}, datetime.now(UTC))
            with args.out.open("a", encoding="utf-8") as out:
                out.write(text)
            print(text, end="", flush=True)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    # SIGTERM / SIGINT handled, not left to their dispositions: a parent that ignores SIGTERM (as a
    # test worker once did) passes the ignore on, and the receiver outlived `make dev`'s stop
    with StopSignals() as stop:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"alert receiver on http://127.0.0.1:{args.port}/alerts, writing {args.out}", flush=True)
        stop.event.wait()
        server.shutdown()
    raise SystemExit(stop.exit_code)


if __name__ == "__main__":
    main()
