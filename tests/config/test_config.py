from datetime import date

import pytest
import yaml

from gpuledger.config import ConfigError, example_config_text, load_config


def _write(tmp_path, data):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _minimal():
    return {"currency": "USD", "org": {"name": "acme", "children": [{"name": "a", "shares": 2}, {"name": "b", "shares": 1}]}}


def test_example_config_is_valid_and_describes_a_tree(example_config):
    assert "llm-pretrain" in example_config.projects()
    org = example_config.org_frame()
    assert org.filter(org["parent"].is_null())["node"].to_list() == ["acme"]
    # Every budget names a node of the tree; November 2026 has 30 days.
    budgets = example_config.budgets_frame()
    assert set(budgets["node"]) <= example_config.node_names()
    assert {(r["period_end"] - r["period_start"]).days for r in budgets.iter_rows(named=True)} == {30}
    assert example_config_text().startswith("# gpuledger configuration")


def test_defaults_apply_when_policy_is_left_out(tmp_path):
    cfg = load_config(_write(tmp_path, _minimal()))
    assert cfg.policy.squatting.idle_threshold_ratio == 0.01
    assert (cfg.policy.squatting.warn_minutes, cfg.policy.squatting.second_warn_minutes,
            cfg.policy.squatting.preempt_minutes) == (60, 105, 120)
    assert cfg.policy.usage.half_life_days == 7 and cfg.policy.enforcement.dry_run is True
    e = cfg.policy.enforcement
    assert (e.checkpoint_interval_minutes, e.max_lost_minutes, e.victim_order, e.victim_fit) == (
        60, 5, "least-lost-work", "within-need")


def test_example_config_states_the_demand_preemption_defaults(example_config):
    # the packaged example spells out every demand-preemption key at its default
    e = example_config.policy.enforcement
    assert (e.checkpoint_interval_minutes, e.max_lost_minutes, e.victim_order, e.victim_fit) == (
        60, 5, "least-lost-work", "within-need")
    assert "max_lost_minutes: 5" in example_config_text() and "victim_fit: within-need" in example_config_text()


def test_demand_preemption_keys_reject_bad_values(tmp_path):
    for bad, field in (({"victim_fit": "best"}, "victim_fit"), ({"max_lost_minutes": -1}, "max_lost_minutes"),
                       ({"checkpoint_interval_minutes": 0}, "checkpoint_interval_minutes")):
        data = _minimal()
        data["policy"] = {"enforcement": bad}
        with pytest.raises(ConfigError) as err:
            load_config(_write(tmp_path, data))
        assert field in str(err.value)
    data = _minimal()
    data["policy"] = {"enforcement": {"max_lost_minutes": None}}  # null: a victim may lose any amount
    assert load_config(_write(tmp_path, data)).policy.enforcement.max_lost_minutes is None


@pytest.mark.parametrize(
    "change, field, hint",
    [
        (lambda d: d.update(budgets=[{"node": "zzz", "period": "2026-11", "gpu_hours": 5}]),
         "budgets[0].node", "not in the org tree"),
        (lambda d: d.update(rate_card=[{"gpu_model": "H100", "price_per_gpu_hour": 2.1,
                                        "effective_from": "2026-01-01"}]),
         "rate_card.0.price_per_gpu_hour", "quoted string"),
        (lambda d: d.update(rate_card=[{"gpu_model": "H100", "tier": "cheap", "price_per_gpu_hour": "2",
                                        "effective_from": "2026-01-01"}]),
         "rate_card.0.tier", "'reserved', 'on-demand' or 'spot'"),
        (lambda d: d["org"]["children"].append({"name": "a"}), "(top level)", "appears twice"),
        (lambda d: d.update(policy={"squatting": {"warn_minutes": 130}}), "policy.squatting",
         "warning always comes before"),
        (lambda d: d.update(budgets=[{"node": "a", "gpu_hours": 5}]), "budgets.0", "period: YYYY-MM"),
        (lambda d: d.update(colour="red"), "colour", "Extra inputs are not permitted"),
    ],
)
def test_invalid_config_names_the_field_and_the_fix(tmp_path, change, field, hint):
    data = _minimal()
    change(data)
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, data))
    message = str(err.value)
    assert str(tmp_path / "cfg.yaml") in message
    assert field in message and hint in message


def test_unreadable_files_say_which(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("org: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_a_clusters_first_day_is_a_date_after_2000_and_names_where_it_comes_from(tmp_path):
    cfg = load_config(_write(tmp_path, {**_minimal(), "clusters": {"east": {"first_day": "2024-06-01"}}}))
    assert cfg.first_day("east") == (date(2024, 6, 1), "clusters.east.first_day")
    assert cfg.first_day("west") == (date(2000, 1, 1), "the earliest gpuledger accepts")
    with pytest.raises(ConfigError, match=r"clusters.east.first_day: Value error, 1999-12-31 is before 2000-01-01"):
        load_config(_write(tmp_path, {**_minimal(), "clusters": {"east": {"first_day": "1999-12-31"}}}))
    with pytest.raises(ConfigError, match=r"policy.samples.clock_skew_seconds"):
        load_config(_write(tmp_path, {**_minimal(), "policy": {"samples": {"clock_skew_seconds": -1}}}))
