"""A Streamlit script that draws every chart of gpuledger.dashboards.charts with ``?rows=N`` rows
of made-up data (N series, bars or heatmap rows), each under a heading with its name, drawn as the
pages draw them (``ui.chart``: SVG rendered on the server): the browser test opens it at 1, 3 and 50 rows and measures what Chromium drew. Run it by hand to look:
``streamlit run tests/dashboards/chart_gallery.py`` then ``/?rows=50``."""

from datetime import datetime, timedelta

import polars as pl
import streamlit as st
from gpuledger.dashboards import charts, ui

st.set_page_config(page_title="chart gallery", layout="wide")
n = int(st.query_params.get("rows", "3"))
t0 = datetime(2026, 11, 1)
hours = [t0 + timedelta(hours=h) for h in range(48)]
names = [f"project-{i:02d}-with-a-longish-name" if i % 7 == 3 else f"project-{i:02d}" for i in range(n)]


def show(name: str, chart) -> None:
    st.markdown(f"#### chart: {name}")
    ui.chart(chart)


util = pl.DataFrame([{"hour": h, "cluster": f"cluster-{i}", "measure": m, "pct": (10 + 3 * i + h.hour) % 100}
                     for h in hours for i in range(n) for m in ("allocated", "active")])
show("pct_over_time", charts.pct_over_time(util, "cluster", "Allocated and active % of capacity"))

kinds = pl.DataFrame([{"hour": h, "kind": f"kind-{i}", "allocated_pct": 100 / max(n, 1) * ((i + h.hour) % 3) / 2}
                      for h in hours for i in range(n)])
show("stacked_hours", charts.stacked_hours(kinds, "allocated_pct", "kind", "Allocated % of capacity by workload kind",
                                           charts.axis_title("allocated", "% of installed capacity")))

rows = pl.DataFrame({"label": [f"job-{i} ({names[i]}, user-{i})" for i in range(n)]})
cells = pl.DataFrame([{"label": r, "bin": t0 + timedelta(hours=2 * b), "bin_end": t0 + timedelta(hours=2 * b + 2),
                       "gpu_hours_held": 8.0, "gpu_hours_idle": 8.0 * ((b + i) % 5) / 4,
                       "idle_share": ((b + i) % 5) / 4} for i, r in enumerate(rows["label"]) for b in range(24)])
show("idle_heatmap", charts.idle_heatmap(cells, rows, "Who holds idle GPUs", 2))

ratios = pl.DataFrame([{"as_of": t0 + timedelta(days=d), "node": names[i], "delivery_ratio": 0.5 + 0.01 * i + 0.02 * d}
                       for d in range(5) for i in range(n)])
show("ratio_over_time", charts.ratio_over_time(ratios, "delivery_ratio", "Delivery ratio per project",
                                               charts.axis_title("delivered ÷ owed GPU-hours", "%")))

budgets = pl.DataFrame({"node": names, "status": [("funded", "at-risk", "exhausted")[i % 3] for i in range(n)],
                        "budget_gpu_hours": [1000.0 * (i + 1) for i in range(n)],
                        # the first node at 1/6 = 16.7 % of its budget, the others at 40 %
                        "consumed_gpu_hours": [1000.0 / 6 if i == 0 else 400.0 * (i + 1) for i in range(n)]})
show("budget_vs_consumed", charts.budget_vs_consumed(budgets, "Budget vs consumed per node"))

history = pl.DataFrame({"as_of": [t0 + timedelta(days=d) for d in range(n)],
                        "remaining_gpu_hours": [1000.0 - 10 * d for d in range(n)], "status": ["funded"] * n})
projection = pl.DataFrame({"as_of": [t0 + timedelta(days=n - 1), t0 + timedelta(days=n + 30)],
                           "remaining_gpu_hours": [1000.0 - 10 * (n - 1), 0.0]})
show("burn_down", charts.burn_down(history, projection, 1000.0, "llm: remaining budget"))

amounts = pl.DataFrame({"label": names, "line_kind": ["idle" if i == 0 else "charge" for i in range(n)],
                        "amount": [1234.5 * (i + 1) for i in range(n)], "gpu_hours": [100.0 * (i + 1) for i in range(n)]})
show("amount_bars", charts.amount_bars(amounts, "Amount per project", "USD"))

delivery = pl.DataFrame([{"project": names[i], "policy": p, "delivery_ratio": 0.8 + 0.001 * i,
                          "owed_gpu_hours": 100.0, "delivered_gpu_hours": 80.0}
                         for i in range(n) for p in ("current", "proposed")])
show("whatif_delivery", charts.whatif_delivery(delivery, "Delivered ÷ owed GPU-hours per project and policy"))

waits = pl.DataFrame([{"job_class": c, "policy": f"policy-{i}", "wait_p50_hours": 1.0, "wait_p90_hours": 3.0 + i,
                       "jobs": 10} for c in ("small", "medium", "large") for i in range(min(n, 6))])
show("whatif_waits", charts.whatif_waits(waits, "Wait before start (hours): p90 bars, p50 ticks"))

sweep = pl.DataFrame({"value": [str(0.5 + 0.1 * i) for i in range(n)], "worst_delivery_ratio": [0.7] * n,
                      "delivery_ratio": [0.9] * n})
show("whatif_sweep", charts.whatif_sweep(sweep, "reclaim_after_h", "Delivered ÷ owed per reclaim_after_h value"))
st.markdown("#### end of gallery")
