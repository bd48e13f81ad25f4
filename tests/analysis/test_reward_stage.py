"""The reward stage's numbers by hand: parts and shares, truncation policies, the hack exercise."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from roll_viz import rewards
from roll_viz.analysis import reward_stage as rs
from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.dialects import openrlhf
from roll_viz.core.pipeline.dialects.truncation import OPTIONS, POLICY_LABELS
from tests.synthetic import synthetic_rollout

EPS = 1e-6


def _rollout(responses: tuple[str, ...]):
    base = synthetic_rollout(prompts=1, group_size=len(responses))
    return dataclasses.replace(base, responses=responses)


# ------------------------------------------------------------------------------ parts


SPEC = rewards.RewardSpec(
    terms=(
        ("keyword", 2.0, (("pattern", "cat"),)),
        ("target_length", -0.5, (("target", 2), ("tolerance", 2))),
    )
)


def test_parts_and_shares_by_hand():
    # "the cat": keyword 1 -> 2.0; 2 words -> 1 -> -0.5.  total 1.5, shares 2/2.5, 0.5/2.5
    # "a dog sat here": 0 -> 0; 4 words -> max(0, 1 - 2/2) = 0.  all parts 0: shares 0
    # "cat": 1 -> 2.0; 1 word -> 1 - 1/2 = 0.5 -> -0.25.  total 1.75, shares 2/2.25, 0.25/2.25
    parts = rs.reward_parts(_rollout(("the cat", "a dog sat here", "cat")), SPEC)
    assert parts.labels == ("1. keyword", "2. target_length")
    assert parts.weights == (2.0, -0.5)
    assert parts.values.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 0.5]]
    assert parts.parts.tolist() == [[2.0, -0.5], [0.0, 0.0], [2.0, -0.25]]
    assert parts.totals.tolist() == [1.5, 0.0, 1.75]
    assert parts.shares[0].tolist() == pytest.approx([0.8, 0.2])
    assert parts.shares[1].tolist() == [0.0, 0.0]
    assert parts.shares[2].tolist() == pytest.approx([2 / 2.25, 0.25 / 2.25])
    assert parts.noise.tolist() == [0.0, 0.0, 0.0]


def test_noise_stays_out_of_the_parts():
    noisy = dataclasses.replace(SPEC, noise_sigma=0.5, noise_seed=3)
    parts = rs.reward_parts(_rollout(("the cat", "a dog sat here", "cat")), noisy)
    draws = torch.randn(3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert parts.noise.tolist() == pytest.approx((0.5 * draws).tolist())
    assert parts.totals.tolist() == [1.5, 0.0, 1.75]  # the parts are the same without noise


# ------------------------------------------------------------------------------ advantages


def test_group_advantages_by_hand():
    # one group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    adv = rs.group_advantages(
        torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64), torch.zeros(4, dtype=torch.long)
    )
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert adv.tolist() == pytest.approx([a, -a, -a, a], rel=1e-12)


# ------------------------------------------------------------------------------ truncation


def test_soft_overlong_penalty_matches_dapo_reference_values():
    # docs algorithms.md T15 (verl DAPO manager): L_max 20480, buffer 4096, factor 1
    lengths = torch.tensor([10000, 17000, 18432, 20480])
    penalty = rs.overlong_penalty(lengths, 20480, 4096, 1.0)
    assert penalty.tolist() == [0.0, -0.150390625, -0.5, -1.0]


def test_soft_overlong_penalty_against_its_formula():
    max_len, buffer, factor = 32, 6, 2.5
    lengths = torch.arange(0, max_len + 1)
    got = rs.overlong_penalty(lengths, max_len, buffer, factor).tolist()
    for length, value in zip(range(max_len + 1), got, strict=True):  # verl: min(-exceed/buf*f, 0)
        exceed = length - (max_len - buffer)
        assert value == pytest.approx(min(-exceed / buffer * factor, 0.0), abs=1e-15)


@pytest.mark.parametrize(
    ("buffer", "factor", "message"),
    [(0, 1.0, "buffer"), (33, 1.0, "buffer"), (4, -0.1, "factor"), (4, 10.5, "factor")],
)
def test_soft_overlong_penalty_bounds(buffer, factor, message):
    with pytest.raises(ValueError, match=message):
        rs.overlong_penalty(torch.tensor([5]), 32, buffer, factor)


def test_four_truncation_policies_on_four_samples_by_hand():
    # one group; scores [1, 1, 0, 1], lengths [10, 8, 5, 10], cut rows 0 and 3; cap 10, buffer 4
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    lengths = torch.tensor([10, 8, 5, 10])
    cut = torch.tensor([True, False, False, True])
    group = torch.zeros(4, dtype=torch.long)
    got = {p.policy: p for p in rs.truncation_policies(scores, lengths, cut, group, 10, 4, 1.0)}
    assert tuple(got) == rs.POLICIES
    # zero: [0, 1, 0, 0], mean 0.25, deviations [-.25, .75, -.25, -.25], std sqrt(.75/3) = 0.5
    assert got["zero"].rewards.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert got["zero"].reward_mean == 0.25
    s = 0.5 + EPS
    assert got["zero"].advantages.tolist() == pytest.approx(
        [-0.25 / s, 0.75 / s, -0.25 / s, -0.25 / s]
    )
    assert got["zero"].abs_adv_trained == pytest.approx(
        1.5 / s / 4
    )  # (.25 + .75 + .25 + .25) / 4 / s = 0.75
    # keep: [1, 1, 0, 1], mean 0.75, std 0.5
    assert got["keep"].reward_mean == 0.75
    assert got["keep"].advantages.tolist() == pytest.approx(
        [0.25 / s, 0.25 / s, -0.75 / s, 0.25 / s]
    )
    # soft: expected 6; L=10 -> -1, L=8 -> -0.5, L=5 -> 0: [0, 0.5, 0, 0], mean 0.125, std 0.25
    assert got["soft"].rewards.tolist() == [0.0, 0.5, 0.0, 0.0]
    assert got["soft"].reward_mean == 0.125
    q = 0.25 + EPS
    assert got["soft"].advantages.tolist() == pytest.approx(
        [-0.125 / q, 0.375 / q, -0.125 / q, -0.125 / q]
    )
    # mask: the keep numbers, rows 0 and 3 untrained; mean |A| over rows 1, 2 = (.25 + .75)/2/s
    assert got["mask"].reward_mean == 0.75
    assert got["mask"].advantages.tolist() == got["keep"].advantages.tolist()
    assert got["mask"].trained.tolist() == [False, True, True, False]
    assert got["mask"].abs_adv_trained == pytest.approx(0.5 / s)
    assert all(got[p].trained.all() for p in ("zero", "keep", "soft"))


def test_every_row_masked_trains_nothing():
    scores = torch.tensor([1.0, 0.0], dtype=torch.float64)
    cut = torch.tensor([True, True])
    mask = rs.truncation_policies(
        scores, torch.tensor([4, 4]), cut, torch.zeros(2, dtype=torch.long), 4, 1
    )[3]
    assert mask.abs_adv_trained == 0.0
    assert not mask.trained.any()


def test_truncated_rows_read_the_finish_reason():
    rollout = synthetic_rollout(
        prompts=1, group_size=3, width=4
    )  # only the last row fills the width
    assert rs.truncated_rows(rollout).tolist() == [r == "length" for r in rollout.finish_reasons]
    assert rs.truncated_rows(rollout).tolist() == [False, False, True]


def test_every_dialect_names_every_policy():
    assert set(OPTIONS) == set(dialects.DIALECTS)
    for options in OPTIONS.values():
        assert set(options) == set(rs.POLICIES) == set(POLICY_LABELS)
        assert options["keep"] is not None  # keeping the score is every framework's default
    assert OPTIONS["trl"]["mask"] == "mask_truncated_completions=True"


# ------------------------------------------------------------------------------ the hack


def test_word_stats_by_hand():
    # ratios 2/3 and 2/2; words amazing x2, great, a, b: "amazing" 2 of 5
    distinct, word, share = rs.word_stats(["Amazing amazing great", "a b"])
    assert distinct == pytest.approx((2 / 3 + 1) / 2)
    assert (word, share) == ("amazing", 0.4)
    assert rs.word_stats(["b a"])[1:] == ("a", 0.5)  # a tie: alphabetical
    assert rs.word_stats(["", "42"]) == (1.0, "", 0.0)


def test_hack_exercise_scores_recorded_samples_with_the_students_reward():
    samples = SimpleNamespace(
        prompts=("p",), group_ids=(0, 0), responses=("great great", "dull"), rewards=(0.5, 0.0)
    )
    run = SimpleNamespace(
        steps=(SimpleNamespace(step=0, samples=None), SimpleNamespace(step=5, samples=samples))
    )
    (step,) = rs.hack_exercise(rewards.RewardSpec.single("keyword", pattern="great"), run)
    assert step.step == 5
    assert step.student == (1.0, 0.0)
    assert step.recorded == (0.5, 0.0)
    assert (step.top_word, step.top_share) == ("great", 2 / 3)


def test_recorded_hack_run_maxes_out_a_keyword_reward():
    steps = rs.hack_exercise(rewards.RewardSpec.single("keyword", pattern="amazing"))
    assert [s.step for s in steps] == [0, 5, 10, 15, 20, 25, 29]
    assert steps[-1].student == (1.0,) * 8  # every last-step sample repeats "amazing"
    assert sum(steps[0].student) < 8
    assert steps[-1].top_word == "amazing"
    assert steps[-1].distinct < 0.2


def test_soft_and_zero_policies_agree_with_the_openrlhf_dialect():
    # the dialect's own length_penalties (DAPO overlong; stop_properly_penalty_coef 0 = zero)
    cap, buffer, factor = 8, 3, 0.7
    lengths = torch.tensor([2, 5, 6, 7, 8, 8])
    mask = (torch.arange(cap)[None, :] < lengths[:, None]).to(torch.float64)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.0], dtype=torch.float64)
    batch = SimpleNamespace(scores=scores, response_mask=mask)
    base = {"max_new_tokens": cap, "overlong_buffer_len": None, "stop_properly_penalty_coef": None}
    soft = {**base, "overlong_buffer_len": buffer, "overlong_penalty_factor": factor}
    zero = {**base, "stop_properly_penalty_coef": 0.0}
    assert "overlong_buffer_len" in OPTIONS["openrlhf"]["soft"]
    assert "stop_properly_penalty_coef 0" in OPTIONS["openrlhf"]["zero"]
    got = rs.truncation_policies(
        scores, lengths, lengths == cap, torch.tensor([0, 0, 0, 1, 1, 1]), cap, buffer, factor
    )
    assert got[2].rewards.tolist() == pytest.approx(
        openrlhf.length_penalties(batch, soft, []).tolist()
    )
    assert got[0].rewards.tolist() == openrlhf.length_penalties(batch, zero, []).tolist()


def test_parts_sum_to_the_score_and_no_noise_is_exactly_zero():
    spec = rewards.RewardSpec(
        terms=(
            ("target_length", 0.1, (("target", 3), ("tolerance", 7))),
            ("one_sentence", 0.2, ()),
            ("positive_words", 0.7, (("per_word", 0.3),)),
        )
    )
    rollout = _rollout(("A great day.", "good good good good", "Sad. Very sad."))
    parts = rs.reward_parts(rollout, spec)
    assert parts.noise.tolist() == [0.0, 0.0, 0.0]
    score = rewards.score_rollout(rollout, spec)
    assert (parts.totals + parts.noise).tolist() == pytest.approx(score.tolist(), abs=1e-15)
    # "A great day.": 3 words -> 1 x 0.1; one sentence -> 0.2; one positive word 0.3 x 0.7
    assert parts.parts[0].tolist() == pytest.approx([0.1, 0.2, 0.21])
