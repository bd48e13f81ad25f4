"""The sidebar's algorithm knobs, relayed to the page's figures in the browser.

The algorithm section of the sidebar is a fragment (``ui.knobs``): moving one of its knobs
reruns only that section on the server (a few ms), not the page. The section ends with this
relay, a tiny ``st.components.v2`` component that receives the settled knob values as data
(per estimator of the dialect: the resolved config the server would run) and dispatches them on
``window`` as an ``rv-knobs`` CustomEvent. The page's instant components (the Advantages page's
estimator heatmaps and its instant strip, the Token KL page's token rewards, the Rewards page's
bars) listen and recompute with ``pipeline.js``. A preset's G slider is a fragment of its own
with a second relay (``mount_group``): it sends the last knobs with the new G, followed where
every listener holds the preset's whole batch (``listen(group=True)``), otherwise the page is
marked whole until the pause.

What the browser does not recompute is marked: every ``stale_section`` of the page gets a
dashed outline and the line "computed for the previous knob values" while a burst of moves
lasts, and when the student pauses (``PAUSE_MS`` without a move) the relay sets its ``settle``
trigger, whose callback asks for ONE full-page rerun: the server reruns once per burst, not
per move. A page whose figures the browser does not redraw (no listener, or a config or a G
the listeners do not cover) is marked whole and reruns once after a shorter pause
(``WHOLE_PAUSE_MS``); a page that reads none of the algorithm knobs (``steady_page``) does
nothing on a move. Only a framework switch (new estimators, new defaults, on every page)
reruns the page at once. So a knob move costs the server a fragment rerun, and a burst one
page run at most.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from roll_viz.core.pipeline import ESTIMATOR_KEY, resolve_config
from roll_viz.ui.instant.payload import browser_covers, jsonable_config
from roll_viz.ui.settings import (
    estimator_options,
    estimator_overrides,
    kl_placement_overrides,
    native_config,
)

HERE = Path(__file__).parent
RELAY_NAME = "roll_viz.knob_relay"
#: ms without a knob move before the one full-page rerun (a burst of moves reruns once)
PAUSE_MS = 1500
#: the same where the browser redraws nothing: the whole page waits, so the wait is short (a
#: keyboard burst of arrow presses still reruns once)
WHOLE_PAUSE_MS = 500
#: how the page follows a knob move (``move_mode``); "full" is a full run (nothing is stale)
MODES = ("browser", "whole", "steady", "full")
#: session_state keys: the listeners the page registered on its last full run (key -> (what
#: they draw, whether they follow G): ``listen``); a full rerun asked for by a callback
#: (framework switch, the relay's settle)
LISTENERS_KEY = "_rv_relay_listeners"
FULL_KEY = "_rv_relay_full"
#: session_state key: the page said on its last full run that it reads no algorithm knob
STEADY_KEY = "_rv_relay_steady"
#: session_state key: the detail the algorithm relay last sent (a G move sends it with its G)
LAST_KEY = "_rv_relay_last"
#: the prefix of every stale section's container key (its class is st-key-<key>)
STALE_PREFIX = "rv_stale_"


def fragment_rerun() -> bool:
    """Whether this script run reruns fragments only (a knob move), not the page."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def start_full_run() -> None:
    """A full run begins (the sidebar, before the page): forget the last page's listeners."""
    st.session_state[LISTENERS_KEY] = {}
    st.session_state.pop(FULL_KEY, None)
    st.session_state.pop(STEADY_KEY, None)


def listen(key: str, draws: str = "estimators", group: bool = False) -> None:
    """Called by a page's component that redraws on the relay: knob moves stay in the browser.

    Args:
        key: the component's key.
        draws: what it recomputes from the relay's detail: "estimators" (``configs``, the
            Advantages page), "placements" (``placements``, the Token KL page) or "rewards"
            (``config``, the sidebar's own, with the session's running moments: the Rewards
            page).
        group: whether it also follows G (it holds a preset's whole batch: ``detail["G"]``).
    """
    st.session_state.setdefault(LISTENERS_KEY, {})[key] = (draws, group)


def steady_page() -> None:
    """Called by a page none of whose figures reads an algorithm knob (the framework aside).

    A knob move there reruns nothing (the sidebar's fragment aside); a G move over a preset
    still does (G picks the batch's rows), and a framework switch reruns every page.
    ``tests/ui/test_steady_pages.py`` checks each such page draws the same under other knobs.
    """
    st.session_state[STEADY_KEY] = True


def page_covered(detail: dict[str, Any]) -> bool:
    """On a fragment rerun: whether the browser redraws every listener's figures for ``detail``."""
    cover = {
        "estimators": detail["covered"],
        "placements": detail["placements_covered"],
        "rewards": detail["config_covered"],
    }
    return all(cover[d] for d, _g in st.session_state.get(LISTENERS_KEY, {}).values())


def move_mode(detail: dict[str, Any], group_move: bool = False) -> str:
    """On a fragment rerun: how the page follows this move (one of ``MODES``).

    "browser": the page's listeners redraw it, its stale sections rerun after ``PAUSE_MS``;
    "steady": nothing on the page reads it; "whole": the browser redraws nothing of it, the
    whole page is marked and reruns after ``WHOLE_PAUSE_MS``.

    Args:
        detail: the relay's detail for the new values.
        group_move: a preset's G moved (listeners must hold the whole batch to follow it).
    """
    listeners = st.session_state.get(LISTENERS_KEY, {})
    if group_move:
        return "browser" if listeners and all(g for _d, g in listeners.values()) else "whole"
    if listeners:
        return "browser" if page_covered(detail) else "whole"
    return "steady" if st.session_state.get(STEADY_KEY) else "whole"


def ask_full_run() -> None:
    """Callback: the next fragment rerun becomes one full-page rerun."""
    st.session_state[FULL_KEY] = True


def needs_full_run() -> bool:
    """On a fragment rerun: whether the page must rerun now (a framework switch, a settle)."""
    return bool(st.session_state.get(FULL_KEY))


def stale_section(name: str) -> Any:
    """A container of the page that only the server computes: marked while a burst lasts."""
    return st.container(key=STALE_PREFIX + name)


def knob_detail(
    framework: str, generic: dict[str, Any], config: dict[str, Any], group_size: Any = None
) -> dict[str, Any]:
    """What the relay sends: per estimator of the dialect, the resolved config the page runs.

    The same configs as the Advantages page's ``try_trace`` (``native_config`` with the
    estimator override), resolved by Python (the only source of defaults and validation) and
    cut to the reward-stage keys the browser reads.

    Args:
        framework: the sidebar's dialect.
        generic: the sidebar's generic knob values.
        config: the sidebar's config (``AppState.config``: what the instant strip starts from).
        group_size: the sidebar's G (a listener that holds a preset's whole batch draws the
            first G samples of every prompt; others ignore it).

    Returns:
        JSON-ready dict: framework, config (the sidebar's, resolved), estimator (the
        sidebar's), estimator_key, params (beta, gamma, lam, estimator), order (the page's
        estimators, the sidebar's first), configs (estimator -> config), server (the
        estimators ``pipeline.js`` does not compute exactly: drawn from the server's numbers),
        covered (whether the browser computes the sidebar's estimator), placements (the
        Token KL page's two KL placements, "in the reward" / "as a loss term" -> config: the
        sidebar's config with ``kl_placement_overrides`` at its beta; a placement the dialect
        lacks is left out), placements_covered (whether the browser computes all of them),
        config_covered (whether it computes the sidebar's config, given the session's running
        moments: the Rewards page's bars), G (``group_size``), seq (a hash of the rest: the JS
        dispatches only a new one).
    """
    estimators = estimator_options(framework)
    current = generic.get("estimator")
    order = sorted(estimators, key=lambda e: (e != current, estimators.index(e)))
    configs, server = {}, []
    try:
        sidebar = jsonable_config(framework, resolve_config(framework, config))
    except ValueError:
        sidebar = None
    for est in order:
        try:
            cfg = resolve_config(
                framework, native_config(framework, generic, estimator_overrides(framework, est))
            )
        except ValueError:
            server.append(est)
            continue
        configs[est] = jsonable_config(framework, cfg)
        if not browser_covers(framework, configs[est]):
            server.append(est)
    detail = {
        "framework": framework,
        "config": sidebar,
        "estimator": current if current is not None else (order[0] if order else None),
        "estimator_key": ESTIMATOR_KEY[framework],
        "params": {k: generic.get(k) for k in ("beta", "gamma", "lam", "estimator")},
        "order": order,
        "configs": configs,
        "server": server,
        # the browser redraws the page's heatmaps if it computes the sidebar's estimator; the
        # others it does not compute keep the server's last numbers, marked, until the pause
        "covered": sidebar is not None and bool(order) and order[0] not in server,
    }
    detail["config_covered"] = sidebar is not None and browser_covers(
        framework, sidebar, running=True
    )
    detail["placements"], detail["placements_covered"] = _placements(framework, generic)
    detail["placements_covered"] = detail["placements_covered"] and sidebar is not None
    return with_group(detail, group_size)


def with_group(detail: dict[str, Any], group_size: Any) -> dict[str, Any]:
    """``detail`` with G set (an int, or None) and its seq recomputed."""
    out = {k: v for k, v in detail.items() if k != "seq"}
    out["G"] = None if group_size is None else int(group_size)
    out["seq"] = hashlib.sha1(json.dumps(out, sort_keys=True).encode()).hexdigest()[:12]
    return out


#: the Token KL page's KL placements, left to right: name -> in the reward
PLACEMENTS = {"in the reward": True, "as a loss term": False}


def _placements(framework: str, generic: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The Token KL page's placement configs (its ``try_trace`` overrides) and their coverage."""
    beta = generic.get("beta")
    if beta is None:
        return {}, False  # the page falls back on the trace's beta: the server draws
    configs, covered = {}, True
    for name, in_reward in PLACEMENTS.items():
        overrides = kl_placement_overrides(framework, in_reward, float(beta))
        if overrides is None:
            continue  # the dialect cannot put the KL there (TRL: loss only)
        try:
            cfg = resolve_config(framework, native_config(framework, generic, overrides))
        except ValueError:
            covered = False
            continue
        configs[name] = jsonable_config(framework, cfg)
        covered = covered and browser_covers(framework, configs[name])
    return configs, covered and bool(configs)


def page_detail(state: Any) -> dict[str, Any]:
    """``knob_detail`` of a page's AppState: the values this full run drew with."""
    return knob_detail(state.framework, dict(state.generic), dict(state.config), state.group_size)


@functools.cache
def _relay():
    return st.components.v2.component(RELAY_NAME, js=(HERE / "relay.js").read_text())


def mount(detail: dict[str, Any], mode: str, key: str = "rv_knob_relay") -> None:
    """The relay component: on a move, ``mode`` says what the browser does (see ``move_mode``).

    Args:
        detail: ``knob_detail`` of the values drawn (dispatched in "browser" mode only).
        mode: one of ``MODES``; "full" clears the marks (the page just ran with ``detail``).
        key: the algorithm section's relay or the G slider's.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if key == "rv_knob_relay":
        st.session_state[LAST_KEY] = detail
    pause = WHOLE_PAUSE_MS if mode == "whole" else PAUSE_MS
    _relay()(
        key=key,
        data={"detail": detail, "mode": mode, "pause_ms": pause, "prefix": STALE_PREFIX},
        on_settle_change=ask_full_run,
    )


def has_last() -> bool:
    """Whether the algorithm relay has sent its knobs (a G move sends them with the new G)."""
    return bool(st.session_state.get(LAST_KEY))


def mount_group(group_size: int, mode: str) -> None:
    """The G slider's relay (a preset's G is a fragment of its own): the last knobs with G."""
    last = st.session_state.get(LAST_KEY)
    detail = with_group(last, group_size) if last and mode != "full" else {}
    mount(detail, mode if last else "full", key="rv_group_relay")
