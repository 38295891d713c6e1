"""The HTML statement printed to PDF by headless Chromium (its print CSS: A4 portrait), the same
bytes for the same statement: Chromium stamps the PDF with the wall clock, which is replaced by
the statement's own time (the dates keep their length, so the PDF's offsets stay valid).

Chromium is found as ``$GPULEDGER_CHROMIUM``, else ``chromium`` / ``chromium-browser`` /
``google-chrome`` on PATH (Debian: ``apt-get install chromium``, scripts/install-test-deps.sh).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path

from gpuledger.errors import RunError

CHROMIUM_ENV = "GPULEDGER_CHROMIUM"
TIMEOUT_S = 120
_DATE = re.compile(rb"(/(?:CreationDate|ModDate) ?\(D:)\d{14}")


def chromium() -> str | None:
    """The Chromium to print with, or None when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if Path(named).is_file() else shutil.which(named)
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _stamped(data: bytes, stamp: datetime) -> bytes:
    """The document dates set to ``stamp`` (14 digits for 14 digits: the length stays)."""
    digits = stamp.strftime("%Y%m%d%H%M%S").encode()
    return _DATE.sub(lambda m: m[1] + digits, data)


def write_pdf(html: Path, path: Path, *, stamp: datetime, browser: str | None = None) -> Path:
    """Print ``html`` to ``path`` (A4 portrait by the page's print CSS, no browser header or
    footer); the document dates are ``stamp``. RunError naming Chromium if it fails."""
    browser = browser or chromium()
    if browser is None:
        raise RunError(f"PDF statement: no Chromium found; install it (apt-get install chromium) or set "
                       f"${CHROMIUM_ENV}")
    with tempfile.TemporaryDirectory(prefix="gpuledger-pdf-") as profile:
        out = Path(profile) / "statement.pdf"
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={profile}/user", "--no-pdf-header-footer", "--run-all-compositor-stages-before-draw",
               f"--print-to-pdf={out}", html.resolve().as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise RunError(f"PDF statement: {browser} did not finish printing {html.name} in {TIMEOUT_S} s") from None
        if done.returncode != 0 or not out.is_file():
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RunError(f"PDF statement: {browser} could not print {html.name} (exit {done.returncode}: "
                           f"{tail[0][:200]})")
        path.write_bytes(_stamped(out.read_bytes(), stamp))
    return path
