"""Which policy the pages show: the original, the one the Update page stepped, or the trained one.

A student who took an update step (Update page) or trained (Training page) owns a LoRA adapter over
the shared base model. Choosing it in the sidebar makes every page sample the same prompts and
settings from that policy and score them against the base model as the reference, so Token KL
shows the KL that the update or the training produced (exact, over the full vocabulary).

The choice is per session and not in the URL (the adapter exists only in this browser session).
The samples are cached per session, keyed by the adapter and its step count: a new step resamples.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from roll_viz.core.records import Rollout

KEY_POLICY_VIEW = "_policy_view"  # the choice (a plain session key)
KEY_POLICY_WIDGET = "policy_view"  # the sidebar radio
ORIGINAL = "original"


def available(model: str, seed: int) -> dict[str, tuple[Any, int]]:
    """The adapted policies of this session: view name -> (LoraPolicy, steps taken)."""
    from roll_viz.ui import training, update

    out: dict[str, tuple[Any, int]] = {}
    if update.KEY_RESULT in st.session_state:
        from roll_viz.lm.update import DEFAULT_ALPHA, DEFAULT_RANK

        policy = update.session_policy(model, DEFAULT_RANK, DEFAULT_ALPHA, seed)
        if not policy.closed and policy.steps > 0:
            out["updated"] = (policy, int(policy.steps))
    trained = training.trained_policy()
    if trained is not None and trained[1] > 0:
        out["trained"] = trained
    return out


def label(view: str, steps: int) -> str:
    """How a choice reads in the sidebar."""
    if view == "updated":
        return f"updated (Update page, {steps} step{'s' if steps != 1 else ''})"
    if view == "trained":
        return f"trained (Training page, step {steps})"
    return "original (the batch as sampled)"


def suffix(view: str, policy: Any, steps: int) -> str:
    """The part of ``AppState.source`` that names the adapted policy (a new step, a new key)."""
    return f"|{view}:{policy.name}:{steps}"


@st.cache_resource(scope="session", max_entries=2, show_spinner=False)
def _sampled(spec: str, sampling: Any, name: str, steps: int, _policy: Any) -> Rollout:
    from roll_viz.lm import sampling as sampling_mod
    from roll_viz.ui.flow import cached_models

    bundle = cached_models(spec)
    with st.status(f"Sampling from the adapted policy (after {steps} steps)...") as status:
        bar = st.progress(0.0)
        rollout = sampling_mod.sample(
            bundle, sampling, progress=lambda f, _t: bar.progress(min(max(f, 0.0), 1.0)),
            source=_policy,
        )  # fmt: skip
        status.update(label="Sampled from the adapted policy", state="complete", expanded=False)
    return rollout


def policy_rollout(source: str, model: str, sampling: Any) -> Rollout:
    """The batch sampled from the adapted policy named in ``source`` (same prompts, same seed)."""
    view, name, steps = source.rsplit("|", 1)[1].split(":")
    chosen = available(model, int(getattr(sampling, "seed", 0))).get(view)
    if chosen is None or chosen[0].name != name:
        raise ValueError(
            f"the {view} policy of this session is gone (reset or session restarted); choose "
            "'original' under Policy in the sidebar"
        )
    return _sampled(model, sampling, name, int(steps), _policy=chosen[0])
