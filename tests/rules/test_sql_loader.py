"""gpuledger.sql.load_sql reads a package's .sql file from its folder, or through importlib.resources
when the package lives in a zip (issue 41: the folder read spares every read command's start the
import of importlib.resources' readers). Both give the same text and the same fragment check."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from gpuledger.sql import load_sql

PROBE = """
import sys
from gpuledger.sql import load_sql
import shipped
print(repr(load_sql("shipped", "q.sql", where="x > 1")))
print("importlib.resources.readers" in sys.modules)
"""
SQL = "-- a query\nSELECT 1 WHERE {{ where }}\n"


def _run(path_entry) -> list[str]:
    code = f"import sys; sys.path.insert(0, {str(path_entry)!r})\n{PROBE}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()


def test_a_folder_and_a_zip_give_the_same_text(tmp_path):
    folder = tmp_path / "src" / "shipped"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "q.sql").write_text(SQL)
    archive = tmp_path / "shipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("shipped/__init__.py", "")
        z.writestr("shipped/q.sql", SQL)
    from_folder, from_zip = _run(tmp_path / "src"), _run(archive)
    assert from_folder[0] == from_zip[0] == repr("-- a query\nSELECT 1 WHERE x > 1\n")
    # the folder read never loads importlib.resources' readers; the zip needs them
    assert (from_folder[1], from_zip[1]) == ("False", "True")


def test_a_fragment_named_but_not_given_is_an_error():
    with pytest.raises(ValueError, match=r"fragments named \['episodes'\], given \[\]"):
        load_sql("gpuledger.facts", "findings_with_exempt_as_of.sql")
