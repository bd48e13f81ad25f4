"""The page side of the rollout door (``lm.rollout``): the engine's lines and cached checks.

``lm.rollout`` chooses which engine answers (the operator's vLLM server when configured and up,
else the in-process model) and falls back by itself; this module only says so on the page:

- ``engine(spec, bundle)``: the door's engine, a failure mid-request shown as one warning
  sentence (the request then runs in-process: nothing is lost);
- ``sidebar_line``: "answers from: vLLM at ..." (only when the operator configured an engine);
- ``self_test_line``: the Self-test page's engine-vs-in-process conformance, cached;
- ``trainer_factory``: a training run whose steps sample on the engine (None: in-process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from roll_viz.lm import rollout
from roll_viz.lm.runfile import TrainSettings
from roll_viz.lm.train import Trainer
from roll_viz.ui.resources import cached_models


def _failed(err: Exception) -> None:
    st.warning(
        f"{err} The in-process model answers this request instead.",
        icon=":material/cloud_off:",
    )


def engine(spec: str, bundle: Any) -> rollout.Engine:
    """The engine that answers for ``spec`` (a failure mid-request: a warning, then in-process)."""
    return rollout.current(spec, bundle, on_failure=_failed)


def trainer_factory(spec: str) -> Callable[[Any, TrainSettings], Trainer] | None:
    """A ``TrainRunner`` trainer factory whose steps sample on the engine (None: in-process)."""
    if rollout.remote(spec) is None:
        return None

    def make(bundle: Any, settings: TrainSettings) -> Trainer:
        trainer = Trainer(bundle, settings)
        trainer.sampler = rollout.training_sampler(spec, bundle)
        return trainer

    return make


def sidebar_line() -> None:
    """The sidebar's "answers from" line (only when the operator configured an engine)."""
    if not rollout.configured():
        return
    found = rollout.probe()
    if found.engine is not None:
        st.sidebar.caption(f"answers from: {found.engine.label} (model {rollout.served_spec()})")
    else:
        st.sidebar.caption("answers from: the in-process model (the engine is not available)")
        if found.why:
            st.sidebar.caption(found.why)


@st.cache_data(show_spinner="Checking the engine against the in-process model...", ttl=600)
def _conformance(url: str, model: str, spec: str) -> Any:
    return rollout.conformance(cached_models(spec), url, model)


def self_test_line() -> None:
    """The Self-test page's engine line (nothing when no engine is configured)."""
    if not rollout.configured():
        return
    found = rollout.probe()
    if found.engine is None:
        st.error(f"Engine: {found.why}", icon=":material/error:")
        return
    result = _conformance(found.engine.url, found.engine.model, rollout.served_spec())
    text = f"Engine ({found.engine.label}) vs in-process: {result.summary()}"
    if result.passed:
        st.success(text, icon=":material/check_circle:")
    else:
        st.error(text, icon=":material/error:")
