"""The reward stage's tables and sentences: the options table, the hack verdict."""

from __future__ import annotations

import torch

from roll_viz.analysis import verifier_noise as vn
from roll_viz.analysis.reward_stage import HackStep
from roll_viz.views import reward_stage_charts as charts


def _step(step: int, student: tuple[float, ...], recorded: tuple[float, ...]) -> HackStep:
    return HackStep(step, ("a",) * len(student), recorded, student, 1.0, "a", 1.0)


def test_options_table_lists_only_real_options_besides_keeping():
    table = charts.options_table()
    assert list(table.columns) == ["framework", "policy", "option"]
    assert "keep the score" not in set(table["policy"])
    assert len(table) == 6  # roll mask; verl soft; openrlhf zero, soft; trl soft, mask
    assert set(zip(table["framework"], table["policy"], strict=True)) == {
        ("roll", "masked from the loss"),
        ("verl", "soft overlong penalty"),
        ("openrlhf", "zero reward"),
        ("openrlhf", "soft overlong penalty"),
        ("trl", "soft overlong penalty"),
        ("trl", "masked from the loss"),
    }


def test_hack_verdict_says_which_way_the_students_reward_went():
    rising = charts.hack_verdict(
        [_step(0, (0.0, 1.0), (0.0, 0.0)), _step(29, (1.0, 1.0), (7.0, 8.0))]
    )
    assert "went from 0.5 at step 0 to 1 at step 29 (the run's own: 0 to 7.5)" in rising
    assert "It rose" in rising
    falling = charts.hack_verdict(
        [_step(0, (1.0, 0.0), (0.0, 0.0)), _step(29, (0.0, 0.0), (7.0, 8.0))]
    )
    assert "did not rise" in falling
    flat = charts.hack_verdict(
        [_step(0, (0.0, 0.0), (0.0, 0.0)), _step(29, (0.0, 0.0), (7.0, 8.0))]
    )
    assert "the same score" in flat


def test_noise_groups_by_hand():
    labels, groups = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1])
    draw = vn.noise_draw(labels, groups, 0.0, 0.0, seed=0)
    expected = vn.expected_noise(labels, groups, 0.0, 0.0)
    table = charts.noise_groups(groups.tolist(), draw, expected)
    assert table["G"].tolist() == [2, 2]
    assert table["true passes k"].tolist() == [1, 0]
    assert table["tied (true)"].tolist() == [False, True]
    assert table["P(tied after)"].tolist() == [0.0, 1.0]  # no noise: ties stay, live groups too
    assert table["tied (this draw)"].tolist() == [False, True]
