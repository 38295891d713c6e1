"""Energy and emissions per job, project and business unit (issue 39 §2): facility kWh = GPU kWh ×
PUE, kgCO2e = facility kWh × the hour's grid intensity, "unknown" (never 0) where a GPU gives no
energy. One project's figure is derived by hand below from its energy samples, PUE and intensity.

  acme ── research ── alpha (GPU-h1, Oct 1–11, no energy samples: unknown)
       │           └─ gamma (GPU-h2, Oct 1 00:00 – Oct 2 00:00)
       └─ product  ── beta  (GPU-a, Oct 1–11, no samples)
  cluster c1: PUE 1.25, grid intensity from an hourly CSV: 0.5 kg/kWh 00:00–11:00, 0.2 from 12:00
  GPU-h2 draws 350 W: a sample every 30 s from Oct 1 00:00:00 to 23:59:30 (2,880 samples), its
  energy counter rising 350 W × 30 s = 10,500 J a sample.

  An hour's energy is the counter's increase over its samples, each from the sample before it: the
  first hour's first sample has none (119 increments), every later hour 120.
    hours 00–11: (119 + 11 × 120) × 10,500 J = 1,439 × 10,500 = 15,109,500 J = 4.197083333 kWh
    hours 12–23:       12 × 120  × 10,500 J = 1,440 × 10,500 = 15,120,000 J = 4.2 kWh
    GPU kWh       = 8.397083333
    facility kWh  = 8.397083333 × 1.25 = 10.496354167
    kgCO2e        = 1.25 × (4.197083333 × 0.5 + 4.2 × 0.2) = 1.25 × 2.938541667 = 3.673177083
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.files import write_statement_set
from tests.helpers.ledger_fixtures import devices, job, load
from tests.helpers.statement_fixtures import CONFIG

OCT1, OCT2, OCT11 = datetime(2026, 10, 1), datetime(2026, 10, 2), datetime(2026, 10, 11)
J_PER_SAMPLE = 350.0 * 30  # 350 W for 30 s
GAMMA_KWH = 2879 * J_PER_SAMPLE / 3.6e6
GAMMA_FACILITY = GAMMA_KWH * 1.25
GAMMA_KG = 1.25 * ((1439 * J_PER_SAMPLE / 3.6e6) * 0.5 + (1440 * J_PER_SAMPLE / 3.6e6) * 0.2)


def _intensity_csv(path, extra: str = "") -> None:
    lines = ["hour,kg_co2e_per_kwh"] + [f"2026-10-01T{h:02d}:00:00Z,{0.5 if h < 12 else 0.2}" for h in range(24)]
    path.write_text("\n".join(lines) + "\n" + extra)


def _month(path, csv, *, november: bool = True) -> None:
    with warehouse.open_writer(path) as con:
        load(con, CONFIG + f"clusters:\n  c1:\n    pue: 1.25\n    grid_intensity: {{csv: {csv}}}\n",
             at=datetime(2026, 9, 30))
        ids = devices(con, [("GPU-h1", "node-h1", "H100"), ("GPU-h2", "node-h2", "H100"),
                            ("GPU-a", "node-a", "A100")])
        job(con, "alpha-1", "alpha", ids["GPU-h1"], OCT1, OCT11, partition="gpu")
        job(con, "gamma-1", "gamma", ids["GPU-h2"], OCT1, OCT2, partition="debug")
        job(con, "beta-1", "beta", ids["GPU-a"], OCT1, OCT11, model="A100", partition="gpu")
        if november:  # data past October's end (a statement that is not provisional)
            job(con, "beta-2", "beta", ids["GPU-a"], datetime(2026, 11, 2), datetime(2026, 11, 3), model="A100")
        n = 24 * 120
        warehouse.write_samples(con, pl.DataFrame({
            "gpu_id": np.full(n, ids["GPU-h2"], dtype=np.int32),
            "ts": np.datetime64("2026-10-01T00:00:00", "us") + np.arange(n) * np.timedelta64(30, "s"),
            "sm_active_ratio": np.full(n, 0.5), "power_w": np.full(n, 350.0),
            "energy_total_j": 5e9 + np.arange(n) * J_PER_SAMPLE,  # a counter long past 0
        }), "test")


@pytest.fixture
def month(warehouse_file, tmp_path):
    csv = tmp_path / "grid.csv"
    _intensity_csv(csv)
    _month(warehouse_file, csv)
    return warehouse_file


def test_one_projects_kgco2e_derived_by_hand_and_unknown_where_no_energy(month, tmp_path):
    with warehouse.open_reader(month) as con:
        st = build_statement(con, "2026-10")
    gamma = st.lines.filter(pl.col("project") == "gamma").row(0, named=True)
    assert gamma["energy_kwh"] == pytest.approx(GAMMA_KWH, abs=1e-6)
    assert gamma["energy_kwh_facility"] == pytest.approx(GAMMA_FACILITY, abs=1e-6)
    assert gamma["kg_co2e"] == pytest.approx(GAMMA_KG, abs=1e-6)
    assert GAMMA_KG == pytest.approx(3.673177083, abs=1e-9)  # the figure in the docstring
    assert gamma["gpu_hours_co2_unknown"] == 0.0
    # alpha's GPU never reported energy: unknown, never 0; its 240 GPU-hours counted as without a reading
    alpha = st.lines.filter(pl.col("project") == "alpha").row(0, named=True)
    assert (alpha["energy_kwh"], alpha["energy_kwh_facility"], alpha["kg_co2e"]) == (None, None, None)
    assert alpha["gpu_hours_co2_unknown"] == 240.0
    # per job and per business unit: research = gamma's known figure + alpha's 240 h unknown
    jobs = {r["job_id"]: r for r in st.job_energy.iter_rows(named=True)}
    assert jobs["gamma-1"]["kg_co2e"] == pytest.approx(GAMMA_KG, abs=1e-6)
    assert jobs["gamma-1"]["business_unit"] == "research" and jobs["beta-1"]["kg_co2e"] is None
    out = tmp_path / "oct"
    write_statement_set(st, out)
    by_job = pl.read_csv(out / "statement-2026-10-acme-energy-by-job.csv")
    assert by_job.filter(pl.col("job_id") == "gamma-1")["kg_co2e"].item() == pytest.approx(GAMMA_KG, abs=1e-6)
    html = (out / "statement-2026-10-acme.html").read_text()
    # the page's energy table: research's row, gamma's known kgCO2e, product (beta) unknown
    assert f"<td>research</td><td class=\"num\">264.000</td><td class=\"num\">{GAMMA_KWH:,.3f}</td>" in html
    assert f"<td class=\"num\">{GAMMA_KG:,.3f}</td><td class=\"num\">240.000</td>" in html
    assert "<td>product</td><td class=\"num\">240.000</td><td class=\"num\">unknown</td>" in html
    assert f"Sites: c1: PUE 1.25, grid intensity hourly from {tmp_path / 'grid.csv'}." in html
    # FOCUS carries them beside the charge
    focus = pl.read_csv(out / "statement-2026-10-acme-focus.csv", infer_schema=False)
    row = focus.filter(pl.col("x_Project") == "gamma").row(0, named=True)
    assert float(row["x_KgCO2e"]) == pytest.approx(GAMMA_KG, abs=1e-6)


def test_a_constant_intensity_and_a_site_without_pue(warehouse_file, tmp_path):
    """c1 at a constant 0.4 kg/kWh without a PUE: facility kWh and kgCO2e unknown (no PUE, no
    guess of 1.0); with PUE 1.1: kgCO2e = 8.397083333 × 1.1 × 0.4 = 3.694716667."""
    _intensity_csv(tmp_path / "grid.csv")
    _month(warehouse_file, tmp_path / "grid.csv")
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG + "clusters:\n  c1:\n    grid_intensity: {kg_co2e_per_kwh: 0.4}\n", at=datetime(2026, 10, 3))
    with warehouse.open_reader(warehouse_file) as con:
        gamma = build_statement(con, "2026-10").lines.filter(pl.col("project") == "gamma").row(0, named=True)
    assert gamma["energy_kwh"] == pytest.approx(GAMMA_KWH, abs=1e-6)
    assert (gamma["energy_kwh_facility"], gamma["kg_co2e"]) == (None, None)
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG + "clusters:\n  c1:\n    pue: 1.1\n    grid_intensity: {kg_co2e_per_kwh: 0.4}\n",
             at=datetime(2026, 10, 4))
    with warehouse.open_reader(warehouse_file) as con:
        gamma = build_statement(con, "2026-10").lines.filter(pl.col("project") == "gamma").row(0, named=True)
    assert gamma["kg_co2e"] == pytest.approx(GAMMA_KWH * 1.1 * 0.4, abs=1e-6)
    assert gamma["kg_co2e"] == pytest.approx(3.694716667, abs=1e-6)  # the statement states 6 decimals


def test_bad_intensity_lines_are_quarantined_and_the_good_ones_kept(warehouse_file, tmp_path):
    csv = tmp_path / "grid.csv"
    _intensity_csv(csv, extra="2026-10-02T00:30:00Z,0.3\n2026-10-02T01:00:00Z,350\n")
    with warehouse.open_writer(warehouse_file) as con:
        result = load(con, CONFIG + f"clusters:\n  c1:\n    pue: 1.25\n    grid_intensity: {{csv: {csv}}}\n")
        kept = con.execute("SELECT count(*) FROM grid_intensity_hours").fetchall()[0][0]
        held = con.execute("SELECT location, reason FROM quarantine WHERE source = 'grid-intensity' "
                           "ORDER BY location").fetchall()
    assert kept == 24
    assert held == [(f"{csv}:26", "hour '2026-10-02T00:30:00Z' is not on the hour (one value per whole UTC hour): "
                                  "give e.g. 2026-10-01T13:00:00Z"),
                    (f"{csv}:27", "kg_co2e_per_kwh '350': give kgCO2e per kWh between 0 and 3.0 (g/kWh ÷ 1000)")]
    assert len(result.warnings) == 2 and result.warnings[0].startswith(f"{csv}:26: hour")


def test_config_errors_name_the_field(tmp_path):
    from gpuledger.config import ConfigError, parse_config_text

    with pytest.raises(ConfigError, match=r"clusters.c1.pue"):
        parse_config_text(CONFIG + "clusters:\n  c1: {pue: 0.9}\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"clusters.c1.grid_intensity.*exactly one"):
        parse_config_text(CONFIG + "clusters:\n  c1: {grid_intensity: {kg_co2e_per_kwh: 0.3, csv: a.csv}}\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"clusters.c1.grid_intensity.kg_co2e_per_kwh"):
        parse_config_text(CONFIG + "clusters:\n  c1: {grid_intensity: {kg_co2e_per_kwh: 400}}\n", "t.yaml")
    # a file that is not there: the field and the file named, nothing loaded
    from gpuledger import warehouse as wh

    path = tmp_path / "w" / "g.duckdb"
    with pytest.raises(ConfigError, match=r"clusters.c1.grid_intensity.csv: .*missing.csv: cannot read"), \
            wh.open_writer(path) as con:
        load(con, CONFIG + f"clusters:\n  c1: {{grid_intensity: {{csv: {tmp_path / 'missing.csv'}}}}}\n")


def test_the_exporter_states_the_month_so_far_per_project_in_base_units(warehouse_file, tmp_path):
    """Data through Oct 11 (no November job): October so far. gamma: facility 10.496354167 kWh =
    37,786,875 J (× 3.6e6), 3.673177083 kgCO2e = 3,673.177 g; alpha and beta: no energy reading,
    so no energy or emissions sample at all (unknown, not 0) and 240 GPU-hours = 864,000
    GPU-seconds without a reading each."""
    from gpuledger.metrics.exporter import compute_figures

    _intensity_csv(tmp_path / "grid.csv")
    _month(warehouse_file, tmp_path / "grid.csv", november=False)
    figures = {name: {lab.get("project"): v for lab, v in samples} for name, _, samples in compute_figures(warehouse_file)}
    assert figures["gpuledger_energy_facility_joules"] == {"gamma": pytest.approx(GAMMA_FACILITY * 3.6e6, rel=1e-9)}
    assert figures["gpuledger_emissions_co2e_grams"] == {"gamma": pytest.approx(GAMMA_KG * 1000, rel=1e-9)}
    assert figures["gpuledger_emissions_unknown_gpu_seconds"] == {"alpha": 864000.0, "beta": 864000.0, "gamma": 0.0}
