"""Each built-in gate's answer, computed by the pipeline, against numbers computed by hand."""

from __future__ import annotations

import math
import statistics

import pytest

from roll_viz.analysis.lesson_answers import (
    compute_gate,
    compute_lesson,
    compute_step,
    inline_batch,
)
from roll_viz.data.lessons import LessonError, builtin_lessons, parse_lesson


@pytest.fixture(scope="module")
def seed():
    lesson = builtin_lessons()["seed_chain"]
    return lesson, {r.gate.id: r for r in compute_lesson(lesson)}


def grpo(rewards: list[float], ddof: int = 1, eps: float = 1e-6) -> list[float]:
    """ROLL's GRPO advantage by hand: (r - mean) / (std + eps), unbiased std."""
    mean = sum(rewards) / len(rewards)
    std = (statistics.stdev if ddof == 1 else statistics.pstdev)(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def test_every_step_computes(seed):
    lesson, results = seed
    assert list(results) == [g.id for g in lesson.steps]
    for result in results.values():
        assert math.isfinite(result.value)
        if result.gate.kind != "number":
            assert result.correct is not None


def test_push_down_8_2_6_5_9_1(seed):
    _, results = seed
    hand = grpo([8.2, 6.5, 9.1])
    assert hand[1] == pytest.approx(-1.0856, abs=1e-4)
    r = results["push_down"]
    assert r.value == 1.0  # answer 2 (index 1) is the only one pushed down
    assert r.gate.choices[r.correct].label == "Answer 2 (6.5)"
    assert r.env["advantage"] == pytest.approx(hand, abs=1e-9)
    how_much = results["how_much"]
    assert how_much.value == pytest.approx(hand[1], abs=1e-9)
    assert how_much.is_right(-1.1)
    assert not how_much.is_right(-1.43)
    assert "6.500 - 7.933" in how_much.formula


def test_shift_knob_changes_nothing(seed):
    _, results = seed
    knob = results["how_much.knob"]
    assert abs(knob.value) < 1e-9
    assert knob.gate.choices[knob.correct].label == "It stays the same"


def test_seven_of_eight(seed):
    _, results = seed
    hand = grpo([1, 1, 1, 1, 1, 1, 1, 0])
    assert hand[7] == pytest.approx(-2.4749, abs=1e-4)
    r = results["seven_of_eight"]
    assert r.value == pytest.approx(hand[7], abs=1e-9)
    assert r.gate.choices[r.correct].value == -2.5  # nearest of -1 / -2.5 / -7
    knob = results["seven_of_eight.knob"]
    assert knob.value == pytest.approx(-hand[7], abs=1e-9)


def test_group_of_two_is_always_0_707(seed):
    _, results = seed
    r = results["g_two"]
    for pair in ([8.2, 6.5], [3.0, 3.1]):
        assert max(abs(a) for a in grpo(pair)) == pytest.approx(r.value, abs=1e-4)
    assert r.value == pytest.approx(1 / math.sqrt(2), abs=1e-4)


def test_beta_knob_lowers_answer_3(seed):
    _, results = seed
    base, knob = results["beta_kl"], results["beta_kl.knob"]
    assert base.env["beta"] == 0.0
    assert knob.env["beta"] == pytest.approx(0.1)
    # with the KL in the reward and gamma 1, the first token's advantage loses beta * sum(KL)
    kl_sum = sum(knob.env["kl"][2])
    drop = knob.env["advantage"][2] - base.env["advantage"][2]
    assert drop == pytest.approx(-0.1 * kl_sum, rel=1e-6)
    assert knob.gate.choices[knob.correct].label == "It goes down"


def test_local_global_amplification(seed):
    _, results = seed
    r = results["local_global"]
    all_rewards = [8.2, 6.5, 9.1, 5.0, 5.1, 4.9]
    batch_std = statistics.stdev(all_rewards)
    assert r.env["local_scale"][1] == pytest.approx((batch_std + 1e-6) / (0.1 + 1e-6), rel=1e-6)
    assert r.value == 1.0
    knob = results["local_global.knob"]
    assert knob.value == pytest.approx(0.001 / (0.001 + 1e-6), rel=1e-6)


def test_loss_zero_but_gradient_not(seed):
    _, results = seed
    r = results["loss_zero"]
    assert abs(r.env["loss"]) < 1e-12
    assert r.env["grad_tokens"] > 0
    assert r.value == 1.0
    assert abs(results["loss_zero.knob"].env["loss"]) > 1e-3


def test_reward_hacking_recorded_runs(seed):
    _, results = seed
    hack, held = results["hacking"], results["hacking.knob"]
    assert hack.value == 3.0  # KL and reward both climb without a penalty
    assert hack.env["run_kl"][-1] > 1.0
    assert hack.env["run_reward"][-1] > 5.0
    assert held.value == 0.0
    assert len(hack.env["run_kl"]) == 30


def test_compute_step_matches_compute_lesson(seed):
    lesson, results = seed
    i = lesson.step_index("how_much.knob")
    assert compute_step(lesson, i).value == results["how_much.knob"].value


def test_inline_batch_lengths():
    gb = inline_batch([[1.0, 2.0], [3.0]], [[2, 3], [1]])
    assert gb.batch.response_mask.sum(dim=1).tolist() == [2, 3, 1]
    assert gb.batch.group_ids.tolist() == [0, 0, 1]


def test_errors_name_the_gate_and_field():
    text = """title = "t"
[[gates]]
id = "far"
stage = "advantage"
batch = "inline"
rewards = [[1.0, 2.0]]
settings = { estimator = "grpo" }
question = "q"
kind = "choice"
choices = ["a", "b"]
answer = "advantage[9]"
"""
    gate = parse_lesson(text, "t").gates[0]
    with pytest.raises(LessonError, match="gate 'far', field 'answer': index 9"):
        compute_gate(gate)
    gate = parse_lesson(text.replace("advantage[9]", "run_kl[0]"), "t").gates[0]
    with pytest.raises(LessonError, match="not available"):
        compute_gate(gate)
    live = parse_lesson(
        text.replace('batch = "inline"\nrewards = [[1.0, 2.0]]', 'batch = "live"'), "t"
    ).gates[0]
    with pytest.raises(LessonError, match="field 'batch'"):
        compute_gate(live)
