"""The dashboards' tests: a guard against a CPython 3.11.7 race in ``ast.parse``.

CPython before 3.11.9 keeps the AST converter's recursion counter in state shared by all threads
(gh-106905), so two threads parsing at once can fail with ``SystemError: AST constructor recursion
depth mismatch``. AppTest parses each page script (Streamlit's "magic") on its script thread while
the test thread may be parsing too (pytest's assertion rewriting of a lazily imported module):
one such failure turned a dashboard test red in a full run. Serialising ``ast.parse`` removes the
race for every Python caller. The server is not exposed: it parses each page once per process, under
its script cache's lock."""

from __future__ import annotations

import ast
import sys
import threading

if sys.version_info < (3, 11, 9):
    _parse, _lock = ast.parse, threading.RLock()

    def _serialised_parse(*args, **kwargs):
        with _lock:
            return _parse(*args, **kwargs)

    ast.parse = _serialised_parse
