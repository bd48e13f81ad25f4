"""Which policy the pages show: the original, the one the Update page stepped, or the trained one.

A student who took an update step (Update page) or trained (Training page) owns a LoRA adapter over
the shared base model. Choosing it in the sidebar makes every page sample the same prompts and
settings from that policy and score them against the base model as the reference, so Token KL
shows the KL that the update or the training produced (exact, over the full vocabulary).

The page glue that makes an adapter registers it here (``register(view, provider)``); this module
never asks the pages, so the arrows run one way: ``resources`` <- ``adapters`` <- ``flow`` <- the
page glue. The choice is per session and not in the URL (the adapter exists only in this browser
session). The samples are cached per session, keyed by the adapter and its step count: a new step
resamples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from roll_viz.core.records import Rollout
from roll_viz.lm import rollout
from roll_viz.ui import rollout_engine
from roll_viz.ui.resources import cached_models

KEY_POLICY_VIEW = "_policy_view"  # the choice (a plain session key)
KEY_POLICY_WIDGET = "policy_view"  # the sidebar radio
KEY_PROVIDERS = "_adapter_providers"  # view -> provider, registered by the page glue
ORIGINAL = "original"
UPDATED = "updated"
TRAINED = "trained"
ORDER = (UPDATED, TRAINED)  # how the sidebar lists them

#: A provider returns (policy, steps taken) or None when its adapter is gone.
Provider = Callable[[], tuple[Any, int] | None]


def register(view: str, provider: Provider) -> None:
    """Make an adapted policy of this session available to every page.

    Args:
        view: ``UPDATED`` or ``TRAINED``.
        provider: called on every run; returns (policy, steps taken) or None.
    """
    st.session_state.setdefault(KEY_PROVIDERS, {})[view] = provider


def available() -> dict[str, tuple[Any, int]]:
    """The adapted policies of this session: view name -> (LoraPolicy, steps taken).

    A policy that is closed (its session resource released) or has taken no step is left out.
    """
    providers = st.session_state.get(KEY_PROVIDERS, {})
    out: dict[str, tuple[Any, int]] = {}
    for view in sorted(providers, key=lambda v: ORDER.index(v) if v in ORDER else len(ORDER)):
        found = providers[view]()
        if found is None:
            continue
        policy, steps = found
        if not policy.closed and steps > 0:
            out[view] = (policy, int(steps))
    return out


def label(view: str, steps: int) -> str:
    """How a choice reads in the sidebar."""
    if view == UPDATED:
        return f"updated (Update page, {steps} step{'s' if steps != 1 else ''})"
    if view == TRAINED:
        return f"trained (Training page, step {steps})"
    return "original (the batch as sampled)"


def suffix(view: str, policy: Any, steps: int) -> str:
    """The part of ``AppState.source`` that names the adapted policy (a new step, a new key)."""
    return f"|{view}:{policy.name}:{steps}"


@st.cache_resource(scope="session", max_entries=2, show_spinner=False)
def _sampled(spec: str, config: Any, name: str, steps: int, _policy: Any) -> Rollout:
    bundle = cached_models(spec)
    with st.status(f"Sampling from the adapted policy (after {steps} steps)...") as status:
        bar = st.progress(0.0)

        def progress(fraction: float, _text: str) -> None:
            bar.progress(min(max(fraction, 0.0), 1.0))

        # the adapter synced to the operator's engine when one is up (else, or on failure: here)
        request = rollout.Request(config, policy=_policy, steps=steps)
        drawn = rollout_engine.engine(spec, bundle).sample(request, progress)
        status.update(label="Sampled from the adapted policy", state="complete", expanded=False)
    return drawn


def policy_rollout(source: str, model: str, config: Any) -> Rollout:
    """The batch sampled from the adapted policy named in ``source`` (same prompts, same seed).

    Args:
        source: ``AppState.source`` with the adapter's suffix.
        model: model spec.
        config: the SamplingConfig.
    """
    view, name, steps = source.rsplit("|", 1)[1].split(":")
    chosen = available().get(view)
    if chosen is None or chosen[0].name != name:
        raise ValueError(
            f"the {view} policy of this session is gone (reset or session restarted); choose "
            "'original' under Policy in the sidebar"
        )
    return _sampled(model, config, name, int(steps), _policy=chosen[0])
