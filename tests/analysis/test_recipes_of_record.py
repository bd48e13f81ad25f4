"""The recipes of record on the seed example, by hand and by plain loops that share no code.

Seed example (docs/reference-values.md): one prompt, three answers scored 8.2, 6.5 and 9.1, one
token each. Mean 23.8 / 3 = 7.9333...; the recipes without the std give r - mean =
(0.2667, -1.4333, 1.1667) in every dialect; the others divide by a std, each dialect with its own
epsilon and (for the batch std of verl and OpenRLHF, which cannot say it) its own whitening.
Also: the alias ``defaults_2026``, the std note, Tinker's sum, and V3.2's KL gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.analysis import era_diff
from roll_viz.cli.train import build_parser
from roll_viz.core.pipeline import FRAMEWORKS, policy_loss, resolve_config
from roll_viz.core.pipeline import eras as recipes
from roll_viz.core.records import Batch

F = torch.float64
SEED = (8.2, 6.5, 9.1)
NO_STD = ("prime_rl", "tinker", "deepseek_v32")
#: each dialect's epsilon on the group / batch std (algorithms.md: group statistics)
EPS = {"roll": 1e-6, "verl": 1e-6, "openrlhf": 1e-9, "trl": 1e-4}


def _seed_batch() -> Batch:
    return Batch(
        scores=torch.tensor(SEED, dtype=F),
        response_mask=torch.ones(3, 1, dtype=F),
        group_ids=torch.zeros(3, dtype=torch.long),
        group_labels=("seed",),
        logprobs=torch.tensor([[-0.5], [-1.0], [-0.3]], dtype=F),
        ref_logprobs=torch.tensor([[-0.7], [-1.0], [-0.2]], dtype=F),
    )


def _loop_deviations(xs):
    mean = 0.0
    for x in xs:
        mean += x / len(xs)
    return [x - mean for x in xs]


def _loop_sq(devs, divisor):
    total = 0.0
    for d in devs:
        total += d * d
    return total / divisor


def _expected(key: str, fw: str) -> list[float]:
    """The seed's advantages under a recipe in a dialect, by plain loops."""
    devs = _loop_deviations(SEED)
    if key in NO_STD:
        return devs
    unbiased = math.sqrt(_loop_sq(devs, len(devs) - 1))
    if key == "grpo_2024" or fw in ("roll", "trl"):  # group std, or the batch std (one group)
        return [d / (unbiased + EPS[fw]) for d in devs]
    if fw == "verl":  # reinforce_plus_plus_baseline: whitening, unbiased var, rsqrt(var + 1e-8)
        return [d / math.sqrt(_loop_sq(devs, len(devs) - 1) + 1e-8) for d in devs]
    # openrlhf reinforce_baseline: whitening, biased var, rsqrt(max(var, 1e-8))
    return [d / math.sqrt(max(_loop_sq(devs, len(devs)), 1e-8)) for d in devs]


def test_the_seed_by_hand():
    devs = _loop_deviations(SEED)
    assert devs == pytest.approx([0.26666666667, -1.43333333333, 1.16666666667], abs=1e-10)
    # the unbiased std of the seed: sqrt(3.486667 / 2) = 1.320353
    assert math.sqrt(_loop_sq(devs, 2)) == pytest.approx(1.3203534, abs=1e-7)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("key", list(recipes.ERAS))
def test_each_recipe_on_the_seed_example(key, fw):
    er = era_diff.run_era(_seed_batch(), recipes.ERAS[key], fw)
    got = er.advantages[:, 0].tolist()
    assert got == pytest.approx(_expected(key, fw), abs=1e-9)
    assert er.kept.all()  # the seed group has spread: no recipe filters it


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_no_std_is_exactly_r_minus_the_mean(fw):
    for key in NO_STD:
        adv = era_diff.run_era(_seed_batch(), recipes.ERAS[key], fw).advantages[:, 0]
        assert adv.tolist() == pytest.approx([0.2666666667, -1.4333333333, 1.1666666667], 1e-9)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_recipe_config_is_accepted(fw):
    for era in recipes.ERAS.values():
        cfg = resolve_config(fw, era.config(fw))
        assert set(era.config(fw)) <= set(cfg)


def test_the_alias_still_resolves():
    alias = recipes.ERAS["defaults_2026"]
    assert alias is recipes.SCALERL_OLMO3 is recipes.DEFAULTS_2026
    assert "defaults_2026" in recipes.ERAS
    assert "defaults_2026" not in list(recipes.ERAS)  # the records only, each once
    assert len(recipes.ERAS) == 5
    diff = era_diff.diff_eras(_seed_batch(), "roll", eras=("defaults_2026", "scalerl_olmo3"))
    assert list(diff.runs) == ["scalerl_olmo3"]
    for key in ("defaults_2026", *recipes.ERAS):  # the run command accepts each name
        args = build_parser().parse_args(["--prompt", "a", "--era", key])
        assert recipes.ERAS[args.era] is recipes.ERAS[key]
    with pytest.raises(KeyError):
        recipes.ERAS["defaults_2025"]


def test_the_std_is_the_minority_choice():
    levels = [e.std_level for e in recipes.ERAS.values()]
    assert (levels.count("none"), levels.count("batch"), levels.count("group")) == (3, 1, 1)
    note = recipes.std_note()
    assert note.startswith("Of these 5 recipes: 3 with no std (prime-rl, Tinker, DeepSeek-V3.2)")
    assert "1 with the group std (GRPO as published (2024))" in note
    assert note.endswith(recipes.STD_MINORITY)
    two = recipes.std_note(("tinker", "defaults_2026", "tinker"))
    assert two.startswith("Of these 2 recipes: 1 with no std (Tinker); 1 with the batch std")


def _lengths_batch() -> Batch:
    gen = torch.Generator().manual_seed(7)
    lengths = torch.tensor([2, 5, 3, 4, 1, 3])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).to(F)
    lp = -1.0 + 0.3 * torch.randn(6, 5, generator=gen, dtype=F)
    return Batch(
        scores=torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0, 1.0], dtype=F),
        response_mask=mask,
        group_ids=torch.arange(2).repeat_interleave(3),
        logprobs=lp,
        ref_logprobs=lp + 0.2 * torch.randn(6, 5, generator=gen, dtype=F),
    )


def _loop_sum_of_minus_a(batch: Batch, adv) -> tuple[float, int]:
    total, rows = 0.0, 0
    for b in range(batch.scores.shape[0]):
        if batch.response_mask[b].sum() > 0:
            rows += 1
        for t in range(batch.response_mask.shape[1]):
            if batch.response_mask[b, t]:
                total += -float(adv[b, t])
    return total, rows


@pytest.mark.parametrize(
    ("fw", "divisor"),
    [
        ("verl", lambda rows, tokens: 1.0),
        ("roll", lambda rows, tokens: rows),
        ("trl", lambda rows, tokens: rows * 512),
        ("openrlhf", lambda rows, tokens: tokens),
    ],
)
def test_tinkers_sum_and_each_dialects_divisor(fw, divisor):
    """Tinker: -sum of A over every token at ratio 1; the dialects divide it by a constant."""
    batch = _lengths_batch()
    er = era_diff.run_era(batch, recipes.TINKER, fw)
    assert not er.filtered  # Tinker keeps the zero-variance group ("prompt 1": 1, 1, 1)
    total, rows = _loop_sum_of_minus_a(batch, er.advantages)
    tokens = int(batch.response_mask.sum())
    assert er.loss == pytest.approx(total / divisor(rows, tokens), abs=1e-12)


def test_prime_rl_drops_the_flat_group_and_takes_the_token_mean():
    """The token mean of -A at ratio 1; verl's dppo_tv weighs log pi instead (its note)."""
    batch = _lengths_batch()
    for fw in FRAMEWORKS:
        er = era_diff.run_era(batch, recipes.PRIME_RL, fw)
        assert er.kept.tolist() == [True] * 3 + [False] * 3
        total, tokens = 0.0, 0
        for b in range(3):
            for t in range(5):
                if batch.response_mask[b, t]:
                    weight = float(batch.logprobs[b, t]) if fw == "verl" else 1.0
                    total += -float(er.advantages[b, t]) * weight
                    tokens += 1
        assert er.loss == pytest.approx(total / tokens, abs=1e-12), fw
        # the same gradient in every dialect: -A / tokens on each kept token
        want = -er.advantages[:3] * batch.response_mask[:3] / tokens
        torch.testing.assert_close(er.grad[:3], want, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    ("fw", "unbiased"), [("trl", True), ("verl", True), ("openrlhf", True), ("roll", False)]
)
def test_v32_kl_gradient_at_the_first_update(fw, unbiased):
    """V3.2's (pi / pi_old) k3 has the gradient log pi - log ref at ratio 1; ROLL's plain k3
    has 1 - pi_ref / pi (its note says so). Equal lengths: every dialect's weight is 1 / 15."""
    gen = torch.Generator().manual_seed(3)
    lp = -1.0 + 0.3 * torch.randn(3, 5, generator=gen, dtype=F)
    ref = lp + 0.4 * torch.randn(3, 5, generator=gen, dtype=F)
    mask = torch.ones(3, 5, dtype=F)
    batch = Batch(
        scores=torch.tensor(SEED, dtype=F),
        response_mask=mask,
        group_ids=torch.zeros(3, dtype=torch.long),
        logprobs=lp,
        ref_logprobs=ref,
    )
    er = era_diff.run_era(batch, recipes.DEEPSEEK_V32, fw)
    logp = lp.clone().requires_grad_(True)
    res = policy_loss(
        fw,
        er.config,
        logprobs=logp,
        old_logprobs=lp,
        advantages=er.trace.advantages,
        response_mask=mask,
        ref_logprobs=ref,
    )
    res.total.backward()
    kl_grad = logp.grad + er.trace.advantages / 15  # take away the policy term's -A / 15
    for b in range(3):
        for t in range(5):
            x = float(lp[b, t] - ref[b, t])
            slope = x if unbiased else 1.0 - math.exp(-x)
            assert float(kl_grad[b, t]) == pytest.approx(0.04 * slope / 15, abs=1e-12)
