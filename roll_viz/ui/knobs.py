"""The sidebar's algorithm section: the dialect and its knobs, drawn from one table.

Every generic control (estimator, beta, KL estimator, KL in the reward, gamma, lambda, clip,
whiten) is a row of ``KNOBS``; the dialect says what each one is called in its own config, its
choices and its help, and which it lacks (then the control is disabled and says so).

The section is a fragment: a knob move reruns only it (a few ms of server CPU), and its last
element, the relay (``instant.relay``), hands the new values to the page's figures that the
browser recomputes; the page itself reruns once when the student pauses (a page the browser
cannot redraw is marked whole until then). Only a framework switch reruns the page at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.ui.instant import relay
from roll_viz.ui.settings import generic_defaults, native_config, offered
from roll_viz.ui.state import (
    GENERIC_KEYS,
    KEY_BETA,
    KEY_CLIP,
    KEY_ESTIMATOR,
    KEY_FRAMEWORK,
    KEY_G,
    KEY_GAMMA,
    KEY_KL_ESTIMATOR,
    KEY_KL_IN_REWARD,
    KEY_LAM,
    KEY_NORM,
    KEY_WHITEN,
    framework_label,
    framework_names,
)
from roll_viz.ui.url import bound


def _on_framework_change() -> None:
    """Load the new dialect's shipped defaults into the generic controls."""
    relay.ask_full_run()  # new estimators, new defaults: the page reruns
    framework = st.session_state.get(KEY_FRAMEWORK, dialects.DEFAULT_FRAMEWORK)
    for generic, value in generic_defaults(framework).items():
        key = GENERIC_KEYS.get(generic)
        if key is not None and value is not None:
            st.session_state[key] = value


@dataclass(frozen=True)
class Knob:
    """One generic algorithm control of the sidebar.

    Attributes:
        generic: generic name (as in ``pipeline.ALIASES``); the dialect maps it to its own key.
        key: widget key and URL parameter.
        label: what the control says (the dialect's own key is added in brackets).
        widget: "select" (the dialect's choices; not drawn when it has none), "slider",
            "number" or "toggle" (disabled where the dialect lacks the setting).
        low, high, step: range of a slider or number input.
        fallback: value when the dialect's default is None.
        fmt: number format of a slider ("%.3f").
    """

    generic: str
    key: str
    label: str
    widget: str
    low: float = 0.0
    high: float = 1.0
    step: float = 0.01
    fallback: float = 0.0
    fmt: str | None = None


#: The algorithm section, top to bottom.
KNOBS = (
    Knob("estimator", KEY_ESTIMATOR, "Advantage estimator", "select"),
    Knob("beta", KEY_BETA, "KL coefficient beta", "slider", step=0.001, fmt="%.3f"),
    Knob("kl_estimator", KEY_KL_ESTIMATOR, "KL estimator", "select"),
    Knob("kl_in_reward", KEY_KL_IN_REWARD, "KL in the reward", "toggle"),
    Knob("gamma", KEY_GAMMA, "Discount gamma", "slider", fallback=1.0),
    Knob("lam", KEY_LAM, "GAE lambda", "slider", fallback=1.0),
    Knob("clip", KEY_CLIP, "Reward clip (0 = off)", "number", high=100.0, step=0.5),
    Knob("whiten", KEY_WHITEN, "Whiten advantages", "toggle"),
)


def _knob(knob: Knob, framework: str, default: Any) -> tuple[bool, Any]:
    """Draw one knob for ``framework`` (inside ``with st.sidebar``). Returns (drawn, value)."""
    sb = st
    key = pipeline.ALIASES[framework].get(knob.generic)
    if key is None:
        label = f"{knob.label} (not in {framework})"
        help_text = f"{framework_label(framework)} has no such setting."
    else:
        label = f"{knob.label} ({key})"
        help_text = pipeline.HELP.get(framework, {}).get(key, "")
    if knob.widget == "select":
        options = list(pipeline.CHOICES.get(framework, {}).get(key, ())) if key else []
        # estimators that read inputs the app does not produce stay in the calculator
        options = [o for o in options if offered(framework, o)]
        if not options:
            return False, None
        index = options.index(default) if default in options else 0
        return True, bound(sb.selectbox, label, options, index=index, key=knob.key, help=help_text)
    common = {"key": knob.key, "disabled": key is None, "help": help_text}
    if knob.widget == "toggle":
        return True, bound(sb.toggle, label, value=bool(default), **common)
    value = float(knob.fallback if default is None else default)
    widget = sb.slider if knob.widget == "slider" else sb.number_input
    if knob.fmt:
        common["format"] = knob.fmt
    return True, bound(widget, label, knob.low, knob.high, value=value, step=knob.step, **common)


def algorithm_section(group_size: int, messages: list[str]) -> tuple[str, dict, dict]:
    """The sidebar's algorithm section: dialect and generic knobs (a fragment, see above).

    Args:
        group_size: G of the batch (G = 1 gets the dialect's note on groups of one).
        messages: notes for the page; appended to.

    Returns:
        (framework, generic widget values, the dialect's config).
    """
    relay.start_full_run()
    with st.sidebar:
        framework, generic, config = _algorithm_fragment()
    if group_size < 2:
        messages.append(
            f"G = 1: a group of one has no spread. {dialects.get(framework).SINGLETON_NOTE}"
        )
    return framework, generic, config


@st.fragment
def _algorithm_fragment() -> tuple[str, dict, dict]:
    """The knobs; on a knob move (a fragment rerun) the relay, on a framework switch the page."""
    moved = relay.fragment_rerun()
    if moved and relay.needs_full_run():
        st.rerun(scope="app")
    sb = st
    sb.markdown("### Algorithm")
    framework = bound(
        sb.selectbox,
        "Framework dialect (roll = default)",
        list(framework_names()),
        key=KEY_FRAMEWORK,
        on_change=_on_framework_change,
        help="Whose conventions the pipeline follows. Switching loads that framework's shipped "
        "defaults into the controls below.",
    )
    dialect = dialects.get(framework)
    defaults = generic_defaults(framework)
    generic: dict[str, Any] = {}
    for knob in KNOBS:
        drawn, value = _knob(knob, framework, defaults.get(knob.generic))
        if drawn:
            generic[knob.generic] = value
    if dialect.HAS_REWARD_NORM:
        # the dialect's reward normalization is a stage of the chain: one control for every page
        generic["norm"] = bound(
            sb.segmented_control,
            "Reward normalization (norm_mean_type / norm_std_type)",
            ["none", "group", "batch", "running"],
            default="none",
            required=True,
            key=KEY_NORM,
            help="ROLL normalizes the response rewards before the KL and the estimator: subtract "
            "the mean and divide by the std of the prompt's group, the whole batch, or running "
            "statistics over many batches. ROLL's grpo forces group.",
        )
    config = native_config(framework, generic)  # the normalisation included
    detail = relay.knob_detail(framework, generic, config, st.session_state.get(KEY_G))
    relay.mount(detail, relay.move_mode(detail) if moved else "full")
    return framework, generic, config


def preset_group(draw: Callable[[], int]) -> int:
    """A preset's G slider (``draw`` draws it, in the sidebar): a fragment with its own relay.

    Over a committed preset G only picks rows of the batch: where every figure of the page that
    listens holds the whole batch a move stays in the browser and the page reruns once after
    the pause, as for the algorithm knobs; otherwise the page is marked whole until then.
    """
    with st.sidebar:
        return _group_fragment(draw)


@st.fragment
def _group_fragment(draw: Callable[[], int]) -> int:
    moved = relay.fragment_rerun()
    if moved and (relay.needs_full_run() or not relay.has_last()):
        st.rerun(scope="app")  # a settle, or no knobs sent yet to carry G
    value = draw()
    relay.mount_group(value, relay.move_mode({}, group_move=True) if moved else "full")
    return value
