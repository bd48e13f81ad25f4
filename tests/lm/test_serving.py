"""One model, many users (lm.serving): progress, the queue, time estimates (tiny model)."""

import dataclasses
import math
import time

from roll_viz.lm import sampling, serving
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.lm.serving import estimate_seconds, queue_status, speed_measured
from tests.lm.helpers import run_in_threads, wait_until

PROMPTS = ("Hello there", "What is 2 + 3?")


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


def test_calibrate_measures_rates():
    fresh = load_models("tiny", device="cpu", dtype="float32")
    assert not speed_measured(fresh)
    seconds = sampling.calibrate(fresh)
    assert seconds > 0
    assert speed_measured(fresh)
    assert fresh.usage.speed[("step", "float32")]
