"""Config that cannot be meant is refused at the door, by `config check` and `config load` alike
(exit 2, the field or line named, the warehouse unchanged): a duplicated key, a currency that is
not ISO 4217, infinite shares or weights, budgets and prices beyond the precision the warehouse
stores, an org tree hundreds of levels deep. Real subprocesses, a real warehouse file."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

BASE = """currency: USD
org:
  name: acme
  children:
    - {name: vision, shares: SHARES}
    - {name: nlp, shares: 1}
budgets:
  - {node: vision, gpu_hours: HOURS, period: 2026-11}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: PRICE, effective_from: 2026-01-01}
"""


def _config(shares="1", hours="100", price="2.50", head="") -> str:
    return head + BASE.replace("SHARES", shares).replace("HOURS", hours).replace("PRICE", price)


def _deep(levels: int) -> str:
    """An org tree ``levels`` deep, in flow style on one line."""
    return ("currency: USD\norg: " + "".join(f"{{name: n{i}, children: [" for i in range(levels))
            + "{name: leaf}" + "]}" * levels + "\n")


CASES = [  # (id, config text, words the one line must hold)
    ("duplicate-key", _config() + "budgets: []\n", ["key 'budgets' appears twice (lines 7 and 11)"]),
    ("duplicate-currency", _config(head="currency: EUR\n"), ["key 'currency' appears twice"]),
    ("missing-currency", _config().replace("currency: USD\n", ""), ["no `currency:` given", "currency: USD", "ISO 4217"]),
    ("not-iso-currency", _config().replace("currency: USD", "currency: XYZ"), ["currency", "ISO 4217"]),
    ("infinite-shares", _config(shares=".inf"), ["org.children.0.shares", "finite"]),
    ("nan-shares", _config(shares=".nan"), ["org.children.0.shares"]),
    ("budget-beyond-precision", _config(hours="1e30"), ["budgets.0.gpu_hours", "18 digits"]),
    ("price-beyond-precision", _config(price='"123456789012345.5"'), ["rate_card.0.price_per_gpu_hour", "12 digits before the decimal point"]),
    ("org-400-deep", _deep(400), ["nested too deeply to read"]),
    ("org-40-deep", _deep(40), ["more than 32 levels deep"]),
]


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow  # two interpreters per case
@pytest.mark.parametrize("case,text,says", CASES, ids=[c[0] for c in CASES])
def test_check_and_load_refuse_the_same_config_in_one_line(tmp_path, case, text, says):
    path = tmp_path / "gpuledger.yaml"
    path.write_text(text)
    checked = _run(["config", "check", "-c", str(path)], tmp_path)
    loaded = _run(["config", "load", "-c", str(path), "-w", str(tmp_path / "w.duckdb")], tmp_path)
    for ran in (checked, loaded):
        assert ran.returncode == 2, (case, ran.stderr)
        assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr
        text_out = " ".join(ran.stderr.split())
        assert all(w in text_out for w in says), (case, ran.stderr)
    if (tmp_path / "w.duckdb").exists():
        with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM config_versions").fetchone() == (0,)


def test_the_same_config_within_bounds_is_accepted_by_both(tmp_path):
    path = tmp_path / "gpuledger.yaml"
    path.write_text(_config(hours='"999999999999999.999"', price='"999999999999.999999"'))  # the largest stored
    assert _run(["config", "check", "-c", str(path)], tmp_path).returncode == 0
    loaded = _run(["config", "load", "-c", str(path), "-w", str(tmp_path / "w.duckdb")], tmp_path)
    assert loaded.returncode == 0, loaded.stderr


def test_a_stored_version_without_currency_is_read_as_usd_and_said_so(tmp_path):
    """Versions stored before a file had to name its currency were accepted as USD: they stay in
    force as USD, `config versions` says which they are, and the same file with `currency: USD`
    added is the same content (no new version)."""
    from gpuledger import warehouse
    from gpuledger.config import parse_config_text
    from gpuledger.config_store import stored_config_in_force
    from gpuledger.ledger.config_versions import load_version

    old_text = _config(price="\"2.50\"").replace("currency: USD\n", "")
    wh = tmp_path / "w.duckdb"
    with warehouse.open_writer(wh) as con:  # as a release before the rule stored it
        load_version(con, parse_config_text(old_text), text=old_text, source="/etc/old.yaml")
    with warehouse.open_reader(wh) as con:
        assert stored_config_in_force(con).currency == "USD"
    versions = _run(["config", "versions", "-w", str(wh)], tmp_path)
    assert versions.returncode == 0, versions.stderr
    assert "config version(s) 1 name no currency; they were accepted and are read as USD" in " ".join(
        versions.stderr.split()), versions.stderr
    path = tmp_path / "gpuledger.yaml"
    path.write_text(_config(price='"2.50"'))
    loaded = _run(["config", "load", "-c", str(path), "-w", str(wh)], tmp_path)
    assert loaded.returncode == 0 and "unchanged" in loaded.stdout, loaded.stdout + loaded.stderr
