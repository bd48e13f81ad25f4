"""The sampler on the tiny model: shapes, reproducibility, exact scores, finish reasons, threads."""

import dataclasses
import threading

import pytest
import torch

from roll_viz.core.pipeline import run
from roll_viz.core.records import batch_from_rollout, select_rows
from roll_viz.lm import rollout
from roll_viz.lm.decode import DecodeOptions
from roll_viz.lm.request import MAX_GROUP_SIZE, SamplingConfig, policy_source
from roll_viz.lm.rollout import in_flight, shared_sample
from roll_viz.lm.sampling import CLASS_MAX_GROUP_SIZE, capped, sample
from roll_viz.ui.settings import estimator_options
from tests.lm.helpers import run_in_threads, wait_until

PROMPTS = ("Hello there", "What is 2 + 3?")  # as in conftest


def independent_logprobs(bundle, prompt, instruction, response_ids, temperature):
    """Plain unpadded forward of one sequence: (T, V) log-probs that predict each response token."""
    content = f"{prompt}\n\n{instruction}" if instruction else prompt
    text = bundle.tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    ctx = bundle.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([ctx + response_ids])
    with torch.no_grad():
        logits = bundle.model(ids).logits[0]
    start = len(ctx) - 1
    return torch.log_softmax(
        logits[start : start + len(response_ids)].double() / temperature, dim=-1
    )


def test_shapes_and_padding(steered, steered_cfg):
    r = steered
    b = len(PROMPTS) * steered_cfg.group_size
    t = r.token_ids.shape[1]
    assert r.token_ids.shape == r.response_mask.shape == r.logprobs.shape == (b, t)
    assert r.ref_logprobs.shape == r.exact_kl.shape == r.entropy.shape == (b, t)
    assert r.topk_ids.shape == r.topk_logprobs.shape == r.topk_ref_logprobs.shape == (b, t, 5)
    assert r.features.shape == (b, t, steered_cfg.feature_dim)
    assert r.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert len(r.responses) == len(r.tokens) == len(r.finish_reasons) == b
    assert len(r.greedy_responses) == len(PROMPTS)
    assert r.token_ids.dtype == torch.long
    assert r.logprobs.dtype == torch.float32
    pad = r.response_mask == 0
    for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "token_ids"):
        assert (getattr(r, name)[pad] == 0).all(), name
    assert (r.features[pad] == 0).all()
    for row, mask_row in zip(r.tokens, r.response_mask, strict=True):
        assert len(row) == int(mask_row.sum())
    assert all(isinstance(text, str) for text in r.responses)
    assert set(r.vocab) >= set(r.token_ids[r.response_mask.bool()].tolist())
    tensors = [getattr(r, f.name) for f in dataclasses.fields(r)]
    assert not any(t.is_inference() for t in tensors if isinstance(t, torch.Tensor))
    meta = dict(r.meta)
    assert meta["seed"] == 7
    assert meta["policy_mode"] == "steered"
    assert meta["logprob_temperature"] == 0.9


def test_same_seed_byte_identical_and_different_seed_differs(tiny, steered, steered_cfg):
    again = sample(tiny, steered_cfg)
    assert again.responses == steered.responses
    assert torch.equal(again.token_ids, steered.token_ids)
    for name in ("logprobs", "ref_logprobs", "exact_kl", "entropy", "topk_logprobs", "features"):
        assert torch.equal(getattr(again, name), getattr(steered, name)), name
    other = sample(tiny, dataclasses.replace(steered_cfg, seed=8))
    assert not torch.equal(other.token_ids, steered.token_ids)


def test_logprobs_match_independent_teacher_forcing(tiny, steered, steered_cfg):
    temperature = steered_cfg.temperature
    for b in range(len(steered.responses)):
        n = int(steered.response_mask[b].sum())
        ids = steered.token_ids[b, :n].tolist()
        prompt = PROMPTS[int(steered.group_ids[b])]
        lp_policy = independent_logprobs(tiny, prompt, steered_cfg.instruction, ids, temperature)
        lp_ref = independent_logprobs(tiny, prompt, "", ids, temperature)
        target = torch.tensor(ids)[:, None]
        torch.testing.assert_close(
            steered.logprobs[b, :n].double(), lp_policy.gather(-1, target)[:, 0], atol=1e-4, rtol=0
        )
        torch.testing.assert_close(
            steered.ref_logprobs[b, :n].double(), lp_ref.gather(-1, target)[:, 0], atol=1e-4, rtol=0
        )
        # exact KL and entropy over the full vocabulary, written out independently
        p = lp_policy.exp()
        kl = (p * (lp_policy - lp_ref)).sum(-1)
        ent = -(p * lp_policy).sum(-1)
        torch.testing.assert_close(steered.exact_kl[b, :n].double(), kl, atol=1e-4, rtol=0)
        torch.testing.assert_close(steered.entropy[b, :n].double(), ent, atol=1e-4, rtol=0)
        # sum_v p(v)^2, which verl's optimal token baseline reads
        pi2 = (p * p).sum(-1)
        torch.testing.assert_close(steered.sum_pi_squared[b, :n].double(), pi2, atol=1e-5, rtol=0)
        assert float(steered.sum_pi_squared[b, n:].abs().sum()) == 0.0
        # top-k: the policy's K best under both models
        top_lp, top_ids = lp_policy.topk(5, dim=-1)
        assert torch.equal(steered.topk_ids[b, :n], top_ids)
        torch.testing.assert_close(steered.topk_logprobs[b, :n].double(), top_lp, atol=1e-4, rtol=0)
        torch.testing.assert_close(
            steered.topk_ref_logprobs[b, :n].double(), lp_ref.gather(-1, top_ids), atol=1e-4, rtol=0
        )


def test_topk_sorted_and_consistent(steered):
    valid = steered.response_mask.bool()
    top = steered.topk_logprobs[valid]
    assert (top[:, :-1] >= top[:, 1:]).all()
    assert (steered.logprobs[valid] <= top[:, 0] + 1e-6).all()
    in_topk = (steered.topk_ids[valid] == steered.token_ids[valid][:, None]).any(-1)
    rows = top[in_topk]
    chosen = steered.logprobs[valid][in_topk]
    assert all((chosen[i] - rows[i]).abs().min() < 1e-6 for i in range(len(chosen)))


def test_identical_kl_exactly_zero_and_steered_nonzero(identical, steered):
    assert (identical.exact_kl == 0).all()
    assert torch.equal(identical.logprobs, identical.ref_logprobs)
    assert torch.equal(identical.topk_logprobs, identical.topk_ref_logprobs)
    assert "exactly 0" in dict(identical.meta)["kl_note"]
    assert steered.exact_kl.sum() > 0
    assert (steered.exact_kl >= 0).all()
    assert not torch.equal(steered.logprobs, steered.ref_logprobs)


def test_greedy_rows_match_temperature_zero(tiny):
    cfg = SamplingConfig(prompts=PROMPTS, group_size=2, max_new_tokens=8, temperature=0.0)
    r = sample(tiny, cfg)
    # at temperature 0 every sampled row is the greedy answer of its prompt
    assert r.responses == (r.greedy_responses[0],) * 2 + (r.greedy_responses[1],) * 2
    assert dict(r.meta)["logprob_temperature"] == 1.0


def test_finish_reasons_forced_length_and_eos(tiny):
    cfg = SamplingConfig(
        prompts=("abc",), group_size=1, max_new_tokens=6, temperature=0.0, greedy=False
    )
    free = sample(tiny, cfg)
    ids = free.token_ids[0].tolist()
    never = next(i for i in range(len(tiny.tokenizer)) if i not in ids)
    no_eos = dataclasses.replace(tiny, eos_ids=(never,))
    r = sample(no_eos, cfg)
    assert r.finish_reasons == ("length",)
    assert int(r.response_mask.sum()) == 6
    stop_token = ids[2]
    stop_at = ids.index(stop_token) + 1
    with_eos = dataclasses.replace(tiny, eos_ids=(stop_token,))
    r = sample(with_eos, cfg)
    assert r.finish_reasons == ("eos",)
    assert int(r.response_mask.sum()) == stop_at
    assert r.token_ids[0, stop_at - 1] == stop_token
    assert r.tokens[0][-1] == tiny.tokenizer.decode([stop_token])


def test_static_cache_path_matches_dynamic(tiny, steered, steered_cfg):
    # The GPU path (StaticCache, fixed shapes) run on CPU through the same code.
    r = sample(tiny, steered_cfg, decode=DecodeOptions(static_cache=True))
    assert torch.equal(r.token_ids, steered.token_ids)
    assert r.responses == steered.responses
    assert r.greedy_responses == steered.greedy_responses


def test_compiled_decode_step_matches(tiny, steered_cfg):
    # The compiled decode step of the GPU path, traced by dynamo on CPU (eager backend: no codegen).
    cfg = dataclasses.replace(steered_cfg, max_new_tokens=4)
    plain = sample(tiny, cfg, decode=DecodeOptions(static_cache=True))
    opts = DecodeOptions(static_cache=True, compile_decode=True, compile_backend="eager")
    compiled = sample(tiny, cfg, decode=opts)
    assert torch.equal(compiled.token_ids, plain.token_ids)


def test_global_rng_untouched_and_threads_match_sequential(tiny, steered_cfg):
    cfgs = [dataclasses.replace(steered_cfg, seed=s) for s in (11, 12)]
    sequential = [sample(tiny, c) for c in cfgs]
    state, seed = torch.get_rng_state(), torch.initial_seed()
    results = [None, None]

    def work(i):
        results[i] = sample(tiny, cfgs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    torch.rand(3)  # the main thread uses the global RNG meanwhile; samples must not care
    for t in threads:
        t.join()
    for got, want in zip(results, sequential, strict=True):
        assert torch.equal(got.token_ids, want.token_ids)
        assert torch.equal(got.logprobs, want.logprobs)
    assert torch.initial_seed() == seed
    torch.set_rng_state(state)
    before = torch.get_rng_state()
    sample(tiny, cfgs[0])
    assert torch.equal(torch.get_rng_state(), before)


def test_model_not_mutated(tiny, steered_cfg):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    sample(tiny, steered_cfg)
    assert not tiny.model.training
    assert all(torch.equal(v, before[k]) for k, v in tiny.model.state_dict().items())


def test_progress_callback(tiny, steered_cfg):
    seen = []
    sample(
        tiny,
        dataclasses.replace(steered_cfg, max_new_tokens=3),
        progress=lambda f, m: seen.append((f, m)),
    )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions)
    assert fractions[0] >= 0.0
    assert fractions[-1] <= 1.0
    assert all(isinstance(m, str) and m for _, m in seen)


def test_features_deterministic_projection(steered, tiny, steered_cfg):
    assert steered.features.abs().sum() > 0
    assert dict(steered.meta)["feature_dim"] == steered_cfg.feature_dim


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": ()}, "at least one prompt"),
        ({"prompts": ("  ",)}, "empty"),
        ({"prompts": "hello"}, "not one string"),
        ({"prompts": ("a",), "group_size": 0}, "group_size"),
        ({"prompts": ("a",), "group_size": MAX_GROUP_SIZE + 1}, "group_size"),
        ({"prompts": ("a",), "max_new_tokens": 100_000}, "max_new_tokens"),
        ({"prompts": ("a",), "temperature": -1.0}, "temperature"),
        ({"prompts": ("a",), "top_p": 0.0}, "top_p"),
        ({"prompts": ("a",), "policy_mode": "finetuned"}, "policy_mode"),
        ({"prompts": ("a",), "policy_mode": "steered", "instruction": " "}, "instruction"),
        ({"prompts": ("x" * 5000,)}, "longer than"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)


def test_capped_says_what_changed():
    cfg = SamplingConfig(prompts=tuple("abcdefghij"), group_size=20, max_new_tokens=300)
    small, messages = capped(cfg)
    assert len(small.prompts) == 8
    assert small.group_size == CLASS_MAX_GROUP_SIZE
    assert small.max_new_tokens == 128
    assert len(messages) == 3
    same, none = capped(small)
    assert same == small
    assert none == ()


def test_config_is_hashable_cache_key():
    a = SamplingConfig(prompts=["a", "b"])
    assert a == SamplingConfig(prompts=("a", "b"))
    assert hash(a) == hash(SamplingConfig(prompts=("a", "b")))


def test_top_p_sampling_reproducible(tiny, steered_cfg):
    cfg = dataclasses.replace(steered_cfg, top_p=0.5)
    a, b = sample(tiny, cfg), sample(tiny, cfg)
    assert torch.equal(a.token_ids, b.token_ids)


def test_identical_concurrent_requests_share_one_run(tiny, steered_cfg):
    cfg = dataclasses.replace(steered_cfg, seed=31)
    follower_msgs = []
    tiny.lock.acquire()  # hold the model so both requests are in flight together
    try:
        runs_before = tiny.usage.runs
        workers, results, errors = run_in_threads(
            [
                lambda: shared_sample(tiny, cfg),
                lambda: shared_sample(tiny, cfg, progress=lambda f, m: follower_msgs.append(m)),
            ]
        )
        key = (tiny, cfg, DecodeOptions(), policy_source(cfg))
        assert wait_until(lambda: key in rollout._FLIGHTS and rollout._FLIGHTS[key].followers)
        assert in_flight() == 1
    finally:
        tiny.lock.release()
    for w in workers:
        w.join()
    assert not errors
    assert tiny.usage.runs - runs_before == 1
    assert results[0] is results[1]
    assert in_flight() == 0  # nothing kept after the run
    assert any("shared with an identical request" in m for m in follower_msgs)
    alone = sample(tiny, cfg)
    assert alone.responses == results[0].responses
    assert torch.equal(alone.token_ids, results[0].token_ids)
    assert torch.equal(alone.logprobs, results[0].logprobs)


def test_different_requests_run_separately(tiny, steered_cfg):
    cfgs = [dataclasses.replace(steered_cfg, seed=s) for s in (41, 42)]
    runs_before = tiny.usage.runs
    workers, results, errors = run_in_threads([lambda c=c: shared_sample(tiny, c) for c in cfgs])
    for w in workers:
        w.join()
    assert not errors
    assert tiny.usage.runs - runs_before == 2
    assert not torch.equal(results[0].token_ids, results[1].token_ids)


def test_shared_run_error_reaches_every_caller(tiny, steered_cfg, monkeypatch):
    cfg = dataclasses.replace(steered_cfg, seed=51)

    def broken(*args, **kwargs):
        with tiny.lock:
            raise RuntimeError("model exploded")

    monkeypatch.setattr(rollout, "sample", broken)
    tiny.lock.acquire()
    try:
        workers, _, errors = run_in_threads([lambda: shared_sample(tiny, cfg)] * 2)
        key = (tiny, cfg, DecodeOptions(), policy_source(cfg))
        assert wait_until(lambda: key in rollout._FLIGHTS and rollout._FLIGHTS[key].followers)
    finally:
        tiny.lock.release()
    for w in workers:
        w.join()
    assert len(errors) == 2
    assert in_flight() == 0


def test_sampled_batch_feeds_verls_optimal_token_baseline(steered):
    """The sampler supplies sum pi^2, so the pages offer verl's optimal token baseline."""
    scores = torch.linspace(0.0, 1.0, len(steered.responses), dtype=torch.float64)
    trace = run(
        batch_from_rollout(steered, scores), "verl", {"adv_estimator": "optimal_token_baseline"}
    )
    assert bool(torch.isfinite(trace.advantages).all())
    assert "optimal_token_baseline" in estimator_options("verl")
    assert select_rows(steered, torch.tensor([0])).sum_pi_squared.shape[0] == 1
