"""Fixtures for the model tests: one tiny model per session, and small sampled rollouts."""

import pytest

from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample

PROMPTS = ("Hello there", "What is 2 + 3?")


@pytest.fixture(scope="session")
def tiny():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def steered_cfg():
    return SamplingConfig(
        prompts=PROMPTS,
        group_size=3,
        max_new_tokens=10,
        seed=7,
        policy_mode="steered",
        temperature=0.9,
    )


@pytest.fixture(scope="session")
def steered(tiny, steered_cfg):
    return sample(tiny, steered_cfg)


@pytest.fixture(scope="session")
def identical(tiny):
    cfg = SamplingConfig(prompts=PROMPTS, group_size=3, max_new_tokens=10, seed=7, temperature=0.9)
    return sample(tiny, cfg)
