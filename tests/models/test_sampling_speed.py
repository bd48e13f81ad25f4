"""Fast decode loop, shared runs, queue status, time estimates, thread policy (tiny model).

The fast loop (prefill once per distinct prompt, prefetched sampling noise) must draw exactly the
tokens of the plain loop kept below (the loop as it was before: one prefill row per sample,
``torch.multinomial`` at every step), for the same seed, under 1 and 2 torch threads.
"""

import contextlib
import dataclasses
import math
import threading
import time

import pytest
import torch
from transformers import DynamicCache

from roll_viz.lm import sampling, scoring, serving
from roll_viz.lm.decode import FAST_DECODE, PLAIN_DECODE, DecodeOptions, decode_batch, next_tokens
from roll_viz.lm.request import SamplingConfig, policy_source
from roll_viz.lm.sampling import in_flight, sample, shared_sample
from roll_viz.lm.serving import estimate_seconds, queue_status, speed_measured
from roll_viz.lm.threads import configure_threads, default_threads, resolve_threads

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
@pytest.mark.parametrize(("temperature", "top_p"), [(0.9, 1.0), (1.3, 0.7)])
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


def test_sample_progress_reports_tokens_and_eta(tiny, steered_cfg):
    seen = []
    cfg = dataclasses.replace(steered_cfg, seed=21)
    sample(tiny, cfg, progress=lambda f, m: seen.append((f, m)))
    token_msgs = [m for _, m in seen if m.startswith("Sampling responses:")]
    assert token_msgs
    total = len(PROMPTS) * (cfg.group_size + 1) * cfg.max_new_tokens
    assert token_msgs[-1].startswith(f"Sampling responses: {total} / {total} tokens, about ")
    assert all(" s left" in m for m in token_msgs)
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions)


def run_in_threads(fns):
    results, errors = [None] * len(fns), []

    def work(i):
        try:
            results[i] = fns[i]()
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for w in workers:
        w.start()
    return workers, results, errors


def wait_until(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


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
        assert wait_until(lambda: key in sampling._FLIGHTS and sampling._FLIGHTS[key].followers)
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

    monkeypatch.setattr(sampling, "sample", broken)
    tiny.lock.acquire()
    try:
        workers, _, errors = run_in_threads([lambda: shared_sample(tiny, cfg)] * 2)
        key = (tiny, cfg, DecodeOptions(), policy_source(cfg))
        assert wait_until(lambda: key in sampling._FLIGHTS and sampling._FLIGHTS[key].followers)
    finally:
        tiny.lock.release()
    for w in workers:
        w.join()
    assert len(errors) == 2
    assert in_flight() == 0


def test_queue_status_while_waiting(tiny, steered_cfg):
    assert queue_status(tiny) == serving.QueueStatus(False, 0, None)
    assert queue_status(tiny).message() == ""
    messages = []
    cfg = dataclasses.replace(steered_cfg, seed=61, max_new_tokens=3)
    tiny.lock.acquire()  # "another student" holds the model
    try:
        workers, results, errors = run_in_threads(
            [lambda: sample(tiny, cfg, progress=lambda f, m: messages.append((f, m)))]
        )
        assert wait_until(lambda: queue_status(tiny).waiting == 1)
        status = queue_status(tiny)
        assert status.busy
        assert status.running is None  # held by something that is not a sampling run
        assert "1 request waiting" in status.message()
        assert wait_until(lambda: any(m.startswith("Waiting for the model") for _, m in messages))
    finally:
        tiny.lock.release()
    for w in workers:
        w.join()
    assert not errors
    assert results[0] is not None
    assert queue_status(tiny).waiting == 0
    assert not queue_status(tiny).busy
    waits = [f for f, m in messages if m.startswith("Waiting")]
    assert waits
    assert all(f == 0.0 for f in waits)


def test_running_progress_visible_to_others(tiny, steered_cfg):
    snapshots = []
    cfg = dataclasses.replace(steered_cfg, seed=71, max_new_tokens=4)

    def peek(fraction, message):
        status = queue_status(tiny)
        snapshots.append((status.busy, status.running, status.message()))

    sample(tiny, cfg, progress=peek)
    busy, running, message = snapshots[-1]
    assert busy
    assert running is not None
    assert running.tokens_done == running.tokens_total == 2 * 4 * 4
    assert math.isfinite(running.eta_seconds())
    assert running.eta_seconds() >= 0
    assert "s left" in message
    assert queue_status(tiny).running is None


def test_estimate_seconds_prior_then_measured():
    from roll_viz.lm.models import load_models

    fresh = load_models("tiny", device="cpu", dtype="float32")
    cfg = SamplingConfig(prompts=PROMPTS, group_size=3, max_new_tokens=10, seed=3)
    assert not speed_measured(fresh)
    prior = estimate_seconds(fresh, cfg)
    assert math.isfinite(prior)
    assert prior > 0
    start = time.perf_counter()
    sample(fresh, cfg)
    wall = time.perf_counter() - start
    assert speed_measured(fresh)
    measured = estimate_seconds(fresh, cfg)
    assert measured != prior
    # an estimate from this run's own rates is the right order of magnitude of its wall time
    assert wall / 20 < measured < wall * 20
    longer = dataclasses.replace(cfg, max_new_tokens=40)
    bigger = dataclasses.replace(cfg, group_size=12)
    assert estimate_seconds(fresh, longer) > measured
    assert estimate_seconds(fresh, bigger) > measured
    steered = dataclasses.replace(cfg, policy_mode="steered")
    assert estimate_seconds(fresh, steered) > measured  # a second scoring pass


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


def test_thread_policy(monkeypatch):
    assert default_threads(1) == 1
    assert default_threads(2) == 1
    assert default_threads(8) == 4
    assert default_threads(4) == 2
    monkeypatch.setenv("ROLL_VIZ_THREADS", "3")
    assert resolve_threads() == 3
    assert resolve_threads(2) == 2
    monkeypatch.setenv("ROLL_VIZ_THREADS", "auto")
    assert resolve_threads() == default_threads()
    monkeypatch.setenv("ROLL_VIZ_THREADS", "lots")
    with pytest.raises(ValueError, match="positive number"):
        resolve_threads()
    monkeypatch.delenv("ROLL_VIZ_THREADS")
    saved = torch.get_num_threads()
    try:
        assert configure_threads(1) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)


def test_shared_context_scoring_matches_full_teacher_forcing(tiny, steered):
    rows = [[1, 5, 9, 12], [1, 5, 9, 12], [1, 7, 12], [1, 7, 12], [1, 5, 9, 12]]
    token_ids = torch.tensor([[40, 41, 42], [43, 44, 0], [45, 46, 47], [48, 0, 0], [49, 50, 51]])
    mask = token_ids != 0
    with tiny.lock, torch.inference_mode():
        full = scoring.response_hidden(tiny, rows, token_ids, mask)
        shared = scoring.shared_context_hidden(tiny, rows, token_ids, mask)
    assert shared.shape == full.shape == (5, 3, 64)
    torch.testing.assert_close(shared[mask], full[mask], atol=1e-5, rtol=1e-5)


def test_calibrate_measures_rates():
    from roll_viz.lm.models import load_models

    fresh = load_models("tiny", device="cpu", dtype="float32")
    assert not speed_measured(fresh)
    seconds = sampling.calibrate(fresh)
    assert seconds > 0
    assert speed_measured(fresh)
    assert fresh.usage.speed[("step", "float32")]
