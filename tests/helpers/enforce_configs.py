"""Config texts the enforcement tests share."""

# Two projects under one org: funded-proj holds a November budget, free-proj none; enforcement live
# (dry_run: false) so a test's apply acts. Append lines under `enforcement:` with four spaces.
TWO_PROJECTS = """
currency: USD
org:
  name: acme
  children:
    - {name: funded-proj, shares: 1}
    - {name: free-proj, shares: 1}
budgets:
  - {node: funded-proj, gpu_hours: 1000, period: 2026-11}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
policy:
  enforcement:
    dry_run: false
"""
