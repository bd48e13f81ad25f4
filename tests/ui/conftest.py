"""Fixtures shared by the page tests."""

import pytest

from roll_viz.lm import rollout
from roll_viz.lm.engine import LocalEngine
from roll_viz.ui.resources import cached_models
from tests.lm.engine_stub import Stub


@pytest.fixture
def stub_engine(monkeypatch):
    """An OpenAI-compatible stub over the tiny model, configured as the operator's engine."""
    stub = Stub(LocalEngine(cached_models("tiny")))
    monkeypatch.setenv("ROLL_VIZ_ENGINE", stub.url)
    monkeypatch.setenv("ROLL_VIZ_ENGINE_SPEC", "tiny")
    rollout.forget()
    yield stub
    stub.close()
    rollout.forget()
