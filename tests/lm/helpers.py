"""Helpers of the model tests: the tiny model and small configs, threads, waiting for a condition.

The builders are plain functions so that tests outside ``tests/lm`` (rewards, presets) make the
same tiny rollouts as the fixtures of ``tests/lm/conftest.py``.
"""

import threading
import time

from roll_viz.lm.models import ModelBundle, load_models
from roll_viz.lm.request import SamplingConfig

PROMPTS = ("Hello there", "What is 2 + 3?")


def tiny_model() -> ModelBundle:
    """The tiny test model on the CPU in float32."""
    return load_models("tiny", device="cpu", dtype="float32")


def steered_config() -> SamplingConfig:
    """2 prompts x G = 3 x 10 tokens, steered, seed 7."""
    return SamplingConfig(
        prompts=PROMPTS,
        group_size=3,
        max_new_tokens=10,
        seed=7,
        policy_mode="steered",
        temperature=0.9,
    )


def identical_config() -> SamplingConfig:
    """The same batch with policy = reference."""
    return SamplingConfig(prompts=PROMPTS, group_size=3, max_new_tokens=10, seed=7, temperature=0.9)


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
