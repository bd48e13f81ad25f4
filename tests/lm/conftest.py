"""Fixtures for the model tests: one tiny model per session, and small sampled rollouts."""

import pytest

from roll_viz.lm.sampling import sample
from tests.lm.helpers import identical_config, steered_config, tiny_model


@pytest.fixture(scope="session")
def tiny():
    return tiny_model()


@pytest.fixture(scope="session")
def steered_cfg():
    return steered_config()


@pytest.fixture(scope="session")
def steered(tiny, steered_cfg):
    return sample(tiny, steered_cfg)


@pytest.fixture(scope="session")
def identical(tiny):
    return sample(tiny, identical_config())
