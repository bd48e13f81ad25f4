"""The Rewards page's reward-stage sections: parts, verifier noise, truncation, the hack.

Analysis in ``analysis/reward_stage.py`` and ``analysis/verifier_noise.py``, figures in
``views/reward_stage_charts.py``; this module draws the controls (each bounded, bound stated)
and calls them. Model output is shown only inside dataframes (as data, never as Markdown).
"""

from __future__ import annotations

import streamlit as st
import torch

from roll_viz import rewards
from roll_viz.analysis import reward_stage as rs
from roll_viz.analysis import verifier_noise as vn
from roll_viz.core.records import Rollout
from roll_viz.data import presets
from roll_viz.data.recorded_runs import RECORDED
from roll_viz.ui.figure_cache import plot_of
from roll_viz.ui.state import AppState
from roll_viz.ui.widgets import download_csv, explainer, page_link
from roll_viz.views import reward_stage_charts as charts
from roll_viz.views.text import sample_labels

KEY_NOISE_SOURCE = "rs_noise_source"
KEY_FN, KEY_FP, KEY_NOISE_SEED = "rs_fn", "rs_fp", "rs_noise_seed"
KEY_BUFFER, KEY_FACTOR = "rs_buffer", "rs_factor"
KEY_HACK_STEP = "rs_hack_step"

MAX_SEED = 999_999
_ARITHMETIC = "the arithmetic preset (0/1 verifier)"
_SIDEBAR = "the sidebar's batch and reward"
#: the verifier the noise section reads on its default batch
VERIFIER = rewards.RewardSpec.single("arithmetic")


@st.cache_data(show_spinner=False, max_entries=4)
def _arithmetic_batch() -> Rollout:
    return presets.load_preset("arithmetic")[2]


@st.cache_data(show_spinner=False, max_entries=16)
def _hack_steps(spec: rewards.RewardSpec) -> tuple[rs.HackStep, ...]:
    return rs.hack_exercise(spec)


def draw(state: AppState, rollout: Rollout, scores: torch.Tensor) -> None:
    """The four reward-stage sections, below the Rewards page's own."""
    st.header("The reward as a stage")
    st.caption(
        "The reward function runs before every other stage and fails there quietly: a noisy "
        "verifier, a policy for cut answers, a reward a policy can game."
    )
    _parts(state, rollout)
    _noise(rollout, scores)
    _truncation(rollout, scores)
    _hack(state)


def _parts(state: AppState, rollout: Rollout) -> None:
    st.subheader("The reward's parts")
    parts = rs.reward_parts(rollout, state.reward)
    labels = sample_labels(rollout)
    main, side = st.columns([3, 1], gap="large")
    with side:
        explainer(
            "Each bar is one sample's score split into the sidebar reward's terms: **weight x "
            "term value**. A share is the part's size over the sum of the parts' sizes, so a "
            "negative weight still shows as a share between 0 and 1.\n\n"
            "**Try:** pick *preset* as the reward on the quantum preset (two terms) and look "
            "for a sample whose score comes almost all from one term."
        )
    with main:
        plot_of("rs_parts", charts.parts_figure, labels, parts)
    table = charts.parts_table(labels, parts)
    st.dataframe(table, hide_index=True, key="rs_parts_table")
    download_csv(table, "reward_parts", key="rs_dl_parts")


def _noise(rollout: Rollout, scores: torch.Tensor) -> None:
    st.subheader("A noisy verifier")
    source = st.radio(
        "Batch",
        (_ARITHMETIC, _SIDEBAR),
        key=KEY_NOISE_SOURCE,
        horizontal=True,
        help="The noise acts on 0/1 scores: a verifier's. The sidebar's batch works when its "
        "reward gives only 0 and 1.",
    )
    if source == _ARITHMETIC:
        batch = _arithmetic_batch()
        labels = rewards.score_rollout(batch, VERIFIER)
    else:
        batch, labels = rollout, scores
    c1, c2, c3 = st.columns(3)
    fn = c1.slider(
        "false-negative rate",
        0.0,
        vn.MAX_RATE,
        0.2,
        0.05,
        key=KEY_FN,
        help=f"P(a true pass is read as a fail), 0 to {vn.MAX_RATE:g}.",
    )
    fp = c2.slider(
        "false-positive rate",
        0.0,
        vn.MAX_RATE,
        0.2,
        0.05,
        key=KEY_FP,
        help=f"P(a true fail is read as a pass), 0 to {vn.MAX_RATE:g}.",
    )
    seed = c3.number_input(
        "seed of the draw",
        0,
        MAX_SEED,
        0,
        key=KEY_NOISE_SEED,
        help=f"torch.Generator seed, 0 to {MAX_SEED}: the same seed draws the same flips.",
    )
    try:
        draw = vn.noise_draw(labels, batch.group_ids, fn, fp, int(seed))
        expected = vn.expected_noise(labels, batch.group_ids, fn, fp)
    except ValueError as err:
        st.info(f"No noise on this batch: {err}. Choose {_ARITHMETIC}.", icon=":material/info:")
        return
    main, side = st.columns([3, 1], gap="large")
    with side:
        explainer(
            "Under GRPO a group whose answers all got the same label is a **tie**: every "
            "advantage in it is 0, it teaches nothing. A noisy verifier **breaks ties**: the "
            "group now has advantages, and they point at noise. A flipped label inside a live "
            "group points its own advantage the wrong way.\n\n"
            "Red outlines: advantages that point at noise (a flipped label, or a true tie "
            "broken). The *expected* column averages over every possible draw, exactly.\n\n"
            "The curve below: expected advantages at noise as one rate grows alone. "
            "False positives hurt more when most answers fail (more fails to misread, and an "
            "all-fail group's tie breaks); false negatives mostly make new ties (zero "
            "advantages, signal lost).\n\n"
            "**Try:** false-positive 0.1, false-negative 0: the all-fail group starts to "
            "reward wrong answers."
        )
    with main:
        st.dataframe(charts.noise_summary(draw, expected), hide_index=True, key="rs_noise_sum")
        plot_of("rs_noise_fig", charts.noise_figure, sample_labels(batch), draw)
    groups = batch.group_ids.tolist()
    g1, g2 = st.columns([1, 1], gap="large")
    with g1:
        st.dataframe(
            charts.noise_groups(groups, draw, expected), hide_index=True, key="rs_noise_groups"
        )
    with g2:
        sweep = vn.noise_sweep(labels, batch.group_ids)
        plot_of("rs_noise_sweep", charts.noise_sweep_figure, sweep)
    table = charts.noise_table(sample_labels(batch), groups, draw)
    st.dataframe(table, hide_index=True, key="rs_noise_table")
    st.caption(
        f"Seed {int(seed)}. Advantages: GRPO, (r - group mean) / (unbiased group std + "
        f"{rs.GROUP_EPS:g}). Expected values sum over the flips of each group "
        "(C(k, j) fn^j (1-fn)^(k-j) C(G-k, i) fp^i (1-fp)^(G-k-i)); a group ties with "
        "probability fn^k (1-fp)^(G-k) + (1-fn)^k fp^(G-k)."
    )


def _truncation(rollout: Rollout, scores: torch.Tensor) -> None:
    st.subheader("Truncated answers: four policies")
    truncated = rs.truncated_rows(rollout)
    lengths = rollout.response_mask.sum(-1).long()
    cap = int(rollout.meta.max_new_tokens or rollout.response_mask.shape[1])
    if cap < 2:
        st.info(
            f"A cap of {cap} token leaves no room for an overlong buffer.", icon=":material/info:"
        )
        return
    c1, c2 = st.columns(2)
    buffer = c1.slider(
        "overlong buffer (tokens)",
        1,
        cap,
        max(1, round(cap * 0.2)),
        key=KEY_BUFFER,
        help=f"1 to max_new_tokens ({cap}). The soft penalty starts at max_new_tokens - "
        "buffer tokens. Default: DAPO's proportion (4096 of 20480).",
    )
    factor = c2.slider(
        "penalty factor",
        0.0,
        rs.MAX_PENALTY_FACTOR,
        1.0,
        0.1,
        key=KEY_FACTOR,
        help=f"The penalty at max_new_tokens, 0 to {rs.MAX_PENALTY_FACTOR:g} (DAPO: 1).",
    )
    try:
        policies = rs.truncation_policies(
            scores, lengths, truncated, rollout.group_ids, cap, buffer, factor
        )
    except ValueError as err:
        st.info(f"No truncation comparison on this batch: {err}", icon=":material/info:")
        return
    main, side = st.columns([3, 1], gap="large")
    with side:
        explainer(
            f"**{int(truncated.sum())} of {truncated.numel()}** answers were cut at "
            f"max_new_tokens = {cap} (finish reason *length*). Four policies ship:\n\n"
            "- *zero reward*: a cut answer scores 0;\n"
            "- *keep the score*: the default everywhere;\n"
            "- *soft overlong penalty* (DAPO): every answer longer than max_new_tokens - buffer "
            "loses up to the factor, linearly; a cut answer loses the whole factor;\n"
            "- *masked from the loss* (TRL mask_truncated_completions): reward and advantage "
            "are computed as usual, the row gets no gradient (faded bars).\n\n"
            f"Here **{int((lengths > cap - buffer).sum())}** answers are longer than "
            f"{cap - buffer} tokens and pay some soft penalty: the penalty reads the length, not "
            "the finish reason.\n\n"
            "reward_mean moves with the policy (UniRL PR #19: 0.53 to 0.36 under zeroing) "
            "while masking leaves it where it was."
        )
    with main:
        st.dataframe(charts.truncation_table(policies), hide_index=True, key="rs_trunc_table")
        labels = sample_labels(rollout)
        plot_of("rs_trunc_fig", charts.truncation_figure, labels, policies, truncated.tolist())
    st.dataframe(charts.options_table(), hide_index=True, key="rs_options", width="stretch")
    per_sample = charts.truncation_samples(
        sample_labels(rollout), lengths.tolist(), truncated.tolist(), policies
    )
    st.dataframe(per_sample, hide_index=True, key="rs_trunc_samples")
    download_csv(per_sample, "truncation_policies", key="rs_dl_trunc")
    st.caption(
        "Soft penalty: min(-(L - (max_new_tokens - buffer)) / buffer x factor, 0), as verl's "
        "DAPO reward manager adds it. Keeping the score is every framework's default; a policy "
        "a framework has no row for goes into the reward function."
    )


def _hack(state: AppState) -> None:
    st.subheader("Exercise: write the reward that gets hacked")
    run = RECORDED[rs.HACK_RUN]
    steps = _hack_steps(state.reward)
    main, side = st.columns([3, 1], gap="large")
    with side:
        explainer(
            f"**{run.title}**: {run.description} It was trained on *positive_words* "
            "(0.25 a word, cap 10), not on your reward: nothing is retrained here.\n\n"
            "**Your turn:** in the sidebar, pick a reward and set its parameters. The page "
            "scores the run's recorded samples again with it, step by step. A reward that "
            "climbs as the answers turn into 'amazing amazing amazing' is one this drift would "
            "have satisfied too: it gets hacked. Try *keyword* with pattern *amazing*, then "
            "*one_sentence* or *target_length*.",
            title="The exercise",
        )
    with main:
        plot_of("rs_hack_fig", charts.hack_figure, steps)
        st.markdown(charts.hack_verdict(steps))
    st.dataframe(charts.hack_steps_table(steps), hide_index=True, key="rs_hack_steps")
    options = [s.step for s in steps]
    chosen = st.select_slider(
        "recorded step",
        options,
        value=options[-1],
        key=KEY_HACK_STEP,
        help="The step whose samples are listed below, best first under your reward.",
    )
    step = next(s for s in steps if s.step == chosen)
    st.dataframe(charts.hack_samples_table(step), hide_index=True, key="rs_hack_samples")
    st.caption(
        "Recorded samples (model output, shown as data). This panel never trains: the Training "
        "page trains live on the sidebar's reward, this one, if you want to see what a policy "
        "makes of it."
    )
    page_link("training", "Open the Training page", icon=":material/model_training:")
