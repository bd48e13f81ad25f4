"""The adaptive entropy target in live training (tiny model): the controller's curve per step."""

from __future__ import annotations

import pytest

from roll_viz.core.pipeline.entropy_control import EntropyTarget
from roll_viz.lm.models import load_models
from roll_viz.lm.runfile import RewardChoice, TrainRun, TrainSettings
from roll_viz.lm.train import Trainer


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


def _settings(framework="roll", **kw) -> TrainSettings:
    base = dict(
        prompts=("hello", "tell me"),
        group_size=4,
        max_new_tokens=8,
        steps=3,
        reward=RewardChoice.single("letter_share"),
        model="tiny",
        lr=1e-2,
        seed=3,
        framework=framework,
        config={},
    )
    return TrainSettings.flat(**(base | kw))


def _run(bundle, s, steps=3):
    trainer = Trainer(bundle, s)
    try:
        return [trainer.run_step() for _ in range(steps)]
    finally:
        trainer.close()


@pytest.mark.parametrize("framework", ["roll", "trl"])
def test_the_coefficient_follows_the_rule_on_the_real_entropy(bundle, framework):
    # the tiny model's entropy is about log(vocab): above a 0.5 target every step, so the
    # coefficient steps down from 0.02 and the bonus is never applied
    s = _settings(framework, entropy_target=0.5, entropy_coef=0.02, entropy_delta=0.005)
    records = _run(bundle, s)
    state = EntropyTarget(target=0.5, coef=0.02, delta=0.005)
    for r in records:
        m = r.metrics
        assert m["entropy"] > 0.5
        assert m["ent_coef_applied"] == state.applied() == 0.0
        state = state.after(m["entropy"])
        assert m["ent_coef_next"] == pytest.approx(state.coef, abs=1e-4)  # metrics keep 4 places
        assert m["ent_target"] == 0.5
        assert "term_entropy" not in m["update"]  # coefficient 0: no entropy term built
    assert [r.metrics["ent_coef_next"] for r in records] == pytest.approx([0.015, 0.01, 0.005])


def test_above_the_target_the_bonus_applies_from_the_second_step(bundle):
    s = _settings(entropy_target=50.0, entropy_coef=0.01, entropy_delta=0.01)
    records = _run(bundle, s)
    applied = [r.metrics["ent_coef_applied"] for r in records]
    assert applied == pytest.approx([0.0, 0.02, 0.03])  # +inf first, then c after each step
    assert [r.metrics["ent_coef_next"] for r in records] == pytest.approx([0.02, 0.03, 0.04])
    # the loss carries the entropy term once the bonus applies (not at the first step)
    assert "term_entropy" not in records[0].metrics["update"]
    assert records[1].metrics["update"]["term_entropy"] == pytest.approx(
        records[1].metrics["entropy"], rel=1e-3
    )


def test_off_by_default_and_round_trips(bundle):
    plain = _settings()
    assert plain.entropy_controller() is None
    records = _run(bundle, plain, steps=1)
    assert "ent_coef_next" not in records[0].metrics
    s = _settings(entropy_target=0.3, entropy_coef=0.1, entropy_delta=0.02)
    again = TrainSettings.from_json(s.to_json())
    assert again == s
    assert "entropy target 0.3" in s.describe()
    run = TrainRun(settings=s, steps=[])
    assert TrainRun.from_jsonl(run.to_jsonl()).settings == s


def test_bad_entropy_settings_are_named():
    with pytest.raises(ValueError, match="delta"):
        _settings(entropy_target=0.3, entropy_delta=0.0)
    with pytest.raises(ValueError, match="target"):
        _settings(entropy_target=-1.0)
