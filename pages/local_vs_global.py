import streamlit as st

from roll_viz import ui
from roll_viz.analysis import local_global, reward_table
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import compare_charts as charts_compare
from roll_viz.views import text


def shown_groups(groups):
    """The per-prompt table as shown: the scale as text, "no signal (std 0)" for equal rewards."""
    return groups.assign(**{"local / global scale": charts_compare.scale_labels(groups)})


def stretch_sentence(lg) -> str:
    """The most stretched group in words; groups of equal rewards (std 0) are named apart."""
    groups = lg.groups
    flat = groups[groups["group std"] == 0]
    live = groups[groups["group std"] > 0]
    parts = [f"Batch std = **{lg.batch_std:.4g}**."]
    if len(live):
        worst = live.sort_values("local / global scale", ascending=False).iloc[0]
        parts.append(
            f"The group **{text.md_escape(worst['prompt'])}** has std "
            f"**{worst['group std']:.4g}**, so local normalization divides its differences by a "
            f"number **{worst['local / global scale']:.3g}x** smaller than global normalization "
            "does."
        )
    for name in flat["prompt"]:
        parts.append(
            f"**{text.md_escape(name)}**: {charts_compare.NO_SIGNAL}, all its answers scored the "
            "same, so local normalization gives each of them an advantage of exactly 0."
        )
    return " ".join(parts)


with ui.page_guard("Local vs global"):
    state = ui.page_setup("Local vs global")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing

    ui.lecture_title("local_global", "Local vs global normalization")
    with ui.folded("Local and global, in formulas"):
        st.markdown(
            "Group methods (GRPO and friends) turn rewards into advantages by subtracting a mean and "
            "dividing by a standard deviation. **Local** normalization uses the statistics of each "
            "prompt's own group of G answers; **global** normalization uses the whole batch. Same "
            "rewards, different signal: a prompt whose answers all score about the same gets its tiny "
            "differences blown up locally."
        )
        left, right = st.columns(2)
        with left:
            st.latex(
                r"A^{\text{local}}_i = \frac{r_i - \operatorname{mean}_{j \in g(i)} r_j}"
                r"{\operatorname{std}_{j \in g(i)} r_j + 10^{-6}}"
            )
        with right:
            st.latex(
                r"A^{\text{global}}_i = \frac{r_i - \operatorname{mean}_{j \in \text{batch}} r_j}"
                r"{\operatorname{std}_{j \in \text{batch}} r_j + 10^{-6}}"
            )
        st.caption(
            "Both sides follow ROLL's reward_norm (norm_mean_type / norm_std_type = group or batch): "
            "unbiased std, 1e-6 added. The Frameworks page shows how the other dialects differ."
        )

    # ---------------------------------------------------------------------------------------------
    st.header("1. Try it by hand (no model needed)")
    edit_col, scatter_col = st.columns([2, 3])  # the scatter in the first screen
    with edit_col:
        base, link_problem = ui.reward_table_base()
        if link_problem:
            st.warning(text.md_escape(link_problem), icon=":material/link_off:")
        edited = st.data_editor(
            base,
            key="lg_table",
            num_rows="dynamic",
            width="stretch",
            hide_index=True,
            column_config={
                "prompt": st.column_config.TextColumn(
                    "prompt", help="Rows with the same prompt form a group."
                ),
                "reward": st.column_config.TextColumn(
                    "reward",
                    help="A number as Python reads it: 8.2, -3, 1e-3, 2.5e1 (a decimal point, "
                    f"not a comma). At most {reward_table.MAX_TABLE_ROWS} rows.",
                ),
            },
        )
        ui.share_reward_table(edited)
        if st.button("Reset to the example", key="lg_reset", icon=":material/restart_alt:"):
            ui.reset_reward_table()
            st.rerun()
        try:
            table = reward_table.parse_reward_table(edited)
        except reward_table.RewardTableError as err:  # the message under the table it is about
            st.error(f"Cannot read the table: {text.md_escape(err)}", icon=":material/error:")
            table = None
        for message in table.messages if table is not None else ():
            st.info(text.md_escape(message), icon=":material/info:")

    if table is not None:
        lg_hand = local_global.local_vs_global(table.scores, table.group_ids, table.prompts)
        with scatter_col:
            ui.plot(charts_compare.local_global_scatter(lg_hand.samples), key="lg_hand_scatter")
        c1, c2 = st.columns([3, 2])
        with c1:
            ui.plot(charts_compare.group_std_bars(lg_hand.groups), key="lg_hand_std")
        with c2:
            ui.explainer(
                "The table starts with the seed's example: the prompt **quantum** with rewards "
                "8.2, 6.5 and 9.1, and a second prompt whose rewards are almost equal (5.0, 5.1, 4.9).\n\n"
                "- Each dot in the scatter is one answer: x = its global advantage, y = its local one. "
                "On the dashed diagonal both agree.\n"
                "- The low-variance prompt's dots shoot far off the diagonal: a reward difference of "
                "0.1 becomes an advantage of about +-1, because it is divided by its tiny group std.\n\n"
                "**Try:** change a reward, add a row (click below the last row), make all rewards of "
                "one prompt equal (its local advantages become exactly 0), or give a prompt a single "
                "row (its group std is undefined)."
            )

        st.markdown(stretch_sentence(lg_hand))
        ui.table(lg_hand.samples, key="lg_hand_table", point="global advantage")
        ui.download_csv(lg_hand.samples, "local_vs_global_table", key="lg_hand_csv")

    # ---------------------------------------------------------------------------------------------
    st.header("2. The same on the current batch")
    rollout = ui.cached_rollout(state)
    scores = ui.cached_scores(state)
    health_ui.batch_health(state, key="lg_health", era="local_global")
    lg = local_global.local_vs_global(scores, rollout.group_ids, rollout.prompts)
    st.markdown(
        f"{len(rollout.prompts)} prompt{'s' if len(rollout.prompts) != 1 else ''} x "
        f"G = {state.group_size} answers from "
        f"{'the live model' if state.live else 'the preset ' + repr(state.preset)}, scored by "
        f"the sidebar's reward. Change G or the reward in the sidebar and watch the group stds move."
    )
    if len(rollout.prompts) == 1:
        st.info(
            "This batch has a single prompt, so its group is the whole batch: local = global and "
            "every dot sits on the diagonal. Choose a preset with several prompts (e.g. "
            "'arithmetic') to see them differ.",
            icon=":material/info:",
        )
    st.subheader("Instant: drag G, the divisor or eps and watch every dot move")
    lg_payload = ui.local_global_payload(state)
    synced = bool(lg_payload.get("sync_G"))
    ui.instant_local_global(
        lg_payload,
        {"G": state.group_size},
        key="lg_instant",
        sync=("G",) if synced else (),
    )
    if synced:
        st.caption(
            "Recomputed in your browser on every move (ROLL's numbers: at the sidebar's G they "
            "equal the Python tables below, checked to 1e-9). Releasing **G** sets the sidebar's G, so the tables "
            "below, the URL and every other page follow. **local divides by** and **eps** have no "
            "sidebar control: they stay in this panel (the Python tables use ROLL's group std and "
            "eps = 1e-6)."
        )
    else:
        st.caption(
            "Recomputed in your browser on every move (ROLL's numbers: at the sidebar's G they "
            "equal the Python tables below, checked to 1e-9). This batch was sampled (or imported), so **G** here "
            "only keeps the first G answers of each prompt and does not change the sidebar: set "
            "the sidebar's G to sample a different number. **local divides by** and **eps** stay "
            "in this panel (the Python tables use ROLL's group std and eps = 1e-6)."
        )
    ui.explainer(
        "Prompts whose bars are short (answers of similar quality) are stretched the most by local "
        "normalization; a prompt whose answers all got the same reward gives no signal at all "
        "locally (all its local advantages are 0), while global normalization still ranks it "
        "against the rest of the batch. Dr.GRPO drops the division by the group std for exactly "
        "this reason (difficulty bias); REINFORCE++ uses batch statistics instead.\n\n"
        "**Try:** drag G down to 2 (two answers make a very noisy std) and to 1 (no group std at "
        "all: the dots disappear); switch *local divides by* to *nothing* (Dr.GRPO) and watch the "
        "low-variance prompt's dots collapse towards local = 0 instead of shooting off; raise eps "
        "towards 1 and see it tame the tiny stds.",
        title="What to look at",
    )
    with st.expander(
        f"The same figures from Python (server side, the sidebar's G = {state.group_size})"
    ):
        c1, c2 = st.columns([3, 2])
        with c1:
            ui.plot(charts_compare.local_global_scatter(lg.samples), key="lg_batch_scatter")
        with c2:
            ui.plot(charts_compare.group_std_bars(lg.groups), key="lg_batch_std")
    with st.expander("Per-sample and per-prompt tables"):
        ui.table(lg.samples, key="lg_batch_table", point="global advantage")
        ui.download_csv(lg.samples, "local_vs_global_batch", key="lg_batch_csv")
        st.dataframe(
            shown_groups(lg.groups), key="lg_batch_groups", hide_index=True, width="stretch"
        )
        ui.download_csv(lg.groups, "group_stats_batch", key="lg_groups_csv")

    ui.back_next("local_global")
