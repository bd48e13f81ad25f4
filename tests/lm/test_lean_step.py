"""The lean decode step (lm.lean_step) against transformers' own step, on the tiny model."""

import dataclasses

import pytest
import torch
from transformers import DynamicCache

from roll_viz.lm import decode, lora
from roll_viz.lm.decode import FAST_DECODE, DecodeOptions, decode_batch
from roll_viz.lm.lean_step import LeanDecoder
from roll_viz.lm.models import load_models
from roll_viz.lm.sampling import sample


def _prefill(bundle, contexts):
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[bundle.pad_id] * (width - len(c)) + c for c in contexts])
    attn = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache()
    out = bundle.model(
        input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache
    )
    return out, attn, positions, width


def _contexts(bundle):
    # different lengths: left padding and position ids must match transformers' handling
    return [bundle.chat_ids(p) for p in ("Hi", "What is 2 + 3?", "A much longer prompt here")]


@pytest.mark.parametrize("padded", [False, True])
def test_float_step_gives_the_transformers_logits(tiny, padded):
    with torch.inference_mode():
        contexts = _contexts(tiny) if padded else [tiny.chat_ids(p) for p in ("ab", "cd", "ef")]
        assert padded == (len({len(c) for c in contexts}) > 1)
        out, attn, positions, width = _prefill(tiny, contexts)
        lean = LeanDecoder(tiny.model)
        buffers = lean.allocate(len(contexts), width + 6, torch.float32, torch.device("cpu"))
        lean.load_cache(buffers, out.past_key_values, width)
        cache = out.past_key_values
        pos = positions[:, -1:] + 1
        generator = torch.Generator().manual_seed(3)
        token = torch.randint(3, 200, (len(contexts),), generator=generator)
        for step in range(5):
            attn = torch.cat([attn, torch.ones(len(contexts), 1, dtype=attn.dtype)], 1)
            want = tiny.model(
                input_ids=token[:, None],
                attention_mask=attn,
                position_ids=pos,
                past_key_values=cache,
            )
            cache = want.past_key_values
            hidden, logits = lean.step(buffers, token, pos, width + step, attn)
            # same weights and norms; attention as plain matmuls instead of SDPA: rounding only
            torch.testing.assert_close(logits, want.logits[:, -1], atol=5e-5, rtol=0)
            assert hidden.shape == (len(contexts), tiny.model.config.hidden_size)
            token = logits.argmax(-1)
            pos = pos + 1


def test_int8_step_is_close_to_float_and_leaves_the_model_alone(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    with torch.inference_mode():
        contexts = _contexts(tiny)
        out, attn, positions, width = _prefill(tiny, contexts)
        steps = {}
        for weights in ("model", "int8"):
            lean = LeanDecoder(tiny.model, weights)
            buffers = lean.allocate(len(contexts), width + 1, torch.float32, torch.device("cpu"))
            lean.load_cache(buffers, out.past_key_values, width)
            token = out.logits[:, -1].argmax(-1)
            mask = torch.cat([attn, torch.ones(len(contexts), 1, dtype=attn.dtype)], 1)
            steps[weights] = lean.step(buffers, token, positions[:, -1:] + 1, width, mask)[1]
    exact, approx = steps["model"], steps["int8"]
    assert not torch.equal(exact, approx)  # it really is the quantized copy
    spread = exact.std().item()
    assert (approx - exact).abs().max().item() < 0.5 * spread
    assert torch.corrcoef(torch.stack([exact.flatten(), approx.flatten()]))[0, 1] > 0.98
    assert all(torch.equal(v, before[k]) for k, v in tiny.model.state_dict().items())
    assert type(tiny.model.model.layers[0].self_attn.q_proj) is torch.nn.Linear


def test_decode_with_and_without_the_lean_step_draws_the_same_tokens(tiny):
    contexts = _contexts(tiny)
    results = []
    with tiny.lock, torch.inference_mode():
        for lean in (True, False):
            generator = torch.Generator().manual_seed(11)
            options = DecodeOptions(lean_step=lean)
            results.append(
                decode_batch(tiny, contexts, 3, 1.1, 0.9, 14, generator, options=options)
            )
    assert results[0] == results[1]
    assert any(len(r) > 2 for r in results[0])


def test_int8_lean_sampling_is_deterministic_per_seed(tiny, steered_cfg):
    cfg = dataclasses.replace(steered_cfg, seed=123)
    a = sample(tiny, cfg, decode=FAST_DECODE)
    b = sample(tiny, cfg, decode=FAST_DECODE)
    assert torch.equal(a.token_ids, b.token_ids)
    assert a.responses == b.responses
    assert dict(a.meta)["decode_weights"] == "int8-dynamic"


def test_shared_lean_step_never_reads_base_weights_under_an_adapter(steered_cfg, monkeypatch):
    """An active LoRA adapter gets the merged step (or transformers'), never the base-weight one."""
    bundle = load_models("tiny", device="cpu", dtype="float32")  # own bundle: adapters injected

    def refuse(bundle, weights):
        raise AssertionError("the base-weight lean step must not run for an adapter source")

    monkeypatch.setattr(decode, "lean_decoder", refuse)
    cfg = dataclasses.replace(steered_cfg, seed=5, max_new_tokens=3)
    with lora.LoraPolicy(bundle, seed=0) as policy:
        sample(bundle, cfg, source=policy)  # merged step
        sample(bundle, cfg, source=policy, decode=DecodeOptions(merge_adapter=False))  # peft's
        with pytest.raises(AssertionError, match="must not run"):
            sample(bundle, cfg)  # a prompt-only source does use it (the adapter is off)


def test_supports_llama_only():
    assert not LeanDecoder.supports(object())

    class NotLlama:
        config = type("C", (), {"model_type": "gpt2"})()

    assert not LeanDecoder.supports(NotLlama())


@pytest.mark.parametrize("weights", ["model", "int8"])
def test_step_is_bitwise_the_same_under_one_and_two_threads(tiny, weights):
    saved = torch.get_num_threads()
    logits = {}
    try:
        with torch.inference_mode():
            contexts = _contexts(tiny)
            out, attn, positions, width = _prefill(tiny, contexts)
            lean = LeanDecoder(tiny.model, weights)
            mask = torch.cat([attn, torch.ones(len(contexts), 1, dtype=attn.dtype)], 1)
            token = out.logits[:, -1].argmax(-1)
            for count in (1, 2):
                torch.set_num_threads(count)
                buffers = lean.allocate(
                    len(contexts), width + 1, torch.float32, torch.device("cpu")
                )
                lean.load_cache(buffers, out.past_key_values, width)
                logits[count] = lean.step(buffers, token, positions[:, -1:] + 1, width, mask)[1]
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(logits[1], logits[2])
