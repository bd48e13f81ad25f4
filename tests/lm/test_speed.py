"""The speed-ups of the model path give the same numbers: merged LoRA decode, shared contexts,
no re-score; each deterministic per seed and the same under one and two torch threads.

Each test uses its own tiny bundle (module fixture) and closes every adapter it makes. No timing
is asserted here (``python -m benchmarks`` measures the speed).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import replace

import pytest
import torch

from roll_viz.lm import lora, update
from roll_viz.lm.decode import BF16_DECODE, DecodeOptions, decode_batch
from roll_viz.lm.lean_step import LeanDecoder, adapter_active
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer

PROMPTS = ("Hello there", "What is 2 + 3?")
CFG = SamplingConfig(
    prompts=PROMPTS, group_size=4, max_new_tokens=12, seed=11, greedy=False, topk=3
)
LOGPROB_TOL = 5e-5  # float rounding of a different grouping of the same sums (tiny model)


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rollout(bundle):
    return sample(bundle, CFG)


@pytest.fixture(scope="module")
def advantages(rollout):
    signs = torch.tensor([1.0, -1.0] * (rollout.token_ids.shape[0] // 2))
    return signs[:, None] * rollout.response_mask


@contextlib.contextmanager
def torch_threads(count: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@contextlib.contextmanager
def moved_policy(bundle, seed: int = 0):
    """A LoRA policy whose B matrices are nonzero (a fresh adapter IS the base model)."""
    with lora.LoraPolicy(bundle, rank=4, alpha=8.0, seed=seed) as policy:
        gen = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():
            for _, b_weight in policy._pairs():
                b_weight.copy_(torch.randn(b_weight.shape, generator=gen) * 0.05)
        yield policy


# ---------------------------------------------------------------------------------------------
# Merged LoRA decode


def test_merged_step_logits_match_the_peft_forward(bundle):
    policy_cm = moved_policy(bundle)
    with policy_cm as policy, bundle.lock, policy.activate(bundle), torch.inference_mode():
        assert adapter_active(bundle.model)
        ctx = bundle.chat_ids("Hello there")
        ids = torch.tensor([ctx] * 3)
        prefill = bundle.model(input_ids=ids, use_cache=True)
        token = torch.tensor([5, 9, 17])
        peft = bundle.model(
            input_ids=token[:, None],
            past_key_values=prefill.past_key_values,
            position_ids=torch.full((3, 1), len(ctx)),
            attention_mask=torch.ones(3, len(ctx) + 1, dtype=torch.long),
        ).logits[:, -1]
        lean = LeanDecoder(bundle.model, "merged")
        fresh = bundle.model(input_ids=ids, use_cache=True)
        buffers = lean.allocate(3, len(ctx) + 1, torch.float32, bundle.device)
        lean.load_cache(buffers, fresh.past_key_values, len(ctx))
        pos = torch.full((3, 1), len(ctx))
        merged = lean.step(buffers, token, pos, len(ctx), torch.ones(3, len(ctx) + 1))[1]
    torch.testing.assert_close(merged, peft, atol=1e-5, rtol=0)
    assert not adapter_active(bundle.model)  # activate's exit switched it off again


def test_low_rank_step_matches_the_peft_policy_and_the_base_reference(bundle):
    """Rows 0-2 carry the adapter (peft's forward), rows 3-5 are the base model (adapter off)."""
    ctx = bundle.chat_ids("Hello there")
    ids = torch.tensor([ctx] * 3)
    token = torch.tensor([5, 9, 17])
    pos = torch.full((3, 1), len(ctx))
    mask = torch.ones(3, len(ctx) + 1, dtype=torch.long)

    def peft_logits():
        prefill = bundle.model(input_ids=ids, use_cache=True)
        return bundle.model(
            input_ids=token[:, None],
            past_key_values=prefill.past_key_values,
            position_ids=pos,
            attention_mask=mask,
        ).logits[:, -1]

    with moved_policy(bundle) as policy, bundle.lock, torch.inference_mode():
        base_prefill = bundle.model(input_ids=ids, use_cache=True)
        base = peft_logits()
        with policy.activate(bundle):
            policy_prefill = bundle.model(input_ids=ids, use_cache=True)
            adapted = peft_logits()
            lean = LeanDecoder(bundle.model, "lora")
            buffers = lean.allocate(6, len(ctx) + 1, torch.float32, bundle.device)
            lean.load_cache(buffers, policy_prefill.past_key_values, len(ctx))
            lean.load_cache(buffers, base_prefill.past_key_values, len(ctx), first_row=3)
            both = lean.step(
                buffers, token.repeat(2), pos.repeat(2, 1), len(ctx), mask.repeat(2, 1), adapted=3
            )[1]
    torch.testing.assert_close(both[:3], adapted, atol=1e-5, rtol=0)
    torch.testing.assert_close(both[3:], base, atol=1e-5, rtol=0)
    assert (adapted - base).abs().max() > 1e-3  # the adapter moved the logits


NUCLEUS_CFG = replace(CFG, greedy=True, temperature=0.7, top_p=0.9, seed=4)  # + greedy rows


@pytest.mark.parametrize("cfg", [CFG, NUCLEUS_CFG], ids=["plain", "greedy_rows_top_p"])
def test_merged_decode_gives_the_peft_draws_and_logprobs(bundle, cfg):
    with moved_policy(bundle) as policy:
        merged = sample(bundle, cfg, source=policy)
        peft = sample(bundle, cfg, source=policy, decode=DecodeOptions(merge_adapter=False))
        unpaired = sample(bundle, cfg, source=policy, decode=DecodeOptions(pair_reference=False))
    assert merged.greedy_responses == peft.greedy_responses
    assert torch.equal(merged.token_ids, peft.token_ids)
    assert torch.equal(unpaired.token_ids, peft.token_ids)
    # the reference decoded beside the policy: its scores come out of the decode steps
    for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "topk_ref_logprobs"):
        ours, theirs = getattr(merged, name), getattr(peft, name)
        torch.testing.assert_close(ours, theirs, atol=LOGPROB_TOL, rtol=0, msg=name)
    assert torch.equal(merged.topk_ids, peft.topk_ids)
    torch.testing.assert_close(merged.features, peft.features, atol=1e-5, rtol=0)
    # without the pairing the reference is the teacher-forced pass, bit for bit
    torch.testing.assert_close(unpaired.ref_logprobs, peft.ref_logprobs, atol=0, rtol=0)


def test_merged_decode_leaves_the_base_weights_alone(bundle):
    before = {k: v.clone() for k, v in bundle.model.state_dict().items() if "lora" not in k}
    with moved_policy(bundle) as policy:
        sample(bundle, CFG, source=policy)
    after = bundle.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


@pytest.mark.parametrize("options", [DecodeOptions(), DecodeOptions(adapt_threads=False)])
def test_merged_decode_is_the_same_under_one_and_two_threads(bundle, options):
    runs = []
    with moved_policy(bundle) as policy:
        for count in (1, 2, 1):
            with torch_threads(count):
                runs.append(sample(bundle, CFG, source=policy, decode=options))
    for other in runs[1:]:
        assert torch.equal(other.token_ids, runs[0].token_ids)
        for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "features"):
            assert torch.equal(getattr(other, name), getattr(runs[0], name)), name


def test_decode_batch_merges_only_while_an_adapter_is_on(bundle):
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))
    ctx = [bundle.chat_ids("Hello there")] * 2
    with moved_policy(bundle) as policy, bundle.lock, torch.inference_mode():
        with policy.activate(bundle):
            adapted = decode_batch(no_eos, ctx, 2, 1.0, 1.0, 6, torch.Generator().manual_seed(1))
        plain = decode_batch(no_eos, ctx, 2, 1.0, 1.0, 6, torch.Generator().manual_seed(1))
    assert adapted != plain  # the adapter moved the draws: the base step did not decode them


# ---------------------------------------------------------------------------------------------
# The update step: shared contexts, no re-score, threads


def step(bundle, rollout, advantages, **cfg):
    with moved_policy(bundle, seed=2) as policy:
        result = update.update_step(
            policy,
            rollout,
            advantages,
            framework="trl",
            loss_config={"beta": 0.04},
            cfg=update.UpdateConfig(lora_rank=4, lora_alpha=8.0, lr=1e-3, **cfg),
        )
        params = [p.detach().clone() for p in policy.parameters()]
    return result, params


@pytest.mark.parametrize(("epochs", "minibatches"), [(1, 1), (2, 2)])
def test_shared_context_update_equals_the_per_row_update(
    bundle, rollout, advantages, epochs, minibatches
):
    kw = {"epochs": epochs, "minibatches": minibatches}
    shared, p_shared = step(bundle, rollout, advantages, share_context=True, **kw)
    per_row, p_row = step(bundle, rollout, advantages, share_context=False, **kw)
    for name in ("logprobs_before", "logprobs_after", "delta", "grad_coef"):
        torch.testing.assert_close(
            getattr(shared, name), getattr(per_row, name), atol=1e-5, rtol=0, msg=name
        )
    assert shared.grad_norm == pytest.approx(per_row.grad_norm, rel=1e-5)
    for a, b in zip(shared.epochs, per_row.epochs, strict=True):
        assert a.terms["total"] == pytest.approx(b.terms["total"], abs=1e-6)
    for a, b in zip(p_shared, p_row, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_chunked_shared_context_backward_equals_one_backward(bundle, rollout, advantages):
    one, p_one = step(bundle, rollout, advantages)
    chunked, p_chunked = step(bundle, rollout, advantages, micro_tokens=12)
    torch.testing.assert_close(one.grad_coef, chunked.grad_coef, atol=1e-7, rtol=1e-5)
    for a, b in zip(p_one, p_chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_no_rescore_takes_the_same_step(bundle, rollout, advantages):
    full, p_full = step(bundle, rollout, advantages)
    lean, p_lean = step(bundle, rollout, advantages, rescore=False)
    assert lean.logprobs_after is None
    assert lean.delta is None
    assert torch.equal(lean.logprobs_before, full.logprobs_before)
    assert torch.equal(lean.grad_coef, full.grad_coef)
    assert lean.grad_norm == full.grad_norm
    assert all(torch.equal(a, b) for a, b in zip(p_full, p_lean, strict=True))


def test_update_is_the_same_under_one_and_two_threads(bundle, rollout, advantages):
    runs = []
    for count in (1, 2):
        with torch_threads(count):
            runs.append(step(bundle, rollout, advantages, epochs=2))
    (a, pa), (b, pb) = runs
    for name in ("logprobs_before", "logprobs_after", "grad_coef"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.grad_norm == b.grad_norm
    assert all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))


# ---------------------------------------------------------------------------------------------
# A whole training step with every speed-up on


def train_curves(bundle, steps: int = 2) -> list[dict]:
    settings = TrainSettings.flat(
        prompts=("hello", "tell me"),
        group_size=4,
        max_new_tokens=10,
        steps=steps,
        reward=RewardChoice.single("letter_share"),
        framework="trl",
        config=(),
        beta=0.04,
        lora_rank=4,
        lora_alpha=8.0,
        lr=1e-2,
        seed=3,
        model="tiny",
    )
    trainer = Trainer(bundle, settings)
    try:
        records = [trainer.run_step(keep_samples=True) for _ in range(steps)]
    finally:
        trainer.close()
    out = []
    for r in records:
        m = {k: v for k, v in r.metrics.items() if k != "seconds"}
        m["update"] = {k: v for k, v in m["update"].items() if not k.startswith("seconds")}
        out.append((m, r.samples.responses))
    return out


def test_training_steps_are_deterministic_per_seed_under_one_and_two_threads(bundle):
    with torch_threads(1):
        one = train_curves(bundle)
    with torch_threads(2):
        two = train_curves(bundle)
    assert one == two
    assert "delta_abs_mean" not in one[0][0]["update"]  # no re-score in a training step


# ---------------------------------------------------------------------------------------------
# The opt-in bfloat16 decode: what it changes, bounded


def replay_kl(bundle, weights: str, rows: int = 4, steps: int = 16) -> tuple[float, float, float]:
    """(mean, max KL(float || weights) of the next-token distributions, mean |d log p|).

    Float decode draws ``rows`` answers; the float and the ``weights`` lean steps replay them
    from the same float prefill.
    """
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))
    with bundle.lock, torch.inference_mode():
        ctx = bundle.chat_ids("Hello there")
        gen = torch.Generator().manual_seed(0)
        answers = decode_batch(no_eos, [ctx] * rows, rows, 1.0, 1.0, steps, gen)
        tokens = torch.tensor(answers)
        width = len(ctx)
        prefill = bundle.model(input_ids=torch.tensor([ctx] * rows), use_cache=True)
        logp = {}
        for kind in ("model", weights):
            lean = LeanDecoder(bundle.model, kind)
            buffers = lean.allocate(rows, width + steps, torch.float32, bundle.device)
            lean.load_cache(buffers, prefill.past_key_values, width)
            out = []
            for t in range(steps - 1):
                mask = torch.ones(rows, width + t + 1)
                pos = torch.full((rows, 1), width + t)
                logits = lean.step(buffers, tokens[:, t], pos, width + t, mask)[1]
                out.append(torch.log_softmax(logits, -1))
            logp[kind] = torch.stack(out)
    exact, approx = logp["model"], logp[weights]
    kl = (exact.exp() * (exact - approx)).sum(-1)
    drawn = tokens[:, 1:].T[..., None]
    moved = (exact.gather(-1, drawn) - approx.gather(-1, drawn)).abs().mean()
    return float(kl.mean()), float(kl.max()), float(moved)


def test_bf16_decode_stays_close_to_the_float_step(bundle):
    mean_kl, max_kl, moved = replay_kl(bundle, "bf16")
    assert 0 < mean_kl < 1e-3  # 2.4e-4 here (int8: 6.3e-3); the bench prints SmolLM2's
    assert max_kl < 1e-2
    assert moved < 0.05  # mean |log p(drawn) float - bf16| (0.019 here; int8: 0.093)


def test_bf16_decode_is_labelled_and_scores_stay_float(bundle):
    bf16 = sample(bundle, CFG, decode=BF16_DECODE)
    again = sample(bundle, CFG, decode=BF16_DECODE)
    assert torch.equal(bf16.token_ids, again.token_ids)  # deterministic per seed
    assert dict(bf16.meta)["decode_weights"] == "bfloat16-lean"
    assert dict(sample(bundle, CFG).meta)["decode_weights"] == "float32"
    # the reported log-probs are the float model's teacher-forced scores of the drawn tokens
    with lora.LoraPolicy(bundle, seed=0) as fresh:  # B = 0: the base model
        float_scores = update.policy_logprobs(fresh, bf16)
    torch.testing.assert_close(bf16.logprobs, float_scores, atol=1e-5, rtol=0)


def test_bf16_decode_is_the_same_under_one_and_two_threads(bundle):
    runs = []
    for count in (1, 2):
        with torch_threads(count):
            runs.append(sample(bundle, CFG, decode=replace(BF16_DECODE, adapt_threads=False)))
    assert torch.equal(runs[0].token_ids, runs[1].token_ids)
    assert torch.equal(runs[0].logprobs, runs[1].logprobs)
