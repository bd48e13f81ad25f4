"""Live RL training on the tiny model: learning, determinism, the adaptive beta, the runner."""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest
import torch

from roll_viz.cli.train import main as cli_main
from roll_viz.core.pipeline.kl import next_beta
from roll_viz.lm.models import load_models
from roll_viz.lm.reaper import REAPER
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, StepRecord, TrainRun, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer, TrainRunner
from roll_viz.rewards import letter_share

PROMPTS = ("hello", "tell me")


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


def settings(**kw) -> TrainSettings:
    base = dict(
        prompts=PROMPTS,
        group_size=8,
        max_new_tokens=16,
        steps=20,
        reward=RewardChoice.single("letter_share"),
        model="tiny",
        lr=1e-2,
        seed=3,
    )
    base.update(kw)
    return TrainSettings.flat(**base)


def curves(records: list[StepRecord]) -> list[dict]:
    """Metrics without wall-clock numbers (those differ between runs)."""
    out = []
    for r in records:
        m = {k: v for k, v in r.metrics.items() if k != "seconds"}
        m["update"] = {k: v for k, v in m["update"].items() if not k.startswith("seconds")}
        out.append(m)
    return out


def train(bundle, s: TrainSettings, steps: int | None = None) -> list[StepRecord]:
    trainer = Trainer(bundle, s)
    try:
        return [trainer.run_step() for _ in range(steps or s.steps)]
    finally:
        trainer.close()


def base_state(bundle) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in bundle.model.state_dict().items()}


def test_letter_share_reward():
    assert letter_share("", "") == 0.0
    assert letter_share("", "ab1 ") == 0.5
    assert RewardChoice.single("letter_share").score(["p"], ["abcd"]).tolist() == [1.0]


def test_trivial_reward_rises_and_same_seed_same_curves(bundle):
    s = settings()
    first = train(bundle, s)
    rewards = [r.metrics["reward_mean"] for r in first]
    early, late = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert late > early + 0.05, rewards
    # B = 0 at init: the policy is the reference (up to float rounding of two scoring passes)
    assert abs(first[0].metrics["kl_exact"]) < 1e-6
    assert first[-1].metrics["kl_exact"] > 0.05  # and it moved away while learning
    again = train(bundle, s, steps=8)
    assert curves(again) == curves(first[:8])
    other = train(bundle, settings(seed=4), steps=3)
    assert curves(other) != curves(first[:3])


@pytest.mark.parametrize(("target", "direction"), [(1e-6, 1), (50.0, -1)])
def test_adaptive_beta_follows_the_controller(bundle, target, direction):
    horizon = 20.0
    s = settings(
        steps=4,
        beta_mode="adaptive",
        beta=0.1,
        target_kl=target,
        horizon=horizon,
        config={"adv_estimator": "grpo", "kl_penalty": "mse"},  # k2 >= 0
    )
    records = train(bundle, s)
    batch = len(PROMPTS) * s.sampling.group_size
    for prev, cur in itertools.pairwise(records):
        assert cur.metrics["beta"] == pytest.approx(prev.metrics["next_beta"], rel=1e-5)
    for r in records[1:]:
        m = r.metrics
        assert m["kl_est"] > 0
        expected = next_beta(m["beta"], m["kl_est"], target, horizon, batch)
        assert m["next_beta"] == pytest.approx(expected, rel=1e-5)
        assert math.copysign(1, m["next_beta"] - m["beta"]) == direction
    # the KL above target moves beta by the capped +20 % error: 1 + 0.2 * 16 / 20
    if direction == 1:
        assert records[-1].metrics["next_beta"] / records[-1].metrics["beta"] == pytest.approx(
            1 + 0.2 * batch / horizon, rel=1e-5
        )


def test_fixed_beta_stays(bundle):
    records = train(bundle, settings(steps=2, beta=0.05), steps=2)
    assert [r.metrics["beta"] for r in records] == [0.05, 0.05]
    assert [r.metrics["next_beta"] for r in records] == [0.05, 0.05]


def test_pause_resume_continues_where_it_was(bundle):
    s = settings(steps=6)
    solo = train(bundle, s)
    runner = TrainRunner(bundle, s)
    try:
        runner.start()
        assert runner.wait_steps(2, timeout=60)
        runner.pause()
        assert runner.wait_paused(timeout=60)  # the step in progress finishes, then nothing moves
        frozen = runner.steps_done
        time.sleep(0.5)
        assert runner.steps_done == frozen
        assert runner.status == "paused"
        assert frozen < 6
        runner.resume()
        runner.join(timeout=120)
        assert runner.status == "done"
        assert runner.steps_done == 6
        assert curves(runner.records()) == curves(solo)
        run = runner.run()
        assert [r.step for r in run.steps] == list(range(6))
        assert run.steps[0].samples is not None
        assert run.steps[-1].samples is not None
    finally:
        runner.close()


def test_two_users_independent_and_base_unchanged(bundle):
    assert REAPER.wait_idle(timeout=60)  # adapters earlier tests closed are gone first
    before = base_state(bundle)
    reference = sample(bundle, SamplingConfig(prompts=PROMPTS, group_size=2, max_new_tokens=8))
    sa, sb = settings(steps=4, seed=1), settings(steps=4, seed=2, lr=5e-3)
    solo_a, solo_b = train(bundle, sa), train(bundle, sb)
    a, b = TrainRunner(bundle, sa), TrainRunner(bundle, sb)
    try:
        a.start()
        b.start()
        a.join(timeout=120)
        b.join(timeout=120)
        assert a.status == b.status == "done"
        assert curves(a.records()) == curves(solo_a)
        assert curves(b.records()) == curves(solo_b)
        # while both adapters exist, the plain model still samples exactly as before
        again = sample(bundle, SamplingConfig(prompts=PROMPTS, group_size=2, max_new_tokens=8))
        assert again.responses == reference.responses
        assert torch.equal(again.logprobs, reference.logprobs)
    finally:
        a.close()
        b.close()
    assert REAPER.wait_idle(timeout=60)  # close() frees the adapters on the reaper thread
    after = base_state(bundle)
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)


class _FailsAtTwo(Trainer):
    def run_step(self, keep_samples: bool = True) -> StepRecord:
        if self.step == 2:
            raise RuntimeError("reward server went away")
        return super().run_step(keep_samples)


def test_error_stops_with_message_and_keeps_steps(bundle):
    runner = TrainRunner(bundle, settings(steps=5), trainer_factory=_FailsAtTwo)
    try:
        runner.start()
        runner.join(timeout=60)
        assert runner.status == "error"
        assert "reward server went away" in runner.error
        assert runner.steps_done == 2
        runner.start()  # an errored run does not restart by itself
        assert runner.status == "error"
        runner.reset()
        assert runner.status == "idle"
        assert runner.steps_done == 0
    finally:
        runner.close()


def test_stop_then_start_continues(bundle):
    s = settings(steps=4)
    runner = TrainRunner(bundle, s)
    try:
        runner.start()
        assert runner.wait_steps(1, timeout=60)
        runner.stop()
        runner.join(timeout=60)
        assert runner.status == "stopped"
        done = runner.steps_done
        runner.start()
        runner.join(timeout=60)
        assert runner.status == "done"
        assert runner.steps_done == 4
        assert done <= 4
        assert curves(runner.records()) == curves(train(bundle, s))
    finally:
        runner.close()


def test_jsonl_round_trip_and_cli(bundle, tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    code = cli_main(
        [
            "--prompt", "hello", "--prompt", "tell me", "--steps", "3", "--group-size", "4",
            "--max-new-tokens", "8", "--model", "tiny", "--reward", "letter_share",
            "--framework", "verl", "--adv-estimator", "grpo", "--beta", "0.01",
            "--beta-mode", "adaptive", "--sample-every", "2", "--out", str(out), "--lr", "1e-2",
        ]
    )  # fmt: skip
    assert code == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "step", "step", "step", "end"]
    assert [("samples" in x) for x in lines[1:4]] == [True, False, True]
    run = TrainRun.from_jsonl(out.read_text())
    assert run.settings.framework == "verl"
    assert run.settings.beta_mode == "adaptive"
    assert run.settings.estimator == "grpo"
    assert len(run.steps) == 3
    assert run.series("beta")[1] == pytest.approx(run.series("next_beta")[0])
    # the settings reproduce the run: the same seed gives the same curves in-process
    assert curves(train(bundle, run.settings)) == curves(list(run.steps))
    again = TrainRun.from_jsonl(run.to_jsonl())
    assert again == run
    rollout = run.steps[0].samples.to_rollout()
    assert rollout.response_mask.shape[0] == 8
    assert rollout.responses == run.steps[0].samples.responses


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="TRL has no adaptive"):
        settings(framework="trl", config={}, beta_mode="adaptive")
    with pytest.raises(ValueError, match="unknown roll config key"):
        settings(config={"nope": 1})
    with pytest.raises(ValueError, match="unknown reward"):
        RewardChoice.single("nope")
    s = settings(framework="openrlhf", config={"advantage_estimator": "group_norm"})
    assert TrainSettings.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_pods_trains_on_the_max_variance_subset(bundle):
    # sample n = 6 per prompt, train on m = 3: the update sees P x 3 rows, those with the largest
    # reward variance (the k best plus the 3 - k worst), never less spread than all six.
    from roll_viz.core.pods import max_variance_subset

    s = settings(group_size=6, pods_m=3, steps=1)
    trainer = Trainer(bundle, s)
    try:
        record = trainer.run_step()
    finally:
        trainer.close()
    assert record.samples is not None
    kept = len(record.samples.responses)
    assert kept == 3 * len(s.sampling.prompts)
    assert record.metrics["pods_std_kept"] >= record.metrics["pods_std_all"] - 1e-12
    brute = max_variance_subset(torch.tensor([[1.0, 1, 1, 0, 0, 1, 1, 1]]), 4)
    assert sorted(torch.tensor([1.0, 1, 1, 0, 0, 1, 1, 1])[brute[0]].tolist()) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="pods_m"):
        settings(group_size=4, pods_m=4)
