"""The behaviour-policy sources on the tiny model: a real mismatch from bf16, fp16, int8 and a
truncated sampler, and none from the trainer's own float32 path."""

import math
from dataclasses import replace

import pytest
import torch

from roll_viz.lm import behaviour as bh
from roll_viz.lm.decode import FAST_DECODE, next_tokens
from roll_viz.lm.models import load_models
from roll_viz.lm.request import policy_source
from roll_viz.lm.sampling import sample
from tests.lm.helpers import steered_config


@pytest.fixture(scope="module")
def scored(tiny, steered):
    cfg = steered_config()
    source = policy_source(cfg)
    contexts = [source.context_ids(tiny, cfg.prompts[g]) for g in steered.group_ids.tolist()]
    out = {}
    with tiny.lock, torch.inference_mode():
        for name in bh.SOURCES:
            out[name] = bh.behaviour_logprobs(
                tiny, contexts, steered.token_ids, steered.response_mask, source=name,
                temperature=cfg.temperature, top_p=0.9, top_k=20,
            )  # fmt: skip
    return out


def _delta(b):
    return (b.old - b.mu)[b.mask]


def test_fp32_against_fp32_is_exactly_zero(scored, steered):
    b = scored["fp32"]
    assert b.mask.tolist() == (steered.response_mask > 0).tolist()
    assert b.outside == 0
    assert torch.equal(b.old, b.mu)
    # the recompute is the sampler's own float32 scoring up to batch-shape rounding
    diff = (b.old - steered.logprobs.double())[b.mask].abs().max()
    assert float(diff) < 1e-4


@pytest.mark.parametrize("source", ["bf16", "fp16", "int8"])
def test_low_precision_copies_give_a_nonzero_mismatch(scored, source):
    b = scored[source]
    d = _delta(b)
    assert b.outside == 0
    assert float(d.abs().max()) > 1e-4
    assert torch.isfinite(d).all()
    assert torch.equal(b.old, scored["fp32"].old)  # the same pi_old for every source


def test_bf16_mismatch_is_larger_than_fp16(scored):
    # bf16 keeps 8 mantissa bits, fp16 11: the gap is larger in bf16 on the same tokens
    assert float(_delta(scored["bf16"]).abs().mean()) > float(_delta(scored["fp16"]).abs().mean())


@pytest.mark.parametrize("source", ["top_p", "top_k"])
def test_processed_logprobs_carry_log_s(scored, source):
    b = scored[source]
    d = _delta(b)
    assert bool((d <= 1e-6).all())  # log S <= 0: the renormalised mu is never below pi_old
    assert float(d.abs().max()) > 0.0
    assert b.outside + int(b.mask.sum()) == int(scored["fp32"].mask.sum())


def test_support_logmass_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    log_s, least = bh.support_logmass(logp, 0.7, None)  # keeps 0.5, 0.3 (mass before: 0, 0.5)
    assert float(log_s) == pytest.approx(math.log(0.8), rel=1e-5)
    assert float(least) == pytest.approx(math.log(0.3), rel=1e-5)
    log_s, least = bh.support_logmass(logp, None, 3)
    assert float(log_s) == pytest.approx(math.log(0.95), rel=1e-5)
    log_s, _ = bh.support_logmass(logp, 1.0, None)
    assert float(log_s) == pytest.approx(0.0, abs=1e-6)


def test_a_top_p_draw_is_always_inside_the_support():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 30, generator=gen) * 2
    logp = torch.log_softmax(logits, dim=-1)
    _, least = bh.support_logmass(logp, 0.8, None)
    for _ in range(20):
        drawn = next_tokens(logits, 64, 1.0, 0.8, gen)
        assert bool((logp.gather(-1, drawn[:, None]).squeeze(-1) >= least).all())


def test_bad_arguments_are_refused(tiny, steered):
    with pytest.raises(ValueError, match="source"):
        bh.behaviour_logprobs(tiny, [[1]], steered.token_ids[:1], steered.response_mask[:1],
                              source="fp8")  # fmt: skip
    with pytest.raises(ValueError, match="top_p"):
        bh.behaviour_logprobs(tiny, [[1]], steered.token_ids[:1], steered.response_mask[:1],
                              source="top_p", top_p=0.0)  # fmt: skip


def test_int8_replay_follows_the_decode_loop(tiny):
    """Greedy answers drawn by the int8 fast path are, at every step, the replay's argmax."""
    cfg = replace(steered_config(), temperature=0.0, max_new_tokens=8)
    rollout = sample(tiny, cfg, decode=FAST_DECODE)
    assert dict(rollout.meta).get("decode_weights") == "int8-dynamic"
    source = policy_source(cfg)
    contexts = [source.context_ids(tiny, cfg.prompts[g]) for g in rollout.group_ids.tolist()]
    mask = rollout.response_mask > 0
    with tiny.lock, torch.inference_mode():
        got = bh._replay_int8(tiny, contexts, rollout.token_ids, mask, 1.0)
    assert got is not None
    assert bool(got[1][mask].all())


def test_a_bf16_server_still_recomputes_in_float32(steered):
    """The GPU default loads bf16: pi_old comes from a float32 copy, bf16 mu from the model."""
    bundle = load_models("tiny", device="cpu", dtype="bfloat16")
    cfg = steered_config()
    source = policy_source(cfg)
    with bundle.lock, torch.inference_mode():
        contexts = [source.context_ids(bundle, cfg.prompts[g]) for g in steered.group_ids.tolist()]
        got = {
            name: bh.behaviour_logprobs(bundle, contexts, steered.token_ids,
                                        steered.response_mask, source=name,
                                        temperature=cfg.temperature)
            for name in ("fp32", "bf16")
        }  # fmt: skip
        with pytest.raises(ValueError, match="int8"):
            bh.behaviour_logprobs(bundle, contexts, steered.token_ids, steered.response_mask,
                                  source="int8")  # fmt: skip
    assert torch.equal(got["fp32"].old, got["fp32"].mu)
    assert float(_delta(got["bf16"]).abs().max()) > 1e-4
    assert "score_fp32" in bundle.compiled_steps
    assert "score_bf16" not in bundle.compiled_steps  # bf16 mu is the served model itself
