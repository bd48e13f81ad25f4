"""Which engine answers: the operator's vLLM server when configured and up, else in-process.

The operator chooses (``ROLL_VIZ_ENGINE=http://127.0.0.1:8000``, ``ROLL_VIZ_ENGINE_MODEL``, and
``ROLL_VIZ_ENGINE_SPEC``: the app's model spec the server serves, ``smollm2`` by default); a
visitor never does. The engine is probed once per ``PROBE_TTL_S`` for the whole process:

- not configured: nothing changes, nothing is shown;
- configured and up: live samples (``sample``) and samples of a session's adapted policy
  (``adapted_sample``, after syncing its adapter: ``lm.engine_sync``) come from the engine; the
  sidebar says "answers from: vLLM at ...";
- configured but unusable (bad URL, nothing listening, garbage answers) or failing mid-request:
  one warning sentence on the page, and the in-process model answers (nothing is lost: the
  request is simply run in-process).

Other model specs (``tiny``, a folder) always run in-process: the server serves one model.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import streamlit as st

from roll_viz.core.records import Rollout
from roll_viz.lm import engine_check, engine_rollout, models
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import ENV_URL, HttpEngine, from_env
from roll_viz.lm.engine_sync import AdapterSync
from roll_viz.lm.runfile import TrainSettings
from roll_viz.lm.train import Trainer
from roll_viz.ui.resources import cached_models

ENV_SPEC = "ROLL_VIZ_ENGINE_SPEC"
PROBE_TTL_S = 30
_DOWN = threading.Event()  # a request failed: re-probe before the next use


def configured() -> bool:
    """Whether the operator set ``ROLL_VIZ_ENGINE``."""
    return bool((os.environ.get(ENV_URL) or "").strip())


def served_spec() -> str:
    """The app's model spec the engine serves (other specs stay in-process)."""
    return (os.environ.get(ENV_SPEC) or models.DEFAULT_MODEL).strip()


@st.cache_resource(ttl=PROBE_TTL_S, show_spinner=False)
def _probe(url: str, model: str) -> tuple[HttpEngine | None, str]:
    return from_env({ENV_URL: url, "ROLL_VIZ_ENGINE_MODEL": model})


def status() -> tuple[HttpEngine | None, str]:
    """(the engine or None, why it is not used: "" when it is, or when none is configured)."""
    if not configured():
        return None, ""
    if _DOWN.is_set():
        _probe.clear()
        _DOWN.clear()
    return _probe(os.environ.get(ENV_URL, ""), os.environ.get("ROLL_VIZ_ENGINE_MODEL", ""))


def current(spec: str | None = None) -> HttpEngine | None:
    """The engine for model ``spec`` (None: the in-process model answers)."""
    if spec is not None and spec != served_spec():
        return None
    return status()[0]


def cache_key(spec: str | None = None) -> str:
    """What distinguishes a cached sample by engine ("" for the in-process model)."""
    found = current(spec)
    return found.label if found is not None else ""


@st.cache_resource(show_spinner=False)
def _sync(url: str) -> AdapterSync:
    return AdapterSync(HttpEngine(url))


def sidebar_line() -> None:
    """The sidebar's "answers from" line (only when the operator configured an engine)."""
    if not configured():
        return
    found, why = status()
    if found is not None:
        st.sidebar.caption(f"answers from: {found.label} (model {served_spec()})")
    else:
        st.sidebar.caption("answers from: the in-process model (the engine is not available)")
        if why:
            st.sidebar.caption(why)


def _failed(err: Exception) -> None:
    _DOWN.set()
    st.warning(
        f"{err} The in-process model answers this request instead.",
        icon=":material/cloud_off:",
    )


def sample(
    bundle: Any,
    spec: str,
    cfg: Any,
    progress: Callable[[float, str], None],
    in_process: Callable[[], Rollout],
) -> Rollout:
    """A live sample from the engine (identical requests share one run), else ``in_process()``."""
    found = current(spec)
    if found is None:
        return in_process()
    try:
        return engine_rollout.shared_engine_sample(bundle, found, cfg, progress)
    except EngineError as err:
        _failed(err)
        return in_process()


def adapted_sample(
    bundle: Any,
    spec: str,
    cfg: Any,
    policy: Any,
    steps: int,
    progress: Callable[[float, str], None],
    in_process: Callable[[], Rollout],
) -> Rollout:
    """A sample of a session's adapted policy: its adapter synced to the engine, else in-process."""
    found = current(spec)
    if found is None:
        return in_process()
    try:
        name = _sync(found.url).served_name(policy, steps)
        return engine_rollout.engine_sample(bundle, found, cfg, policy, name, progress)
    except EngineError as err:
        _failed(err)
        return in_process()


def trainer_factory(spec: str) -> Callable[[Any, TrainSettings], Trainer] | None:
    """A ``TrainRunner`` trainer factory whose steps sample on the engine (None: in-process)."""
    found = current(spec)
    if found is None:
        return None
    sync = _sync(found.url)

    def make(bundle: Any, settings: TrainSettings) -> Trainer:
        trainer = Trainer(bundle, settings)
        trainer.sampler = engine_rollout.training_sampler(bundle, found, sync)
        return trainer

    return make


@st.cache_data(show_spinner="Checking the engine against the in-process model...", ttl=600)
def _conformance(url: str, model: str, spec: str) -> engine_check.Conformance:
    engine = HttpEngine(url, model)
    return engine_check.conformance(cached_models(spec), engine, _sync(url))


def self_test_line() -> None:
    """The Self-test page's engine line (nothing when no engine is configured)."""
    if not configured():
        return
    found, why = status()
    if found is None:
        st.error(f"Engine: {why}", icon=":material/error:")
        return
    result = _conformance(found.url, found.model, served_spec())
    text = f"Engine ({found.label}) vs in-process: {result.summary()}"
    if result.passed:
        st.success(text, icon=":material/check_circle:")
    else:
        st.error(text, icon=":material/error:")
