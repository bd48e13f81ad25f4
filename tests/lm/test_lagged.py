"""Async training k steps behind on the tiny model: the lagged sampler and the three columns.

mu (the sampler's log-probs), pi_old (the trainer at the sampler's weights) and pi_theta (the
trainer now) per token; k = 0 gives mu = pi_old exactly, k = 1 a non-zero drift pi_theta / pi_old;
pi_old := pi_theta gives ratio exactly 1 and clip fraction 0.
"""

from __future__ import annotations

import pytest
import torch

from roll_viz.analysis import staleness
from roll_viz.lm.lagged import LaggedSampler, trainer_ahead
from roll_viz.lm.lora import LoraPolicy, adapter_names
from roll_viz.lm.reaper import REAPER, Cancelled
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import OLD_POLICIES, RewardChoice, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer

PROMPTS = ("hello", "tell me")
NOISY = RewardChoice(noise_sigma=1.0)  # every group has spread: the update always has signal


def settings(**kw) -> TrainSettings:
    base = dict(
        prompts=PROMPTS, group_size=3, max_new_tokens=8, steps=4, reward=NOISY, model="tiny",
        lr=1e-2, seed=5, framework="verl", config={},
    )  # fmt: skip
    base.update(kw)
    return TrainSettings.flat(**base)


def run(tiny, s: TrainSettings, steps: int):
    """(records, the three columns of every step) of ``steps`` steps."""
    trainer = Trainer(tiny, s)
    try:
        records, cols = [], []
        for _ in range(steps):
            records.append(trainer.run_step())
            cols.append(trainer.lagged.columns)
        return records, cols
    finally:
        trainer.close()


def test_k0_mu_is_pi_old_exactly_and_pi_theta_is_them_up_to_rounding(tiny):
    records, cols = run(tiny, settings(), 2)
    for c in cols:
        assert c.lag == 0
        assert torch.equal(c.mu, c.old)  # the same weights, the trainer's own float path
        assert float((c.theta - c.old).abs().max()) < 1e-4  # nothing moved since the draw
    assert "staleness" not in records[0].metrics  # a synchronous run's file is as before


def test_k1_samples_with_the_previous_adapter(tiny):
    records, cols = run(tiny, settings(staleness=1), 3)
    assert [c.lag for c in cols] == [0, 1, 1]
    assert [r.metrics["staleness"] for r in records] == [0, 1, 1]
    for c in cols:
        assert torch.equal(c.mu, c.old)  # fp32 sampler: mu = pi_old at every lag
    # step 1 samples with the adapter of step 0, which is the base model (B = 0 at the start):
    # pi_old is the reference up to rounding, while pi_theta has taken one update since
    first = cols[1]
    drift = (first.theta - first.old)[first.mask]
    assert float(drift.abs().max()) > 1e-3
    assert records[1].metrics["drift_abs_mean"] > 1e-4
    assert records[1].metrics["mu_gap_abs_mean"] == 0.0


def test_k1_pi_old_is_the_adapter_one_step_back(tiny):
    """At step 1 with k = 1 the sampler is step 0's adapter: the base (B starts at 0)."""
    trainer = Trainer(tiny, settings(staleness=1))
    try:
        trainer.run_step()
        policy, lag = trainer.lagged.sampler(1)
        assert lag == 1
        assert policy is not trainer.policy
        for p in policy.parameters()[1::2]:  # the B matrices of step 0
            assert not bool(p.any())
        moved = [p for p in trainer.policy.parameters()[1::2] if bool(p.any())]
        assert moved  # the trained adapter has left the base
    finally:
        trainer.close()


def test_k2_lag_and_bounded_copies(tiny):
    trainer = Trainer(tiny, settings(staleness=2))
    try:
        lags = []
        for _ in range(4):
            trainer.run_step()
            lags.append(trainer.lagged.columns.lag)
            assert trainer.lagged.copies() <= 2
        assert lags == [0, 1, 2, 2]
        name = trainer.lagged._shadow.name
        assert name in adapter_names(tiny)
    finally:
        trainer.close()
    assert name not in adapter_names(tiny)  # the sampler adapter leaves the shared model


def test_release_frees_the_sampler_adapter_too(tiny):
    trainer = Trainer(tiny, settings(staleness=1))
    trainer.run_step()
    name = trainer.lagged._shadow.name
    trainer.release()  # what a closing session calls: returns at once
    assert REAPER.wait_idle(timeout=60)
    assert name not in adapter_names(tiny)
    assert trainer.policy.name not in adapter_names(tiny)
    with pytest.raises(Cancelled):
        trainer.run_step()


def test_pi_old_as_pi_theta_gives_ratio_one_and_no_clipping(tiny):
    s = settings(staleness=1, old_policy="current", ppo_epochs=2, minibatches=2, clip_eps=0.01)
    records, cols = run(tiny, s, 2)
    for r, c in zip(records, cols, strict=True):
        assert torch.equal(c.loss_ratio[c.mask], torch.ones(int(c.mask.sum())))
        assert c.clip_frac == 0.0
        assert r.metrics["clip_frac"] == 0.0
        assert r.metrics["anchor_ratio_mean"] == 1.0
    # the drift the loss ignores: the update's own ratio pi_theta / pi_old is not 1 at step 1
    assert records[1].metrics["update"]["ratio_max"] > 1.0
    # the same run anchored on the recomputed pi_old: the tiny clip range bites
    honest = run(tiny, settings(staleness=1, ppo_epochs=2, minibatches=2, clip_eps=0.01), 2)[0]
    assert honest[1].metrics["clip_frac"] > 0.0


def test_pi_old_as_mu_anchors_the_ratio_on_the_sampler(tiny):
    records, cols = run(tiny, settings(staleness=1, sampler="bf16", old_policy="mu"), 2)
    c = cols[1]
    assert records[1].metrics["mu_gap_abs_mean"] > 1e-5  # the bf16 sampler is not the trainer
    expected = torch.exp(c.theta - c.mu)[c.mask]
    assert torch.allclose(c.loss_ratio[c.mask], expected, atol=1e-5)


def test_lagged_sampler_keeps_the_right_weights(tiny):
    policy = LoraPolicy(tiny, seed=1)
    lagged = LaggedSampler(policy, 2)
    try:
        seen = []
        for step in range(4):
            sampler, lag = lagged.sampler(step)
            seen.append((lag, float(sampler.parameters()[1].detach().flatten()[0])))
            lagged.keep(step)
            with torch.no_grad():  # "the update": B of the first layer holds the step count
                policy.parameters()[1].fill_(step + 1.0)
            assert lagged.copies() <= 2
        # step s samples with the weights at the start of step max(s - 2, 0), B = that step
        assert seen == [(0, 0.0), (1, 0.0), (2, 0.0), (2, 1.0)]
    finally:
        lagged.close()
        policy.close()


def test_one_list_of_anchors():
    assert staleness.ANCHORS == OLD_POLICIES


def test_lag_out_of_bounds_is_refused(tiny):
    with pytest.raises(ValueError, match="staleness"):
        settings(staleness=3)
    with pytest.raises(ValueError, match="old_policy"):
        settings(old_policy="stale")


def test_trainer_ahead_moves_from_the_base_that_drew_the_batch(tiny):
    cfg = SamplingConfig(prompts=PROMPTS, group_size=3, max_new_tokens=8, seed=2, greedy=False)
    batch = sample(tiny, cfg)
    gen = torch.Generator().manual_seed(0)
    adv = torch.randn(batch.logprobs.shape, generator=gen) * batch.response_mask
    before = set(adapter_names(tiny))
    mask = batch.response_mask > 0
    at0 = trainer_ahead(tiny, batch, adv, 0)
    assert float((at0 - batch.logprobs)[mask].abs().max()) < 1e-4  # the base: pi_old itself
    at1 = trainer_ahead(tiny, batch, adv, 1)
    assert float((at1 - batch.logprobs)[mask].abs().max()) > 1e-4  # one update later
    assert torch.equal(trainer_ahead(tiny, batch, adv, 1), at1)  # seeded: the same step
    assert set(adapter_names(tiny)) == before  # the scratch adapters are gone
    with pytest.raises(ValueError, match="steps"):
        trainer_ahead(tiny, batch, adv, 3)
