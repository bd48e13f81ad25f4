"""Fixtures for the benchmark tests: one tiny model per session."""

import pytest

from roll_viz.lm.models import load_models


@pytest.fixture(scope="session")
def tiny():
    return load_models("tiny", device="cpu", dtype="float32")
