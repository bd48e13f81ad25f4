"""Instant hyperparameters: the reward -> advantage pipeline recomputed in the browser.

``instant_advantages(payload, params, key)`` mounts an ``st.components.v2`` component that gets
the batch once per browser tab (``instant_payload``: a few hundred KB of base64 float64; a
rerun passes only its id, see ``_mount``), and on every slider input event recomputes beta / gamma /
lambda / G / the estimator with ``pipeline.js`` (the same functions as ``roll_viz.core.pipeline``,
checked to 1e-9 by tests/js) and redraws a canvas heatmap and a per-sample table in place. On
release it reports the settled values back; this function returns them (or None before the
first release), so the page can write the URL and recompute the rest server-side with
``roll_viz.core.pipeline.run``: Python stays the source of truth. A config the browser
pipeline does not cover (``covered`` in pipeline.js) is shown as "server path" in the
component, and only the values on release count.

Why a canvas and not Plotly.js: a v2 component's JS travels inline with every rerun's delta
(there is no asset directory for an uninstalled package), so shipping plotly.min.js (4.8 MB)
would cost that on every rerun; a canvas with one pixel per token scaled without smoothing has
no cell gaps and redraws in well under a millisecond.

Page use::

    from roll_viz.ui import instant
    payload = instant.instant_payload(batch, framework, config, running)
    settled = instant.instant_advantages(payload, params=initial, key="adv_instant")
    if settled:
        config = instant.apply_params(framework, config, settled)  # then G via subset_groups
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import streamlit as st

from roll_viz.core.records import RunningMoments, Trace
from roll_viz.ui.instant import relay
from roll_viz.ui.instant.payload import (
    SLIDERS,
    apply_params,
    batch_payload,
    browser_covers,
    encode_array,
    instant_payload,
    jsonable_config,
    local_global_payload,
    max_group_size,
    subset_groups,
    subset_scores,
)

__all__ = [
    "KNOBS",
    "SLIDERS",
    "VIEWS",
    "apply_params",
    "batch_payload",
    "browser_covers",
    "component_source",
    "encode_array",
    "forget_sent",
    "instant_advantages",
    "instant_estimators",
    "instant_local_global",
    "instant_payload",
    "instant_reward_bars",
    "jsonable_config",
    "local_global_payload",
    "local_global_source",
    "max_group_size",
    "payload_id",
    "relay",
    "subset_groups",
    "subset_scores",
]

HERE = Path(__file__).parent
COMPONENT_NAME = "roll_viz.instant_advantages"
KNOBS = ("estimator", "beta", "gamma", "lam", "G")
VIEWS = ("advantages", "token_rewards", "returns", "kl")

CSS = """
.rv-instant { font-family: var(--st-font, sans-serif); color: var(--st-text-color, #222);
  font-size: 0.9rem; }
.rv-controls { display: flex; flex-wrap: wrap; gap: 0.5rem 1.25rem; align-items: center;
  margin: 0.4rem 0; }
.rv-knob { display: inline-flex; gap: 0.35rem; align-items: center; }
.rv-knob[hidden] { display: none; }
.rv-knob input[type=range] { width: 9rem; }
.rv-knob output { min-width: 2.6rem; font-variant-numeric: tabular-nums; }
.rv-status { padding: 0.3rem 0.5rem; border-radius: 0.3rem; margin-bottom: 0.3rem; }
.rv-live { background: rgba(33, 195, 84, 0.12); }
.rv-fallback { background: rgba(255, 189, 69, 0.25); font-weight: 600; }
.rv-error { background: rgba(255, 43, 43, 0.15); font-weight: 600; }
.rv-loading { background: rgba(128, 128, 128, 0.12); }
.rv-strip { display: flex; align-items: flex-start; gap: 0.3rem; }
.rv-rows { flex: 0 0 auto; font: 11px ui-monospace, monospace; text-align: right; opacity: 0.8; }
.rv-heatmap { display: block; flex: 1 1 auto; min-width: 0; width: 100%;
  image-rendering: pixelated; }
.rv-legend, .rv-tip { font-size: 0.8rem; min-height: 1.1em; opacity: 0.85; }
.rv-table-wrap { max-height: 18rem; overflow: auto; margin-top: 0.4rem; }
.rv-table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.rv-table th, .rv-table td { padding: 0.1rem 0.6rem; text-align: right;
  border-bottom: 1px solid var(--st-border-color, #ddd); }
"""


@functools.cache
def component_source(main: str = "component.js") -> str:
    """pipeline.js, bulk.js, draw.js and ``main``: one ES module, the component's default export."""
    return "\n".join((HERE / f).read_text() for f in ("pipeline.js", "bulk.js", "draw.js", main))


@functools.cache
def _component():
    return st.components.v2.component(COMPONENT_NAME, css=CSS, js=component_source())


def payload_id(payload: Mapping[str, Any]) -> str:
    """Content hash of a payload: the component rebuilds only when this changes."""
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Send the bulk once: a rerun passes the big arrays only when this browser does not have them
# ---------------------------------------------------------------------------------------------
#: st.session_state key: {component key: ids of the bulks sent to it, oldest first}
SENT_STATE = "_rv_instant_sent"
#: bulk ids remembered per component key (bulk.js keeps the last 24 of the tab, all keys)
SENT_MAX = 8
#: the payload keys that make up its bulk: the instant / the local-vs-global component
BULK_KEYS = ("batch",)
LG_BULK_KEYS = ("scores", "group_ids", "group_labels")


def forget_sent(key: str) -> None:
    """The ``missing_payload`` callback: the browser lacks a bulk it was sent, send it again.

    That happens when the tab dropped it (evicted from bulk.js's store, an update that never
    arrived, a reload that kept the session); every id of the key is forgotten, since such a
    tab may lack the others too (a resend costs bytes, a wrong "sent" a round trip).
    """
    st.session_state.get(SENT_STATE, {}).pop(key, None)


def _mount(
    component: Any,
    key: str,
    payload: Mapping[str, Any],
    bulk_keys: tuple[str, ...],
    data: Mapping[str, Any],
    on_settled_change: Any,
) -> Any:
    """Call ``component`` with ``payload`` split in two; its bulk only when not sent before.

    ``data["payload"]`` is the payload without ``bulk_keys`` (config, sliders, a few KB: always
    sent), ``data["bulk"]`` those keys, or None when this session already sent the same
    ``bulk_id`` to ``key`` (one of the last ``SENT_MAX``). bulk.js then takes the bulk from its
    store on the window: not on the component's parentElement, since Streamlit remounts the
    component on some reruns (a live Advantages page does on every sidebar move) and on
    navigating back. If it does not hold it (evicted, an update that never arrived, a reload
    that kept the session), it shows "loading" and asks for it with the ``missing_payload``
    trigger (``forget_sent``).
    Splitting matters because a sidebar move changes the config inside the payload but not the
    batch. ``data["payload_id"]`` (the whole payload's identity) still tells the JS when to
    rebuild.

    Returns:
        What the component returned (its ``ComponentResult``).
    """
    bulk = {k: payload[k] for k in bulk_keys if k in payload}
    rest = {k: v for k, v in payload.items() if k not in bulk}
    bulk_id = payload_id(bulk)
    sent = st.session_state.setdefault(SENT_STATE, {}).setdefault(key, [])
    fresh = bulk_id not in sent
    if fresh:
        sent.append(bulk_id)
        del sent[:-SENT_MAX]
    return component(
        key=key,
        data={
            "payload": rest,
            "payload_id": f"{bulk_id}-{payload_id(rest)}",
            "bulk": bulk if fresh else None,
            "bulk_id": bulk_id,
            **data,
        },
        default={"settled": None},
        on_settled_change=on_settled_change,
        on_missing_payload_change=lambda: forget_sent(key),
    )


def instant_advantages(
    payload: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    key: str = "instant_advantages",
    cell_height: int = 14,
    knobs: tuple[str, ...] = KNOBS,
    view: str = "advantages",
) -> dict[str, Any] | None:
    """Mount the instant component; the values the user settled on, or None before a release.

    Args:
        payload: ``instant_payload(batch, framework, config, running)`` (build it inside a
            cached function on big batches; it is a pure function of its inputs).
        params: initial knob values ``{"beta", "gamma", "lam", "estimator", "G"}`` (any may be
            missing: the payload's config and the full group size are used). Changing them from
            Python (URL, sidebar) moves the sliders; passing back what was settled is a no-op.
        key: Streamlit widget key (one per component on a page).
        cell_height: heatmap pixels per sample row.
        knobs: controls to show, a subset of ``KNOBS`` (e.g. ``("beta",)`` on Token KL);
            hidden knobs keep the payload's config values.
        view: first heatmap: "advantages", "token_rewards", "returns" or "kl".

    Returns:
        ``{"beta", "gamma", "lam", "estimator", "G", "config"}`` after a release (config is the
        resolved config the browser used, reward-stage keys only; rebuild it with
        ``apply_params`` to validate), else None.
    """
    data = {
        "params": dict(params or {}),
        "cell_height": int(cell_height),
        "knobs": [k for k in knobs if k in KNOBS],
        "view": view if view in VIEWS else "advantages",
    }
    result = _mount(_component(), key, payload, BULK_KEYS, data, lambda: None)
    settled = result.get("settled") if hasattr(result, "get") else None
    return dict(settled) if settled else None


# ---------------------------------------------------------------------------------------------
# Page glue: the sidebar follows what the student settled on, so every page stays one chain
# ---------------------------------------------------------------------------------------------
#: knob -> the sidebar widget key it drives
SIDEBAR_KEYS = {"beta": "beta", "gamma": "gamma", "lam": "lam", "estimator": "est", "G": "G"}


def _settled_value(key: str) -> dict[str, Any] | None:
    value = st.session_state.get(key)
    settled = getattr(value, "settled", None)
    if settled is None and hasattr(value, "get"):
        settled = value.get("settled")
    return dict(settled) if settled else None


def sync_sidebar(key: str, knobs: tuple[str, ...]) -> None:
    """Callback on release: copy the settled knobs into the sidebar (and so the URL).

    The rest of the page and every other page then recompute on the server from the same
    values (Python stays the source of truth).
    """
    settled = _settled_value(key)
    if not settled:
        return
    for knob in knobs:
        target = SIDEBAR_KEYS.get(knob)
        if target is not None and settled.get(knob) is not None:
            st.session_state[target] = settled[knob]


def instant_panel(
    payload: Mapping[str, Any],
    params: Mapping[str, Any],
    key: str,
    knobs: tuple[str, ...],
    view: str = "advantages",
) -> None:
    """The instant component whose releases drive the sidebar (``sync_sidebar``)."""
    data = {
        "params": dict(params or {}),
        "cell_height": 14,  # room for a row label (p0/s2) beside each row
        "knobs": [k for k in knobs if k in KNOBS],
        "view": view if view in VIEWS else "advantages",
    }
    _mount(_component(), key, payload, BULK_KEYS, data, lambda: sync_sidebar(key, knobs))


# ---------------------------------------------------------------------------------------------
# The Advantages page's estimator heatmaps: redrawn in the browser on every sidebar knob move
# ---------------------------------------------------------------------------------------------
EST_COMPONENT_NAME = "roll_viz.instant_estimators"
EST_CSS = (
    CSS
    + """
.rv-est { margin: 0.2rem 0 0.6rem; }
.rv-est-title { font-weight: 600; margin-bottom: 0.15rem; }
.rv-est-stale { outline: 2px dashed #8a5a00; outline-offset: 3px; }
.rv-est-grid { display: grid; grid-template-columns: 1fr 1fr; gap: 0 2rem; }
.rv-stale-note { background: #fff3cd; color: #3d2c00; font-weight: 600; font-size: 0.85rem;
  padding: 0.15rem 0.5rem; border-radius: 0.25rem; margin-bottom: 0.2rem; }
"""
)


@functools.cache
def _est_component():
    return st.components.v2.component(
        EST_COMPONENT_NAME, css=EST_CSS, js=component_source("estimators.js")
    )


def instant_estimators(
    payload: Mapping[str, Any],
    tokens: list[list[str]],
    detail: Mapping[str, Any],
    server: Mapping[str, Any],
    key: str,
    group_size: int | None = None,
    on_rows: list[str] | tuple[str, ...] = (),
) -> None:
    """One canvas heatmap per estimator, computed in the browser; redrawn on each knob move.

    The sidebar's relay (``relay.knob_detail``) sends the configs on every knob move; this
    component listens (``relay.listen``), so those moves rerun only the sidebar's fragment.

    Args:
        payload: ``instant_payload`` of the page's batch (its critic values included).
        tokens: (B, T) token texts for the hover tip (untrusted: rendered as text only).
        detail: ``relay.knob_detail`` of the sidebar's values (this full run's).
        server: for each estimator of ``detail["server"]`` (the ones pipeline.js does not
            compute exactly): its (B, T) advantages from the server, or its error message.
        key: Streamlit widget key.
        group_size: the page's G, where ``payload`` is a preset's whole batch
            (``payload["follows_G"]``, ``flow.preset_payload``): the browser draws the first G
            samples of every prompt, and follows the sidebar's G moves (``relay.listen``).
        on_rows: estimators whose numbers hold on this G's rows only (they read the probe
            critic fitted on them): in ``server`` too, drawn from it after a G move.
    """
    sent = {
        est: {"error": str(value)}
        if isinstance(value, str)
        else {"advantages": encode_array(value)}
        for est, value in server.items()
    }
    follows = bool(payload.get("follows_G")) and group_size is not None
    data = {
        "detail": dict(detail),
        "server": sent,
        "cell_height": 14,
        "G": group_size,
        "on_rows": list(on_rows),
    }
    body = {**payload, "tokens": tokens}
    _mount(_est_component(), key, body, (*BULK_KEYS, "tokens"), data, lambda: None)
    relay.listen(key, group=follows)


#: the Token KL page's token-reward heatmaps: the same module, its "placements" kind
TR_COMPONENT_NAME = "roll_viz.instant_token_rewards"


@functools.cache
def _tr_component():
    return st.components.v2.component(
        TR_COMPONENT_NAME, css=EST_CSS, js=component_source("estimators.js")
    )


def instant_token_rewards(
    payload: Mapping[str, Any],
    tokens: list[list[str]],
    detail: Mapping[str, Any],
    key: str,
) -> None:
    """The token rewards of each KL placement, computed in the browser; redrawn on knob moves.

    Side by side ("in the reward" left, "as a loss term" right) on one shared scale, from
    ``detail["placements"]`` (``relay.knob_detail``); this component listens
    (``relay.listen``), so a sidebar knob move reruns only the sidebar's fragment.

    Args:
        payload: ``instant_payload`` of the page's batch.
        tokens: (B, T) token texts for the hover tip (untrusted: rendered as text only).
        detail: ``relay.knob_detail`` of the sidebar's values (this full run's).
        key: Streamlit widget key.
    """
    data = {
        "detail": dict(detail),
        "server": {},
        "cell_height": 14,
        "kind": "placements",
        "columns": list(relay.PLACEMENTS),
    }
    body = {**payload, "tokens": tokens}
    _mount(_tr_component(), key, body, (*BULK_KEYS, "tokens"), data, lambda: None)
    relay.listen(key, draws="placements")


# ---------------------------------------------------------------------------------------------
# The Rewards page's bars: raw vs processed reward, redrawn in the browser on each knob move
# ---------------------------------------------------------------------------------------------
RW_COMPONENT_NAME = "roll_viz.instant_reward_bars"
RW_CSS = (
    CSS
    + """
/* em, not rem: the text follows the page's size (21 px in presentation mode) */
.rv-rw { font-size: 1em; }
.rv-rw .rv-tip, .rv-rw .rv-legend { font-size: 0.85em; }
.rv-rw-title { font-weight: 600; font-size: 1.05em; margin-bottom: 0.3em; }
.rv-rw-metrics { display: flex; flex-wrap: wrap; gap: 0.3em 2.5em; margin-bottom: 0.3em; }
.rv-rw-metric-label { font-size: 0.85em; }
.rv-rw-metric-value { font-size: 1.6em; font-variant-numeric: tabular-nums; }
.rv-rw-legend { display: flex; gap: 0.3em 1.5em; font-size: 0.9em; }
.rv-rw-key { display: inline-flex; align-items: center; gap: 0.35em; }
.rv-rw-swatch { display: inline-block; width: 0.9em; height: 0.9em; }
.rv-rw-svg { display: block; max-width: 100%; height: auto; overflow: visible; }
.rv-rw-svg text { fill: currentColor; font-size: 0.85em; font-variant-numeric: tabular-nums; }
.rv-rw-svg .rv-rw-axis { font-size: 0.9em; }
.rv-rw-grid { stroke: currentColor; stroke-opacity: 0.12; }
.rv-rw-sep { stroke: currentColor; stroke-opacity: 0.25; stroke-dasharray: 2 3; }
.rv-rw-zero { stroke: currentColor; stroke-opacity: 0.75; stroke-width: 1.2; }
.rv-rw-foot { display: flex; flex-wrap: wrap; align-items: center; gap: 0.3em 1em;
  justify-content: space-between; }
.rv-rw-save { font: inherit; font-size: 0.85em; padding: 0.2em 0.6em; cursor: pointer;
  border: 1px solid currentColor; border-radius: 0.3em; background: transparent;
  color: inherit; }
"""
)


@functools.cache
def _rw_component():
    return st.components.v2.component(
        RW_COMPONENT_NAME, css=RW_CSS, js=component_source("rewards.js")
    )


def instant_reward_bars(
    payload: Mapping[str, Any],
    detail: Mapping[str, Any],
    running: RunningMoments,
    key: str,
    server: Trace | None = None,
) -> None:
    """Raw vs processed reward per sample, the clip fraction and the mean, drawn in the browser.

    pipeline.js runs the sidebar's resolved config (``detail["config"]``) on the payload's
    batch, on this full run and again on every knob move the sidebar's relay sends; this
    component listens (``relay.listen``, kind "rewards"), so those moves rerun only the
    sidebar's fragment. It does not follow G: the page's group statistics and reward-stage
    sections are drawn from the batch's rows by the server, so after a G move the page is
    marked whole and reruns after the relay's short pause (``relay.move_mode``).

    Args:
        payload: ``instant_payload`` of the page's batch.
        detail: ``relay.knob_detail`` of the sidebar's values (this full run's).
        running: the session's running moments before this batch (ROLL's "running"
            normalisation updates them with the batch first, in Python and in pipeline.js).
        key: Streamlit widget key.
        server: the server's Trace, drawn instead where the browser does not compute the
            sidebar's config (``detail["config_covered"]`` false); None otherwise.
    """
    data = {
        "detail": dict(detail),
        "running": {"mean": running.mean, "var": running.var, "count": running.count},
        "server": None
        if server is None
        else {"rewards": server.rewards.tolist(), "clip_frac": float(server.clip_frac)},
    }
    _mount(_rw_component(), key, payload, BULK_KEYS, data, lambda: None)
    relay.listen(key, draws="rewards")


# ---------------------------------------------------------------------------------------------
# Local vs global: a second component (local_global.js), same mechanism
# ---------------------------------------------------------------------------------------------
LG_COMPONENT_NAME = "roll_viz.instant_local_global"
#: the local-vs-global knobs: G (drives the sidebar's G), std ("group" | "none"), eps
LG_KNOBS = ("G", "std", "eps")

LG_CSS = (
    CSS
    + """
.rv-lg { font-family: var(--st-font, sans-serif); color: var(--st-text-color, #222);
  font-size: 0.9rem; }
.rv-lg-summary { font-size: 0.85rem; margin: 0.2rem 0 0.4rem; }
.rv-lg-plots { display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; }
.rv-lg-plot { flex: 2 1 18rem; min-width: 16rem; }
.rv-lg-plot-main { flex: 3 1 20rem; max-width: 30rem; }
.rv-lg-canvas { display: block; width: 100%; }
.rv-lg-legend { display: flex; flex-wrap: wrap; gap: 0.2rem 1rem; font-size: 0.8rem;
  margin-top: 0.3rem; }
.rv-lg-key { display: inline-flex; align-items: center; gap: 0.3rem; }
.rv-lg-swatch { display: inline-block; width: 14px; height: 14px; }
.rv-lg-tables { display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; align-items: flex-start; }
.rv-lg-tables .rv-table td:nth-child(2) { text-align: left; max-width: 16rem;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.rv-lg-tables table[data-testid=rv-lg-groups] td:first-child { text-align: left;
  max-width: 14rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
"""
)


@functools.cache
def local_global_source() -> str:
    """pipeline.js, bulk.js, local_global.js: one ES module, the component's default export."""
    return "\n".join((HERE / f).read_text() for f in ("pipeline.js", "bulk.js", "local_global.js"))


@functools.cache
def _lg_component():
    return st.components.v2.component(LG_COMPONENT_NAME, css=LG_CSS, js=local_global_source())


def instant_local_global(
    payload: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    key: str = "instant_local_global",
    sync: tuple[str, ...] = ("G",),
    plot_height: int = 360,
) -> dict[str, Any] | None:
    """Mount the local-vs-global component; the values the user settled on, or None.

    Every slider input recomputes, in the browser, each sample's local advantage
    ``(r - group mean) / (group std + eps)`` (or ``r - group mean`` with std "none", Dr.GRPO)
    and global advantage ``(r - batch mean) / (batch std + eps)`` on the first G samples of
    every prompt, exactly as ``roll_viz.analysis.local_global.local_vs_global`` (tests/js), and
    redraws the scatter, the group std bars and the tables in place.

    Args:
        payload: ``local_global_payload(scores, group_ids, prompts)``.
        params: initial ``{"G", "std", "eps"}`` (missing: full group, "group", ROLL's 1e-6).
            Changing them from Python moves the controls; passing back what was settled is a
            no-op.
        key: Streamlit widget key (one per component on a page).
        sync: knobs whose release is copied into the sidebar (``sync_sidebar``; only "G" has a
            sidebar widget). Empty: nothing is synced, the values are only returned.
        plot_height: CSS pixels of the two plots.

    Returns:
        ``{"G", "std", "eps"}`` after a release, else None.
    """
    data = {
        "params": {k: v for k, v in dict(params or {}).items() if k in LG_KNOBS},
        "plot_height": int(plot_height),
    }
    knobs = tuple(k for k in sync if k in SIDEBAR_KEYS)
    on_settled = (lambda: sync_sidebar(key, knobs)) if knobs else (lambda: None)
    result = _mount(_lg_component(), key, payload, LG_BULK_KEYS, data, on_settled)
    settled = result.get("settled") if hasattr(result, "get") else None
    return dict(settled) if settled else None
