"""The fast decode loop (lm.decode) against the plain loop kept below, and the int8 copy.

The fast loop (prefill once per distinct prompt, prefetched sampling noise) must draw exactly the
tokens of the plain loop kept below (the loop as it was before: one prefill row per sample,
``torch.multinomial`` at every step), for the same seed, under 1 and 2 torch threads.
"""

import contextlib
import dataclasses

import pytest
import torch
from transformers import DynamicCache

from roll_viz.lm.decode import FAST_DECODE, PLAIN_DECODE, DecodeOptions, decode_batch, next_tokens
from roll_viz.lm.rollout import shared_sample
from roll_viz.lm.sampling import sample

PROMPTS = ("Hello there", "What is 2 + 3?")


def plain_decode(bundle, contexts, num_sampled, temperature, top_p, max_new_tokens, seed):
    """Reference loop: left-padded batch prefill of every row, DynamicCache, multinomial draws."""
    generator = torch.Generator().manual_seed(seed)
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[bundle.pad_id] * (width - len(c)) + c for c in contexts])
    attn = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache()
    out = bundle.model(
        input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache
    )
    rows = [[] for _ in contexts]
    done = [False] * len(contexts)
    pos = positions[:, -1:] + 1
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        picks = []
        probs = torch.softmax(logits[:num_sampled] / temperature, dim=-1)
        if top_p < 1.0:
            sp, order = probs.sort(dim=-1, descending=True)
            keep = (sp.cumsum(-1) - sp) < top_p
            picks = order.gather(-1, torch.multinomial(sp * keep, 1, generator=generator))[:, 0]
        else:
            picks = torch.multinomial(probs, 1, generator=generator)[:, 0]
        token = torch.cat([picks, logits[num_sampled:].argmax(-1)]).tolist()
        token = [bundle.pad_id if d else t for d, t in zip(done, token, strict=True)]
        for b, t in enumerate(token):
            if not done[b]:
                rows[b].append(t)
                done[b] = t in bundle.eos_ids
        if all(done):
            break
        attn = torch.cat([attn, torch.ones(len(contexts), 1, dtype=attn.dtype)], 1)
        out = bundle.model(
            input_ids=torch.tensor(token)[:, None],
            attention_mask=attn,
            position_ids=pos,
            past_key_values=out.past_key_values,
        )
        pos = pos + 1
    return rows


@contextlib.contextmanager
def threads(n):
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def contexts_of(bundle, prompts, group):
    with bundle.lock:
        ctx = [bundle.chat_ids(p) for p in prompts]
    return [c for c in ctx for _ in range(group)] + ctx  # G rows per prompt, then greedy rows


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize(("temperature", "top_p"), [(0.9, 1.0), (1.0, 1.0), (1.3, 0.7)])
def test_fast_loop_draws_the_plain_loops_tokens(tiny, num_threads, temperature, top_p):
    rows = contexts_of(tiny, PROMPTS, 3)
    with threads(num_threads), torch.inference_mode():
        want = plain_decode(tiny, rows, 6, temperature, top_p, 12, seed=5)
        for options in (DecodeOptions(), PLAIN_DECODE):
            generator = torch.Generator().manual_seed(5)
            got = decode_batch(tiny, rows, 6, temperature, top_p, 12, generator, options=options)
            assert got == want, options
    assert any(len(r) > 1 for r in want)


def test_sample_bytes_same_under_thread_counts_and_decode_switches(tiny, steered_cfg):
    with threads(1):
        one = sample(tiny, steered_cfg)
    with threads(2):
        two = sample(tiny, steered_cfg)
        plain = sample(tiny, steered_cfg, decode=PLAIN_DECODE)
    for other in (two, plain):
        assert other.responses == one.responses
        assert other.greedy_responses == one.greedy_responses
        assert torch.equal(other.token_ids, one.token_ids)
        for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "features"):
            torch.testing.assert_close(getattr(other, name), getattr(one, name), atol=1e-5, rtol=0)
    # the default loop's numbers do not depend on the thread count (it is chosen per phase)
    for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "features"):
        assert torch.equal(getattr(two, name), getattr(one, name)), name
    with threads(1):
        again = sample(tiny, steered_cfg)
    for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "features"):
        assert torch.equal(getattr(again, name), getattr(one, name)), name


def test_noise_draw_is_multinomials_draw():
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(1)) * 3
    a, b = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for top_p in (1.0, 0.6):
        for _ in range(20):
            want = next_tokens(logits, 4, 0.8, top_p, a)
            noise = torch.empty(4, 300).exponential_(1, generator=b)
            got = next_tokens(logits, 4, 0.8, top_p, b, noise=noise)
            assert torch.equal(got, want)
    assert torch.equal(a.get_state(), b.get_state())


def test_decode_counter_and_timings(tiny):
    rows = contexts_of(tiny, PROMPTS, 2)
    calls, timings = [], {}
    with torch.inference_mode():
        decode_batch(
            tiny, rows, 4, 1.0, 1.0, 7, torch.Generator().manual_seed(0),
            counter=lambda done, total: calls.append((done, total)), timings=timings,
        )  # fmt: skip
    totals = {t for _, t in calls}
    assert totals == {len(rows) * 7}
    done = [d for d, _ in calls]
    assert done == sorted(done)
    assert done[-1] == len(rows) * 7
    assert 0 < done[0] <= len(rows)
    assert timings["steps"] == len(calls) - 1
    assert timings["prefill_s"] > 0
    assert timings["step_s"] > 0


def test_int8_decode_is_labelled_deterministic_and_scored_in_float(tiny, steered_cfg):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    cfg = dataclasses.replace(steered_cfg, seed=81)
    a = sample(tiny, cfg, decode=FAST_DECODE)
    b = sample(tiny, cfg, decode=FAST_DECODE)
    assert a.responses == b.responses
    assert torch.equal(a.token_ids, b.token_ids)
    assert torch.equal(a.logprobs, b.logprobs)
    meta = dict(a.meta)
    assert meta["decode_weights"] == "int8-dynamic"
    assert "int8" in meta["decode_note"]
    assert dict(sample(tiny, cfg).meta)["decode_weights"] == "float32"
    # the float model is untouched: same weights, still plain Linear layers
    assert all(torch.equal(v, before[k]) for k, v in tiny.model.state_dict().items())
    assert type(tiny.model.lm_head) is torch.nn.Linear
    # log-probs are the float model's teacher-forced scores of the int8-drawn tokens
    with tiny.lock:
        ctx = tiny.chat_ids(PROMPTS[0], cfg.instruction)
    n = int(a.response_mask[0].sum())
    ids = a.token_ids[0, :n].tolist()
    with torch.no_grad():
        logits = tiny.model(torch.tensor([ctx + ids])).logits[0, len(ctx) - 1 : len(ctx) - 1 + n]
    want = torch.log_softmax(logits.double() / cfg.temperature, -1).gather(
        -1, torch.tensor(ids)[:, None]
    )[:, 0]
    torch.testing.assert_close(a.logprobs[0, :n].double(), want, atol=1e-4, rtol=0)


def test_int8_not_used_for_weight_changing_sources(tiny, steered_cfg):
    @dataclasses.dataclass(frozen=True)
    class AdapterLike:  # a source that would switch weights (as a LoRA policy does)
        mode: str = "lora"
        shares_reference: bool = False

        def context_ids(self, bundle, prompt):
            return bundle.chat_ids(prompt)

        def activate(self, bundle):
            return contextlib.nullcontext()

    cfg = dataclasses.replace(steered_cfg, seed=91, max_new_tokens=4)
    r = sample(tiny, cfg, decode=FAST_DECODE, source=AdapterLike())
    assert dict(r.meta)["decode_weights"] == "float32"
    runs = tiny.usage.runs
    shared_sample(tiny, cfg, decode=FAST_DECODE, source=AdapterLike())  # runs alone, no sharing
    assert tiny.usage.runs == runs + 1
