"""Section 4 of the "Sampler != trainer" page: the sequence-level masks beside the corrections.

The same batch, pi_theta and loss as the token-level lab (``analysis.mismatch``); each rule keeps
or drops whole responses (``analysis.sequence_lab``). Its four thresholds are URL-bound and
checked on the server (``fields.check_fields``); an inverted [low, high] gets a message under
its field and the lab's default. Numbers only: no model text is drawn here besides the token
hovers of the shared heatmap (escaped there).
"""

from __future__ import annotations

import streamlit as st
from torch import Tensor

from roll_viz.analysis import mismatch, sequence_lab
from roll_viz.core.records import Rollout
from roll_viz.lm import rollout as behaviour
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.table_fit import table
from roll_viz.ui.url import bound
from roll_viz.ui.widgets import download_csv, explainer, plot
from roll_viz.views import mismatch_charts, sequence_charts, text

KEY_OPSM = "mm_opsm"
KEY_LOW = "mm_seq_lo"
KEY_HIGH = "mm_seq_hi"
KEY_TRM = "mm_trm"
KEY_RULE = "mm_seq_pick"

DEFAULTS = sequence_lab.SeqSettings()
FIELDS: dict[str, Field] = {
    KEY_OPSM: Field(DEFAULTS.opsm_delta, 0.0, 10.0),
    KEY_LOW: Field(DEFAULTS.low, 0.01, 100.0),
    KEY_HIGH: Field(DEFAULTS.high, 0.01, 100.0),
    KEY_TRM: Field(DEFAULTS.trm_delta, 1e-6, 10.0),  # verl refuses a threshold <= 0
}


def _value(key: str) -> float:
    value = st.session_state.get(key)
    if value is None:
        raw = st.query_params.get(key)
        parsed = FIELDS[key].parse(str(raw)) if raw is not None else None
        value = parsed if parsed is not None and FIELDS[key].accepts(parsed) else None
    return float(FIELDS[key].default if value is None else value)


def settings_and_error() -> tuple[sequence_lab.SeqSettings, str | None]:
    """The thresholds the section runs with, and a message when [low, high] is inverted."""
    low, high = _value(KEY_LOW), _value(KEY_HIGH)
    error = None
    if low > high:
        error = f"low {low:g} > high {high:g}: nothing would survive. Using 0.8, 1.25."
        low, high = DEFAULTS.low, DEFAULTS.high
    return sequence_lab.SeqSettings(_value(KEY_OPSM), low, high, _value(KEY_TRM)), error


def _number(label: str, key: str, help_text: str) -> None:
    spec = FIELDS[key]
    bound(
        st.number_input,
        label,
        spec.low,
        spec.high,
        value=float(spec.default),
        step=0.01,
        format="%.4g",
        key=key,
        help=help_text,
    )


def controls(error: str | None) -> None:
    """The four thresholds, each under its framework's name."""
    c1, c2, c3 = st.columns(3)
    with c1, st.container(border=True):
        st.markdown("**TRL** OPSM")
        _number(
            "off_policy_mask_threshold (delta)",
            KEY_OPSM,
            "Drop a response with mean A < 0 whose mean log mu - log pi_theta is above delta "
            "(DeepSeek-V3.2). TRL's docs give 0.5 as an example; a bf16 sampler's gap is about "
            "0.01 per token, so the lab starts at 0.01.",
        )
    with c2, st.container(border=True):
        st.markdown("**Ratio masks**: TRL `sequence_mask` (product), verl Geo-RS (geometric)")
        _number("low", KEY_LOW, "Lower bound of the sequence ratio pi_old / mu.")
        _number("high", KEY_HIGH, "Upper bound of the sequence ratio pi_old / mu.")
        if error:
            st.error(text.md_escape(error), icon=":material/error:")
    with c3, st.container(border=True):
        st.markdown("**verl** TRM `rollout_rs: seq_max_k2`")
        _number(
            "rollout_rs_threshold (delta)",
            KEY_TRM,
            "Trust region masking (arXiv 2512.23075; verl PR #4544): drop a response when any "
            "token's k2 = d^2 / 2 is above delta.",
        )


def section(
    lab: mismatch.Lab, old: Tensor, mu: Tensor, advantages: Tensor, source: str, rollout: Rollout
) -> None:
    """Section 4: the rules, the rows they remove, the loss and gradient with each.

    Args:
        lab: the token-level lab of this batch.
        old: (B, T) log pi_old (the page's behaviour record).
        mu: (B, T) log mu of the same tokens.
        advantages: the batch's advantages.
        source: the mu source (the keep sampling mask shows for top-p / top-k).
        rollout: the batch, for the token heatmap's hovers.
    """
    notices = check_fields(FIELDS)
    if notices:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in notices), icon=":material/info:")
    settings, error = settings_and_error()
    with st.expander("Thresholds of the sequence rules (each under its framework's name)"):
        controls(error)
    seq = sequence_lab.sequence_lab(lab, old, mu, advantages, settings, source)
    c1, c2 = st.columns([3, 2])
    with c1:
        plot(sequence_charts.rows_removed_grid(seq), key="mm_seq_grid")
    with c2:
        plot(
            sequence_charts.product_vs_geometric(seq, settings.low, settings.high),
            key="mm_seq_ratio",
        )
    columns = [c for c in seq.lab.table.columns if c != "config"] + ["config"]
    table(seq.lab.table[columns], key="mm_seq_table")
    with st.expander("Every response: the numbers each rule compares, and its fate"):
        table(seq.sequences, key="mm_seq_rows")
        download_csv(seq.sequences, "sequence_masks", key="mm_seq_csv")
    names = list(seq.rule_names)
    truncated = source in sequence_lab.TRUNCATED_SOURCES
    # the keep sampling mask is a fifth rule for a truncated sampler: its own key, so a link
    # or a remembered choice never names a rule the other sources do not have
    chosen = bound(
        st.selectbox,
        "Sequence rule to look at token by token",
        names,
        key=KEY_RULE + ("_t" if truncated else ""),
    )
    index = names.index(chosen) if chosen in names else 0
    corr = seq.lab.corrections[index]
    st.caption(text.md_escape(f"{corr.framework} {corr.name}: {corr.note}"))
    plot(mismatch_charts.correction_heatmap(seq.lab, index, rollout), key="mm_seq_weights")
    plot(mismatch_charts.gradient_figure(seq.lab, index), key="mm_seq_grad")
    explainer(
        "Section 3's corrections act on single tokens; these rules keep or drop a whole "
        "response. **OPSM** looks at the advantage too: only responses the update would push "
        "down (mean A < 0) and that the sampler saw differently (KL above delta) are dropped, "
        "all their tokens at once (slime#1917 dropped them token by token, see the Silent bugs "
        "page). The **product** ratio multiplies every token's pi_old / mu, so a long response "
        "leaves [low, high] even when each token is close; the **geometric mean** is the "
        "per-token typical ratio and ignores length. **TRM** drops a response as soon as one "
        "token leaves the trust region. Raise the staleness in section 2: pi_theta moves by "
        "s * A, and OPSM starts dropping the responses with negative advantage. The last row "
        "is prime-rl's default loss on the same tokens (its own loss, not the PPO clip): the "
        "ratio is pi_theta / mu, a token is masked when its probability moved more than 0.2 "
        "from mu in the advantage's direction, plus 1e-3 x log^2(pi_theta / mu) on every token."
        + (
            "\n\n**Keep sampling mask**: this mu is a truncated sampler's, renormalised over "
            "its support S. Training pi on the same support (log pi - log pi(S)) makes the "
            "ratio exactly 1 here: the gap d = log S was the truncation, not a mismatch."
            if truncated
            else "\n\nThe **keep sampling mask** applies to a truncated sampler: pick the top-p "
            f"or top-k source ({behaviour.SOURCE_LABELS.get('top_p', 'top-p')})."
        ),
        title="Sequence rules",
    )
