"""One real update step through a per-user LoRA adapter, on the tiny model (roll_viz.lm.update).

Each test uses its own tiny bundle (module fixture) and closes every adapter it makes, so the
session-wide ``tiny`` fixture of the other model tests never sees an injected layer.
"""

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.lm import lora, update
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample

PROMPTS = ("Hello there", "What is 2 + 3?")
CFG = SamplingConfig(prompts=PROMPTS, group_size=4, max_new_tokens=12, seed=11, temperature=1.0)


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rollout(bundle):
    return sample(bundle, CFG)


@pytest.fixture(scope="module")
def advantages(rollout):
    """(B, T) sequence-constant advantages: +1 / -1 alternating within each group (GRPO-like)."""
    signs = torch.tensor([1.0, -1.0] * (rollout.token_ids.shape[0] // 2))
    return signs[:, None] * rollout.response_mask


def agreement(result) -> float:
    mask = result.response_mask.bool()
    return float(((result.delta * result.advantages)[mask] > 0).float().mean())


def step(bundle, rollout, advantages, framework="verl", loss_config=None, **kw):
    with lora.LoraPolicy(bundle, seed=kw.pop("adapter_seed", 0)) as policy:
        return update.update_step(
            policy,
            rollout,
            advantages,
            framework=framework,
            loss_config=loss_config,
            cfg=update.UpdateConfig(**kw),
        )


def test_fresh_adapter_is_the_base(bundle, rollout):
    with lora.LoraPolicy(bundle, seed=3) as policy:
        lp = update.policy_logprobs(policy, rollout)
    torch.testing.assert_close(lp, rollout.logprobs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("framework", ["verl", "roll", "trl"])
def test_step_moves_logprobs_the_advantage_way(bundle, rollout, advantages, framework):
    result = step(bundle, rollout, advantages, framework=framework, lr=1e-4)
    assert float(result.delta.abs().max()) > 1e-4  # it moved
    assert agreement(result) > 0.8  # chance is 0.5
    seq_delta = result.delta.sum(-1) / result.response_mask.sum(-1)
    seq_adv = advantages[:, 0]
    assert bool((seq_delta[seq_adv > 0] > 0).all())
    assert bool((seq_delta[seq_adv < 0] < 0).all())
    assert set(result.seconds) == {"forward", "backward", "optimizer", "rescore", "total"}
    assert result.grad_norm > 0
    # autograd's dL/dlogp through the real model equals the loss's closed-form coefficient
    torch.testing.assert_close(
        result.grad_coef, result.per_token["grad_coef"], atol=1e-7, rtol=1e-5
    )


def test_first_epoch_gradient_is_minus_a_over_n_for_token_mean(bundle, rollout, advantages):
    """verl token-mean at r = 1: dL/dlogp_t = -A_t / N (N = all valid tokens)."""
    result = step(bundle, rollout, advantages, framework="verl", lr=1e-4)
    mask = rollout.response_mask
    torch.testing.assert_close(result.grad_coef, -advantages * mask / mask.sum(), atol=1e-7, rtol=0)
    torch.testing.assert_close(result.epochs[0].ratio[mask > 0], torch.ones(int(mask.sum())))


def test_base_weights_bitwise_unchanged(bundle, rollout, advantages):
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    types = {n: type(m) for n, m in bundle.model.named_modules()}
    policy = lora.LoraPolicy(bundle, seed=1)
    update.update_step(policy, rollout, advantages, cfg=update.UpdateConfig(lr=1e-3, epochs=2))
    for name, layer in lora.adapter_layers(bundle):
        assert torch.equal(layer.base_layer.weight, before[f"{name}.weight"])
    policy.close()
    after = bundle.model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert {n: type(m) for n, m in bundle.model.named_modules()} == types
    assert not any(p.requires_grad for p in bundle.model.parameters())


def test_users_do_not_see_each_other(bundle, rollout, advantages):
    base_again_cfg = SamplingConfig(prompts=PROMPTS, group_size=2, max_new_tokens=8, seed=5)
    base_before = sample(bundle, base_again_cfg)
    user_a = lora.LoraPolicy(bundle, seed=1)
    user_b = lora.LoraPolicy(bundle, seed=2)
    try:
        b_before = update.policy_logprobs(user_b, rollout)
        result = update.update_step(user_a, rollout, advantages, cfg=update.UpdateConfig(lr=1e-3))
        assert float(result.delta.abs().max()) > 1e-3
        assert torch.equal(update.policy_logprobs(user_b, rollout), b_before)
        base_after = sample(bundle, base_again_cfg)  # another user, plain base, adapters exist
        assert torch.equal(base_after.token_ids, base_before.token_ids)
        assert torch.equal(base_after.logprobs, base_before.logprobs)
        # and the trained policy is a PolicySource: sampling from it differs from the base
        adapted = sample(bundle, base_again_cfg, source=user_a)
        assert float(adapted.exact_kl.max()) > 0
    finally:
        user_a.close()
        user_b.close()


def test_same_seed_same_result_and_no_global_rng(bundle, rollout, advantages):
    rng = torch.get_rng_state()
    first = step(bundle, rollout, advantages, lr=1e-3, epochs=2, minibatches=2, seed=4)
    second = step(bundle, rollout, advantages, lr=1e-3, epochs=2, minibatches=2, seed=4)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(first.delta, second.delta)
    assert torch.equal(first.grad_coef, second.grad_coef)
    other = step(bundle, rollout, advantages, lr=1e-3, epochs=2, minibatches=2, adapter_seed=9)
    assert not torch.equal(first.delta, other.delta)  # the adapter seed matters


def test_clipping_bites_only_from_epoch_two(bundle, rollout, advantages):
    result = step(bundle, rollout, advantages, lr=5e-3, epochs=2)
    first, second = result.epochs
    assert first.clip_fractions
    assert all(v == 0.0 for v in first.clip_fractions.values())
    assert max(second.clip_fractions.values()) > 0.0
    assert abs(first.ratio_mean - 1.0) < 1e-5
    assert second.ratio_max > 1.2


@pytest.mark.parametrize(
    ("framework", "loss_config"),
    [
        ("verl", None),
        ("roll", {"entropy_loss_coef": 0.05, "use_kl_loss": True, "kl_loss_coef": 0.1}),
    ],
)
def test_chunked_backward_equals_one_backward(bundle, rollout, advantages, framework, loss_config):
    """micro_tokens forces row chunks (entropy and KL terms too); same step up to rounding."""
    kw = {"framework": framework, "loss_config": loss_config, "lr": 1e-3, "epochs": 2}
    whole = step(bundle, rollout, advantages, **kw)
    chunked = step(bundle, rollout, advantages, micro_tokens=12, **kw)
    torch.testing.assert_close(chunked.grad_coef, whole.grad_coef, atol=1e-7, rtol=0)
    torch.testing.assert_close(chunked.delta, whole.delta, atol=1e-4, rtol=0)
    assert abs(chunked.grad_norm - whole.grad_norm) < 1e-4 * whole.grad_norm


def test_close_frees_the_adapter(bundle, rollout, advantages):
    policy = lora.LoraPolicy(bundle, seed=0)
    update.update_step(policy, rollout, advantages, cfg=update.UpdateConfig(lr=1e-4))
    sizes = policy.nbytes()
    # AdamW: exp_avg and exp_avg_sq per tensor, plus a float32 step counter
    assert sizes["adapter"] > 0
    assert sizes["optimizer"] == 2 * sizes["adapter"] + 4 * len(policy.parameters())
    assert policy.name in lora.adapter_names(bundle)
    policy.close()
    assert policy.closed
    assert lora.adapter_names(bundle) == ()
    assert policy.optimizer is None
    assert policy.parameters() == []
    assert not any("lora" in n for n, _ in bundle.model.named_parameters())
    with pytest.raises(ValueError, match="closed"):
        update.update_step(policy, rollout, advantages)
    with bundle.lock, pytest.raises(RuntimeError, match="closed"), policy.activate(bundle):
        pass
    policy.close()  # idempotent


def test_activate_needs_the_lock_and_configs_are_checked(bundle, rollout, advantages):
    with lora.LoraPolicy(bundle) as policy:
        with pytest.raises(RuntimeError, match="lock"), policy.activate(bundle):
            pass
        with pytest.raises(ValueError, match="r=4"):
            update.update_step(policy, rollout, advantages, cfg=update.UpdateConfig(lora_rank=4))
        with pytest.raises(ValueError, match="minibatches"):
            update.update_step(policy, rollout, advantages, cfg=update.UpdateConfig(minibatches=99))
    with pytest.raises(ValueError, match="lr"):
        update.UpdateConfig(lr=0.0)
    with pytest.raises(ValueError, match="epochs"):
        update.UpdateConfig(epochs=0)


def test_loss_is_the_pipeline_loss():
    """The step's default loss is core.pipeline.policy_loss (H1's), not a local copy."""
    assert update._default_loss() is pipeline.policy_loss
