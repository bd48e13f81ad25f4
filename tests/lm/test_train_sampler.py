"""Training with a behaviour policy mu that is not the trainer, on the tiny model.

The tokens come from the chosen sampler (bf16 / int8 lean decode over the merged adapter, top-p
draws), mu is that sampler's log-probs, and the loss's correction sees it; fp32 is the trainer
itself (delta = 0 exactly). Also the zero-variance filter of the 2026 recipe.
"""

from __future__ import annotations

import pytest
import torch

from roll_viz.lm import behaviour_sampler, train_batch
from roll_viz.lm.behaviour import behaviour_logprobs
from roll_viz.lm.decode import DecodeOptions
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer

PROMPTS = ("hello", "tell me")
NOISY = RewardChoice(noise_sigma=1.0)  # every group has spread: the update always has signal


def settings(**kw) -> TrainSettings:
    base = dict(
        prompts=PROMPTS, group_size=3, max_new_tokens=8, steps=2, reward=NOISY, model="tiny",
        lr=1e-2, seed=5, framework="openrlhf", config={},
    )  # fmt: skip
    base.update(kw)
    return TrainSettings.flat(**base)


def run(tiny, s: TrainSettings, steps: int = 2) -> list:
    trainer = Trainer(tiny, s)
    try:
        return [trainer.run_step() for _ in range(steps)]
    finally:
        trainer.close()


def test_fp32_sampler_is_the_trainer_delta_exactly_zero(tiny):
    records = run(tiny, settings(loss_option="is_correction_level: token"))
    for r in records:
        m = r.metrics
        assert m["sampler"] == "fp32"
        assert m["delta_abs_mean"] == 0.0
        assert m["delta_mean"] == 0.0
        assert m["is_ess"] == 1.0
        assert m["correction_frac"] == 0.0


@pytest.mark.parametrize("sampler", ["bf16", "int8", "top_p"])
def test_low_precision_and_processed_samplers_give_a_gap(tiny, sampler):
    records = run(tiny, settings(sampler=sampler, loss_option="is_correction_level: token"))
    for r in records:
        m = r.metrics
        assert m["sampler"] == sampler
        assert m["delta_abs_mean"] > 1e-4, m
        assert 0.0 < m["is_ess"] <= 1.0
        assert m["correction"].startswith("is_correction")
    if sampler == "top_p":  # processed log-probs: delta = log S <= 0 on every token
        assert all(r.metrics["delta_mean"] == -r.metrics["delta_abs_mean"] for r in records)


def test_int8_draw_is_the_int8_decoder_with_the_adapter_merged(tiny):
    """At step 0 the adapter is zero: the merged copy's int8 draw and mu equal the base's."""
    cfg = SamplingConfig(
        prompts=PROMPTS, group_size=3, max_new_tokens=8, seed=11, greedy=False, topk=1,
        feature_dim=1,
    )  # fmt: skip
    policy = LoraPolicy(tiny, seed=0)
    try:
        drawn = behaviour_sampler.draw(policy, cfg, "int8")
        base = sample(tiny, cfg, decode=DecodeOptions(weights="int8"))
        assert torch.equal(drawn.rollout.token_ids, base.token_ids)
        mask = drawn.rollout.response_mask > 0
        with tiny.lock, torch.inference_mode():
            beh = behaviour_logprobs(
                tiny,
                [tiny.chat_ids(PROMPTS[g]) for g in base.group_ids],
                base.token_ids,
                mask,
                source="int8",
            )
        assert torch.allclose(drawn.mu.double()[mask], beh.mu[mask], atol=1e-5)
        # pi_old is the trainer's float scoring of those tokens (the base's float scores here)
        assert torch.allclose(drawn.rollout.logprobs, base.logprobs, atol=1e-5)
        assert torch.allclose(drawn.rollout.ref_logprobs, base.ref_logprobs, atol=1e-5)
    finally:
        policy.close()


def test_merged_copy_follows_a_trained_adapter(tiny):
    """With a non-zero adapter the merged copy's float logits are the peft policy's."""
    policy = LoraPolicy(tiny, seed=0)
    try:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
        ids = torch.tensor([[1, 2, 3, 4]])
        with tiny.lock:
            with policy.activate(tiny), torch.inference_mode():
                want = tiny.model(input_ids=ids).logits
                merged = behaviour_sampler.merged_bundle(policy)
            base = tiny.model(input_ids=ids).logits
        got = merged.model(input_ids=ids).logits
        assert torch.allclose(got, want, atol=1e-4)
        assert not torch.allclose(base, want, atol=1e-4)  # the adapter does move the logits
    finally:
        policy.close()


def test_the_correction_changes_the_gradient(tiny):
    """int8 sampler: OpenRLHF is_correction reweights the loss (a different step); fp32: none."""
    kw = dict(steps=1)
    plain = run(tiny, settings(sampler="int8", **kw), steps=1)[0].metrics
    corrected = run(
        tiny, settings(sampler="int8", loss_option="is_correction_level: token", **kw), steps=1
    )[0].metrics
    assert plain["delta_abs_mean"] == corrected["delta_abs_mean"]  # the same draws
    assert plain["correction_frac"] is None
    assert abs(plain["grad_norm"] - corrected["grad_norm"]) > 1e-6 * plain["grad_norm"]
    fp_plain = run(tiny, settings(**kw), steps=1)[0].metrics
    fp_corr = run(tiny, settings(loss_option="is_correction_level: token", **kw), steps=1)[0]
    assert fp_plain["grad_norm"] == fp_corr.metrics["grad_norm"]  # w = 1: nothing to correct


def test_trl_cap_counts_what_it_truncates(tiny):
    s = settings(
        framework="trl", sampler="int8",
        loss_option="vllm_importance_sampling_mode: token_truncate",
    )  # fmt: skip
    m = run(tiny, s, steps=1)[0].metrics
    assert m["correction"] == "vllm_importance_sampling_mode token_truncate"
    assert 0.0 <= m["correction_frac"] <= 1.0


def test_zero_variance_filter_drops_flat_groups(tiny):
    zero = RewardChoice(terms=(("target_length", 0.0, ()),))  # every reward 0: all groups flat
    records = run(tiny, settings(reward=zero, beta=0.1, filter_zero_variance=True), steps=1)
    m = records[0].metrics
    assert m["filtered_share"] == 1.0
    assert m["loss"] is None
    assert m["update"] == {}
    assert records[0].samples is not None  # the samples are still in the record
    # the KL estimate still covers every sample: the same as without the filter
    unfiltered = run(tiny, settings(reward=zero, beta=0.1), steps=1)[0].metrics
    assert m["kl_est"] == unfiltered["kl_est"]
    assert m["kl_exact"] == unfiltered["kl_exact"]
    noisy = run(tiny, settings(filter_zero_variance=True), steps=1)[0].metrics
    assert noisy["filtered_share"] == 0.0
    assert noisy["loss"] is not None


def test_drop_groups_renumbers_the_kept_groups(tiny):
    cfg = SamplingConfig(prompts=("a", "b", "c"), group_size=2, max_new_tokens=3, seed=1,
                         greedy=False, topk=1, feature_dim=1)  # fmt: skip
    rollout = sample(tiny, cfg)
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    flat = train_batch.zero_variance_rows(scores, rollout.group_ids)
    assert flat.tolist() == [True, True, False, False, True, True]
    sub, kept_scores, rows = train_batch.drop_groups(rollout, scores, ~flat)
    assert sub.prompts == ("b",)
    assert sub.group_ids.tolist() == [0, 0]
    assert rows.tolist() == [2, 3]
    assert kept_scores.tolist() == [0.0, 1.0]
    assert sub.responses == rollout.responses[2:4]


def test_verl_bypass_mode_takes_mu_as_pi_old(tiny):
    """verl bypass_mode: old = mu, so actor/ppo_kl = mean(mu - log pi) is 0 only if mu = pi_old."""
    option = "loss_mode: bypass_mode (ppo_clip)"
    fp = run(tiny, settings(framework="verl", loss_option=option), steps=1)[0].metrics
    assert fp["update"]["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-7)
    int8 = run(tiny, settings(framework="verl", sampler="int8", loss_option=option), steps=1)
    m = int8[0].metrics
    assert m["delta_abs_mean"] > 0
    assert abs(m["update"]["actor/ppo_kl"]) > 1e-4  # the loss's old log-prob is the int8 mu
    assert m["correction"] == "bypass_mode (ppo_clip)"
    assert m["correction_frac"] == 0.0  # ppo_clip preset: no IS weights, no rejection


def test_verl_bypass_reinforce_truncates_sequence_weights_above_the_threshold(tiny):
    option = "loss_mode: bypass_mode (reinforce, sequence IS 2.0)"
    s = settings(framework="verl", sampler="int8", loss_option=option)
    m = run(tiny, s, steps=1)[0].metrics
    assert m["correction"] == "bypass_mode (reinforce)"
    assert 0.0 <= m["correction_frac"] <= 1.0
