"""Config texts tests share."""

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


# One budgeted project beside another, its shares, budget and price left as parameters: the config
# corpus (tests/cli/test_hostile_corpus.py) and the bounds tests vary one value at a time.
VISION_NLP = """currency: USD
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


def vision_nlp(shares="1", hours="100", price='"2.50"', head="") -> str:
    return head + VISION_NLP.replace("SHARES", shares).replace("HOURS", hours).replace("PRICE", price)
