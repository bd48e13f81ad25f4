"""Unit tests of roll_viz.views.explain: formulas with numbers against hand values, tables."""

import dataclasses
import math

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.core.records import batch_from_rollout
from roll_viz.views import explain, tables, text
from tests.synthetic import SEED_SCORES, seed_rollout, synthetic_rollout


def _seed_trace(framework="roll", config=None, values=None, width=3):
    ro = seed_rollout(width=width)
    scores = torch.tensor(SEED_SCORES, dtype=torch.float64)
    v = values if values is not None else torch.zeros_like(ro.response_mask)
    batch = batch_from_rollout(ro, scores, values=v)
    return ro, pipeline.run(batch, framework, config or {})


@pytest.mark.parametrize(("b", "expected"), [(0, 0.202), (1, -1.086), (2, 0.884)])
def test_roll_grpo_formula_numbers(b, expected):
    ro, trace = _seed_trace("roll", {"adv_estimator": "grpo"})
    steps = explain.token_formulas(trace, b, 0, ro.response_mask)
    norm = steps[0]
    assert norm.title == "normalized reward"
    assert norm.value == pytest.approx(expected, abs=5e-4)
    assert f"{SEED_SCORES[b]:.3f}" in norm.numeric
    assert r"{8.200 - 7.933}" in norm.numeric or r"- 7.933}" in norm.numeric
    assert r"{1.320 + 10^{-6}}" in norm.numeric
    assert norm.numeric.endswith(f"= {expected:.3f}")
    assert steps[-1].value == pytest.approx(float(trace.advantages[b, 0]))


def test_seed_example_exact_string():
    ro, trace = _seed_trace("roll", {"adv_estimator": "grpo"})
    first = explain.token_formulas(trace, 0, 0, ro.response_mask)[0]
    assert first.numeric == r"\tilde r = \dfrac{8.200 - 7.933}{1.320 + 10^{-6}} = 0.202"


def test_normalized_reward_formula_by_hand():
    f = explain.normalized_reward_formula(8.2, 7.9333333, 1.3203 + 1e-6, 1e-6)
    assert f.value == pytest.approx((8.2 - 7.9333333) / (1.3203 + 1e-6))
    f2 = explain.normalized_reward_formula(1.0, -0.5, 1.0, 1e-6)
    assert f2.numeric == r"\tilde r = 1.000 - (-0.500) = 1.500"


def test_gae_formulas_by_hand():
    # algorithms: token_rewards [[0, 0, 1]], gamma 0.9, lam 0.95, V = 0 -> A = [0.731025, 0.855, 1]
    delta, adv = explain.gae_formulas(0.0, 0.0, 0.0, 0.855, 0.9, 0.95)
    assert delta.value == 0.0
    assert adv.value == pytest.approx(0.731025)
    assert r"0.90 \cdot 0.95 \cdot 0.855 = 0.731" in adv.numeric
    d2, _a2 = explain.gae_formulas(1.0, 0.5, 0.25, 0.0, 1.0, 1.0)
    assert d2.value == pytest.approx(0.75)
    assert "= 0.750" in d2.numeric


def test_gae_steps_match_the_trace():
    ro = seed_rollout(width=3)
    scores = torch.tensor(SEED_SCORES, dtype=torch.float64)
    values = torch.full_like(ro.response_mask, 0.5)
    batch = batch_from_rollout(ro, scores, values=values)
    cfg = {"adv_estimator": "gae", "gamma": 0.9, "lambd": 0.95}
    trace = pipeline.run(batch, "roll", cfg)
    for t in range(int(ro.response_mask[0].sum())):
        steps = explain.token_formulas(trace, 0, t, ro.response_mask, values)
        titles = [s.title for s in steps]
        assert "TD error" in titles
        recursion = next(s for s in steps if s.title.startswith("GAE recursion"))
        assert recursion.value == pytest.approx(float(trace.advantages[0, t]), abs=1e-9)


@pytest.mark.parametrize("framework", ["roll", "verl", "openrlhf"])
def test_gae_recursion_numbers_are_the_dialects(framework):
    ro = synthetic_rollout(prompts=2, group_size=2, width=4)
    scores = torch.tensor([1.0, 0.0, 2.0, 3.0], dtype=torch.float64)
    values = torch.linspace(0.1, 0.9, 16, dtype=torch.float64).reshape(4, 4)
    batch = batch_from_rollout(ro, scores, values=values)
    key = pipeline.ESTIMATOR_KEY[framework]
    lam_key = pipeline.ALIASES[framework]["lam"]
    trace = pipeline.run(batch, framework, {key: "gae", "gamma": 0.9, lam_key: 0.8})
    raw = trace.returns - values
    for b in range(4):
        for t in range(int(ro.response_mask[b].sum())):
            steps = explain.token_formulas(trace, b, t, ro.response_mask, values)
            recursion = next(s for s in steps if s.title.startswith("GAE recursion"))
            assert recursion.value == pytest.approx(float(raw[b, t]), abs=1e-9)


def test_reinforce_pp_return_and_whitening():
    ro, trace = _seed_trace("verl", {"adv_estimator": "reinforce_plus_plus"})
    steps = explain.token_formulas(trace, 0, 0, ro.response_mask)
    titles = [s.title for s in steps]
    assert "return (reward-to-go)" in titles
    ret = steps[titles.index("return (reward-to-go)")]
    assert ret.value == pytest.approx(8.2)
    assert steps[-1].title.startswith("whitening")
    assert steps[-1].value == pytest.approx(float(trace.advantages[0, 0]))
    assert "7.900" in steps[-1].numeric  # token-weighted mean of the returns


def test_kl_in_reward_step():
    ro, trace = _seed_trace("roll", {"adv_estimator": "reinforce", "add_token_level_kl": True})
    steps = explain.token_formulas(trace, 1, 2, ro.response_mask)
    step = next(s for s in steps if s.title.startswith("token reward"))
    assert "last token" in step.title
    assert step.value == pytest.approx(float(trace.token_rewards[1, 2]))
    assert steps[-1].value == pytest.approx(float(trace.advantages[1, 2]))


@pytest.mark.parametrize("framework", pipeline.FRAMEWORKS)
def test_every_estimator_ends_at_the_trace_value(framework):
    ro = synthetic_rollout(prompts=2, group_size=3, width=4)
    scores = torch.tensor([1.0, 0.0, 2.0, 3.0, 3.5, 1.0], dtype=torch.float64)
    values = torch.linspace(0, 1, 24, dtype=torch.float64).reshape(6, 4) * ro.response_mask
    batch = batch_from_rollout(
        ro, scores, values=values, baseline_scores=torch.ones(6, dtype=torch.float64)
    )
    pi2 = torch.full_like(values, 0.5)  # verl optimal_token_baseline reads sum_pi_squared
    batch = dataclasses.replace(batch, sum_pi_squared=pi2)
    key = pipeline.ESTIMATOR_KEY[framework]
    for est in pipeline.CHOICES[framework][key]:
        trace = pipeline.run(batch, framework, {key: est})
        for b, t in ((0, 0), (5, 3), (2, 1)):
            if not ro.response_mask[b, t]:
                continue
            steps = explain.token_formulas(trace, b, t, ro.response_mask, values)
            assert steps[-1].value == pytest.approx(float(trace.advantages[b, t]), abs=1e-9)


def test_fmt_and_term():
    assert text.fmt(0.20196) == "0.202"
    assert text.fmt(-0.0) == "0"
    assert text.fmt(1e-6) == "10^{-6}"
    assert text.fmt(2e-5) == r"2\cdot 10^{-5}"
    assert text.fmt(float("nan")) == r"\mathrm{NaN}"
    assert text.term(-1.5) == "(-1.500)"


def test_subsample_rollout_keeps_first_g_per_prompt():
    ro = synthetic_rollout(prompts=2, group_size=4, width=5)
    sub = tables.subsample_rollout(ro, 2)
    assert sub.group_ids.tolist() == [0, 0, 1, 1]
    assert sub.responses == (ro.responses[0], ro.responses[1], ro.responses[4], ro.responses[5])
    assert sub.response_mask.shape == (4, 5)
    assert sub.group_size == 2
    assert tables.subsample_rollout(ro, 4) is ro
    with pytest.raises(ValueError, match="group_size"):
        tables.subsample_rollout(ro, 5)


def test_tables():
    ro, trace = _seed_trace("roll", {"adv_estimator": "grpo"})
    samples = tables.samples_table(ro, trace.scores)
    assert list(samples["sample"]) == ["p0/s0", "p0/s1", "p0/s2"]
    assert list(samples["reward"]) == list(SEED_SCORES)
    rewards = tables.rewards_table(ro, trace)
    assert rewards["processed_reward"].round(3).tolist() == [0.202, -1.086, 0.884]
    groups = tables.group_table(ro, trace.scores)
    assert groups.loc[0, "mean"] == pytest.approx(7.9333333)
    assert groups.loc[0, "std_unbiased"] == pytest.approx(1.3203, abs=1e-4)
    single = tables.group_table(tables.subsample_rollout(ro, 1), trace.scores[:1])
    assert math.isnan(single.loc[0, "std_unbiased"])
    tokens = tables.token_table(ro, trace)
    assert len(tokens) == int(ro.response_mask.sum())
    assert {"token", "kl", "token_reward", "advantage"} <= set(tokens.columns)


def test_kl_summary_table():
    ro = synthetic_rollout()
    est = {"k1": ro.logprobs - ro.ref_logprobs}
    table = tables.kl_summary_table(ro, est)
    n = ro.response_mask[0].sum()
    assert table.loc[0, "k1"] == pytest.approx(float(est["k1"][0].sum() / n))


def test_beta_schedule_grows_when_kl_above_target():
    betas = explain.simulated_betas(
        0.2, observed_kl=1.0, target=0.1, horizon=100, n_steps=10, steps=3
    )
    assert betas[0] == 0.2
    assert betas[1] == pytest.approx(0.2 * 1.02)
    assert betas[3] == pytest.approx(0.2 * 1.02**3)
    down = explain.simulated_betas(
        0.2, observed_kl=0.0, target=0.1, horizon=100, n_steps=10, steps=1
    )
    assert down[1] == pytest.approx(0.2 * 0.98)


def test_visible_whitespace():
    assert text.visible_whitespace(" a\n") == "\u00b7a\u21b5"
    assert text.visible_whitespace("") == "\u2205"


def test_trace_to_plain_is_json_able():
    import json

    _, trace = _seed_trace("roll", {"adv_estimator": "grpo"})
    data = tables.trace_to_plain(trace)
    json.dumps(data)
    assert data["framework"] == "roll"
