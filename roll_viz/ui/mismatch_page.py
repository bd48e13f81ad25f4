"""Streamlit glue of the "Sampler != trainer" page: the mu source, the thresholds, the views.

mu comes from ``data.behaviour_presets`` for a preset (committed, instant, no model) or from
``lm.rollout.behaviour_of`` on the shared model when live mode is on (cached per batch and
source). Every knob is bound to the URL (``url.bound``), so a shared link keeps the source and
the thresholds; numbers are checked on the server first (``fields.check_fields``), and a
threshold a framework refuses (verl's ``rollout_rs_threshold`` syntax, an inverted [low, high])
gets a message under its field while the lab uses that framework's default. Model output
reaches the page only as escaped hover text and plain dataframe cells.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd
import streamlit as st
import torch

from roll_viz.analysis import mismatch
from roll_viz.core.pipeline.dialects import corrections as fc
from roll_viz.core.records import Rollout
from roll_viz.data import behaviour_presets as stored
from roll_viz.lm import rollout as behaviour
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.state import AppState
from roll_viz.ui.url import bound
from roll_viz.views import text

#: the sources of mu the page offers: the model's numeric paths, and a rollout engine's own
MU_SOURCES = (*behaviour.SOURCES, behaviour.ENGINE_SOURCE)

KEY_SOURCE = "mm_src"
KEY_TOP_P = "mm_p"
KEY_TOP_K = "mm_k"
KEY_STALE = "mm_s"
KEY_TIS = "mm_tis"
KEY_ICE_LO = "mm_ice_lo"
KEY_ICE_HI = "mm_ice_hi"
KEY_RS = "mm_rs"
KEY_RS_THR = "mm_rs_thr"
KEY_TRL_MODE = "mm_trl_mode"
KEY_TRL_MIN = "mm_trl_min"
KEY_TRL_MAX = "mm_trl_max"
KEY_ORL_LEVEL = "mm_orl_level"
KEY_ORL_MODE = "mm_orl_mode"
KEY_ORL_LO = "mm_orl_lo"
KEY_ORL_HI = "mm_orl_hi"
KEY_ROLL_UB = "mm_roll_ub"
KEY_ROLL_LO = "mm_roll_lo"
KEY_ROLL_HI = "mm_roll_hi"
KEY_PICK = "mm_pick"

STALENESS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)
DEFAULTS = mismatch.Settings()

FIELDS: dict[str, Field] = {
    KEY_SOURCE: Field("bf16", options=MU_SOURCES),
    KEY_TOP_P: Field(0.9, options=stored.TOP_P_OPTIONS),
    KEY_TOP_K: Field(20, options=stored.TOP_K_OPTIONS),
    KEY_STALE: Field(0.0, options=STALENESS),
    KEY_TIS: Field(2.0, 1.0, 100.0),
    KEY_ICE_LO: Field(0.5, 0.0, 100.0),
    KEY_ICE_HI: Field(5.0, 0.01, 100.0),
    KEY_TRL_MODE: Field("sequence_mask", options=fc.TRL_MODES),
    KEY_TRL_MIN: Field(0.0, 0.0, 100.0),
    KEY_TRL_MAX: Field(3.0, 0.0, 100.0),
    KEY_ORL_LEVEL: Field("token", options=("token", "seq")),
    KEY_ORL_MODE: Field("mask", options=("mask", "clip")),
    KEY_ORL_LO: Field(0.5, 0.0, 100.0),
    KEY_ORL_HI: Field(5.0, 0.0, 100.0),
    KEY_ROLL_UB: Field(1.2, 0.01, 100.0),
    KEY_ROLL_LO: Field(0.8, 0.0, 100.0),
    KEY_ROLL_HI: Field(1.2, 0.0, 100.0),
    KEY_RS: Field("seq_sum_k1", options=fc.VERL_RS_OPTIONS),
}
#: text fields: checked by the framework's own parser (``settings_and_errors``), at most 40 chars
TEXT_FIELDS = {KEY_RS_THR: DEFAULTS.rs_threshold}


def _notice(lines: list[str]) -> None:
    if lines:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in lines), icon=":material/info:")


def _field_error(message: str) -> None:
    """A refused threshold: one line right under its field (escaped, plain text)."""
    st.error(text.md_escape(message), icon=":material/error:")


# ---------------------------------------------------------------------------- the mu source


def source_controls() -> tuple[str, float | int | None]:
    """The mu source and its top-p / top-k value (URL-bound).

    Every field of the page is checked on the server first (``fields.check_fields``): a value
    out of range, from a link or a crafted message, is named above and replaced by its default.
    """
    _notice(check_fields(FIELDS))
    c1, c2 = st.columns([2, 1])
    with c1:
        source = bound(
            st.selectbox,
            "Behaviour policy mu (who sampled the tokens)",
            list(MU_SOURCES),
            index=0,
            key=KEY_SOURCE,
            help="The trainer's recompute pi_old is always the float32 model over the full "
            "vocabulary; mu is the same tokens under another numeric path. "
            + "; ".join(f"{k}: {v}" for k, v in behaviour.SOURCE_LABELS.items()),
        )
        st.caption(behaviour.SOURCE_LABELS.get(str(source), ""))
    value = None
    with c2:
        if source == "top_p":
            value = bound(st.selectbox, "top_p", list(stored.TOP_P_OPTIONS), index=1, key=KEY_TOP_P)
        elif source == "top_k":
            value = bound(st.selectbox, "top_k", list(stored.TOP_K_OPTIONS), index=1, key=KEY_TOP_K)
    return str(source), value


@st.cache_data(show_spinner=False, max_entries=48)
def _stored(preset: str, source: str, value: Any) -> behaviour.Behaviour | None:
    return stored.load_behaviour(preset, source, value)


@st.cache_data(show_spinner=False, max_entries=16)
def _engine(_rollout: Rollout, key: tuple) -> behaviour.Behaviour:
    model, sampling = key[0], key[1]
    return behaviour.engine_behaviour_of(ensure_model(model), sampling, _rollout)


def _engine_behaviour(state: AppState, rollout: Rollout) -> behaviour.Behaviour | None:
    """The rollout engine's mu for this batch (None with a message when no engine drew it)."""
    if rollout.meta.engine is None:
        st.info(
            "This batch was not drawn by a rollout engine: the operator starts one with "
            "`make engine` and ROLL_VIZ_ENGINE (README, 'Rollout engine'); then the live batch's "
            "own engine log-probs are mu here.",
            icon=":material/info:",
        )
        return None
    with st.spinner("Recomputing the engine's tokens on the float32 trainer"):
        return _engine(rollout, (state.model, state.sampling))


@st.cache_data(show_spinner=False, max_entries=16)
def _live(_rollout: Rollout, key: tuple, source: str, value: Any) -> behaviour.Behaviour:
    model, sampling = key[0], key[1]
    kwargs: dict[str, Any] = {}
    if source == "top_p":
        kwargs["top_p"] = float(value)
    if source == "top_k":
        kwargs["top_k"] = int(value)
    return behaviour.behaviour_of(ensure_model(model), sampling, _rollout, source, **kwargs)


def _rows_of(full_groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """Rows a preset keeps at a smaller G: the first G of each prompt (``subsample_rollout``)."""
    seen: dict[int, int] = {}
    keep = []
    for b, gid in enumerate(full_groups.tolist()):
        if seen.get(gid, 0) < group_size:
            keep.append(b)
        seen[gid] = seen.get(gid, 0) + 1
    return torch.tensor(keep, dtype=torch.long)


def behaviour_for(
    state: AppState, rollout: Rollout, source: str, value: Any
) -> behaviour.Behaviour | None:
    """pi_old and mu of the batch the page shows (None with a message when there are none)."""
    if state.adapted:
        st.info(
            "The pages show this session's updated (LoRA) policy; the mismatch lab scores the "
            "base model's batch. Switch 'Use the updated policy' off in the sidebar.",
            icon=":material/info:",
        )
        return None
    if source == behaviour.ENGINE_SOURCE:
        if not state.live:
            st.info(
                "A rollout engine's mu exists only for a live batch it drew: switch on 'Sample "
                "live with the model' (with an engine configured by the operator).",
                icon=":material/info:",
            )
            return None
        return _engine_behaviour(state, rollout)
    if state.live:
        if state.decode == "int8" and source != "int8":
            st.caption(
                "This batch was drawn by the int8 fast decode ('Fast sampling' in the sidebar): "
                "its sampler's own mu is the int8 source."
            )
        try:
            with st.spinner(f"Scoring the batch under {behaviour.SOURCE_LABELS[source]}"):
                return _live(rollout, (state.model, state.sampling, state.decode), source, value)
        except ValueError as err:
            st.warning(f"This source is not available here: {text.md_escape(err)}")
            return None
    if not state.source.startswith("preset:"):
        st.info("The mismatch lab runs on a preset or a live batch.", icon=":material/info:")
        return None
    got = _stored(state.preset, source, value)
    if got is None:
        st.warning(
            f"No stored behaviour log-probs for the preset {text.md_escape(state.preset)}; "
            "switch on 'Sample live with the model' to score it now."
        )
        return None
    if got.old.shape[0] != rollout.token_ids.shape[0]:  # the preset at a smaller G
        _, _, full = stored.load_preset(state.preset)
        rows = _rows_of(full.group_ids, state.group_size)
        got = replace(got, old=got.old[rows], mu=got.mu[rows], mask=got.mask[rows])
    return got


# ------------------------------------------------------------------------------- thresholds


def _raw(key: str) -> Any:
    """A knob's value before its widget is drawn: session state, else the link's, else default."""
    value = st.session_state.get(key)
    if value is not None:
        return str(value)[:40] if key in TEXT_FIELDS else value
    raw = st.query_params.get(key)
    if key in TEXT_FIELDS:
        return TEXT_FIELDS[key] if raw is None else str(raw)[:40]
    spec = FIELDS[key]
    if raw is not None:
        parsed = spec.parse(str(raw))
        if parsed is not None and spec.accepts(parsed):
            return parsed
    return spec.default


def settings_and_errors() -> tuple[mismatch.Settings, dict[str, str]]:
    """The Settings the lab runs with, and a message per refused field (key -> message).

    A refused pair or rule falls back to its framework's default, named in the message.
    """
    s = DEFAULTS
    errors: dict[str, str] = {}
    tis = float(_raw(KEY_TIS))
    lo, hi = float(_raw(KEY_ICE_LO)), float(_raw(KEY_ICE_HI))
    icepop = (lo, hi)
    try:
        fc.parse_verl_is_threshold(f"{lo:g}_{hi:g}")
    except ValueError as err:
        errors[KEY_ICE_HI] = f"IcePop {lo:g}_{hi:g}: {err} Using {s.icepop[0]:g}_{s.icepop[1]:g}."
        icepop = s.icepop
    rs, rs_thr = str(_raw(KEY_RS)), str(_raw(KEY_RS_THR))
    try:
        fc.parse_verl_rs_threshold([rs], rs_thr)
    except ValueError as err:
        fallback = "0.5_2.0" if rs.endswith("k1") else "0.01"
        errors[KEY_RS_THR] = f"{err} Using {fallback}."
        rs_thr = fallback
    tmin, tmax = float(_raw(KEY_TRL_MIN)), float(_raw(KEY_TRL_MAX))
    trl_min, trl_max = (tmin or None), (tmax or None)
    if trl_min is not None and trl_max is not None and trl_min > trl_max:
        errors[KEY_TRL_MAX] = (
            f"clip_min {tmin:g} > clip_max {tmax:g}: nothing would survive. Using None, 3."
        )
        trl_min, trl_max = s.trl_min, s.trl_max
    level, mode = str(_raw(KEY_ORL_LEVEL)), str(_raw(KEY_ORL_MODE))
    if mode == "clip" and level != "token":
        errors[KEY_ORL_MODE] = (
            "is_correction_mode: clip requires is_correction_level token (OpenRLHF refuses "
            "it). Using mask."
        )
        mode = "mask"
    olo, ohi = float(_raw(KEY_ORL_LO)), float(_raw(KEY_ORL_HI))
    orl = (olo, ohi)
    if olo > ohi:
        errors[KEY_ORL_HI] = f"threshold {olo:g} > {ohi:g}: nothing would survive. Using 0.5 5.0."
        orl = s.orl_threshold
    rlo, rhi = float(_raw(KEY_ROLL_LO)), float(_raw(KEY_ROLL_HI))
    roll = (rlo, rhi)
    if rlo > rhi:
        errors[KEY_ROLL_HI] = f"ratio_low {rlo:g} > ratio_high {rhi:g}. Using 0.8, 1.2."
        roll = s.roll_filter
    settings = mismatch.Settings(
        staleness=float(_raw(KEY_STALE)),
        tis=tis,
        icepop=icepop,
        rs=rs,
        rs_threshold=rs_thr,
        trl_mode=str(_raw(KEY_TRL_MODE)),
        trl_min=trl_min,
        trl_max=trl_max,
        orl_level=level,
        orl_mode=mode,
        orl_threshold=orl,
        roll_upper=float(_raw(KEY_ROLL_UB)),
        roll_filter=roll,
    )
    return settings, errors


def current_settings() -> mismatch.Settings:
    """The Settings to run with (fields already checked by ``source_controls``)."""
    return settings_and_errors()[0]


def _number(label: str, low: float, high: float, key: str, help_text: str = "") -> float:
    return float(
        bound(
            st.number_input,
            label,
            low,
            high,
            value=float(FIELDS[key].default),
            step=0.1,
            format="%.4g",
            key=key,
            help=help_text or None,
        )
    )


def _under(errors: dict[str, str], key: str) -> None:
    if key in errors:
        _field_error(errors[key])


def threshold_controls() -> None:
    """Every framework's thresholds (URL-bound); a refused value gets a message under its field."""
    _, errors = settings_and_errors()
    c_verl, c_trl, c_orl, c_roll = st.columns(4)
    with c_verl, st.container(border=True):
        st.markdown("**verl** `rollout_correction`")
        _number(
            "rollout_is_threshold (TIS)",
            1.0,
            100.0,
            KEY_TIS,
            "Upper truncation of token-TIS and seq-TIS; seq-MIS rejects sequences outside "
            "[1/t, t]. verl default 2.0.",
        )
        _number("IcePop low (alpha)", 0.0, 100.0, KEY_ICE_LO)
        _number("IcePop high (beta)", 0.01, 100.0, KEY_ICE_HI)
        _under(errors, KEY_ICE_HI)
        bound(st.selectbox, "rollout_rs", list(fc.VERL_RS_OPTIONS), index=3, key=KEY_RS)
        bound(
            st.text_input,
            "rollout_rs_threshold",
            value=TEXT_FIELDS[KEY_RS_THR],
            key=KEY_RS_THR,
            max_chars=40,
            help="verl's syntax: k1 options take 'lower_upper' ratio bounds (one number u "
            "means 1/u_u), the others one upper bound.",
        )
        _under(errors, KEY_RS_THR)
    with c_trl, st.container(border=True):
        st.markdown("**TRL** `vllm_importance_sampling_*`")
        bound(st.selectbox, "mode", list(fc.TRL_MODES), index=3, key=KEY_TRL_MODE)
        _number("clip_min (0 = none)", 0.0, 100.0, KEY_TRL_MIN)
        _number("clip_max (0 = none)", 0.0, 100.0, KEY_TRL_MAX)
        _under(errors, KEY_TRL_MAX)
    with c_orl, st.container(border=True):
        st.markdown("**OpenRLHF** `is_correction_*` (gating ratio)")
        bound(st.selectbox, "is_correction_level", ["token", "seq"], index=0, key=KEY_ORL_LEVEL)
        bound(st.selectbox, "is_correction_mode", ["mask", "clip"], index=0, key=KEY_ORL_MODE)
        _under(errors, KEY_ORL_MODE)
        _number("threshold low", 0.0, 100.0, KEY_ORL_LO)
        _number("threshold high", 0.0, 100.0, KEY_ORL_HI)
        _under(errors, KEY_ORL_HI)
    with c_roll, st.container(border=True):
        st.markdown("**ROLL** `train_infer_correction`")
        _number("is_weight.upper_bound", 0.01, 100.0, KEY_ROLL_UB, "ROLL default 1.2.")
        _number("filter ratio_low", 0.0, 100.0, KEY_ROLL_LO)
        _number("filter ratio_high", 0.0, 100.0, KEY_ROLL_HI)
        _under(errors, KEY_ROLL_HI)


def staleness_control() -> None:
    """The toy staleness s (log pi_theta = log pi_old + s A), URL-bound."""
    bound(
        st.selectbox,
        "Staleness s (log pi_theta = log pi_old + s * A)",
        list(STALENESS),
        index=0,
        key=KEY_STALE,
        help="0: the first update after the rollout, pi_theta = pi_old, so pi_theta / mu is "
        "all mismatch. s > 0 stands in for a policy that moved since the rollout (a toy step "
        "that raises each token's log-prob by s times its advantage).",
    )


def ess_line(lab: mismatch.Lab) -> str:
    """The ESS of the two ratios, in one markdown line."""
    return (
        f"ESS of π_old/μ: **{lab.stats['ESS of pi_old/mu']:.4f}**; of π_θ/μ: "
        f"**{lab.stats['ESS of pi_theta/mu']:.4f}** (ESS = (Σw)² / (n Σw²), 1 when every weight "
        "is equal; verl logs it as `rollout_corr/rollout_is_eff_sample_size`)."
    )


def note_of(lab: mismatch.Lab, index: int) -> str:
    """How the chosen correction's framework applies it (plain text)."""
    corr = lab.corrections[index]
    return text.md_escape(f"{corr.framework} {corr.name}: {corr.note}")


def pick_correction(lab: mismatch.Lab) -> int:
    """Which correction the per-token views show (URL-bound by its method name)."""
    names = [c.name for c in lab.corrections]
    chosen = bound(
        st.selectbox, "Correction to look at token by token", names, index=2, key=KEY_PICK
    )
    return names.index(chosen) if chosen in names else 2


def table_columns(table: pd.DataFrame) -> list[str]:
    """The corrections table's columns for display: the long config text last.

    First, it took about 460 px at 1280 px and pushed masked, loss and gradient columns out of
    view; the CSV keeps the analysis order.
    """
    return [c for c in table.columns if c != "config"] + (
        ["config"] if "config" in table.columns else []
    )


def stats_table(lab: mismatch.Lab, outside: int) -> pd.DataFrame:
    """The d summary as a two-column table."""
    rows = [{"quantity": k, "value": v} for k, v in lab.stats.items()]
    rows.append({"quantity": "left out (outside support)", "value": float(outside)})
    return pd.DataFrame(rows)


def top_tokens(
    lab: mismatch.Lab, rollout: Rollout, old: torch.Tensor, mu: torch.Tensor, n: int = 12
) -> pd.DataFrame:
    """The n tokens with the largest |d| (token text as plain text: never rendered)."""
    m = lab.mask
    idx = torch.nonzero(m)
    if not len(idx):
        return pd.DataFrame(columns=["sample", "t", "token", "log pi_old", "log mu", "d"])
    d = lab.delta[m]
    order = d.abs().argsort(descending=True)[:n]
    labels = text.sample_labels(rollout)  # p0/s1, as on the heatmaps
    rows = []
    for i in order.tolist():
        b, t = idx[i].tolist()
        toks = rollout.tokens[b]
        rows.append(
            {
                "sample": labels[b] if b < len(labels) else str(b),
                "t": t,
                "token": text.visible_whitespace(toks[t]) if t < len(toks) else "",
                "log pi_old": float(old[b, t]),
                "log mu": float(mu[b, t]),
                "d": float(d[i]),
            }
        )
    return pd.DataFrame(rows)
