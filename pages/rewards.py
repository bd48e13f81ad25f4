"""Stage 2: the response-level reward, raw and post-processed."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import health_banner as health_ui
from roll_viz.ui import reward_stage_page
from roll_viz.views import charts, explain, tables, text

with ui.page_guard("Rewards"):
    state = ui.page_setup("Rewards")
    ui.lecture_title("rewards", "Rewards: one number per response, then post-processing")

    rollout = ui.cached_rollout(state)
    scores = ui.cached_scores(state)

    mode = ui.generic_value(state, "norm")
    overrides = ui.norm_overrides(state.framework, mode) if mode else None
    # the sidebar's knobs move the bars below in the browser; what only the server computes
    # from them is marked until the page reruns (relay.stale_section)
    with ui.stale_section("rewards_setting"):
        if overrides is None:
            st.info(
                f"{ui.framework_label(state.framework)} has no separate reward-normalization "
                "stage: the group statistics are applied inside the advantage estimator (see the "
                "Advantages page). Showing the dialect's own response-level processing; switch "
                "the dialect to ROLL to try the normalization modes.",
                icon=":material/info:",
            )
        elif state.config.get("adv_estimator") == "grpo" and mode != "group":
            st.info(
                "ROLL's GRPO forces group normalization (norm_mean_type = norm_std_type = group), "
                f"so the sidebar's '{mode}' is overridden on every page. Pick gae or reinforce in "
                "the sidebar to see it act.",
                icon=":material/info:",
            )
        else:
            st.caption(
                f"Reward normalization **{mode}** (sidebar, ROLL norm_mean_type / norm_std_type): "
                "the processed rewards below are the ones Token KL, Advantages and the Update use."
            )
        ui.beta_note(state, stage="rewards")
        health_ui.batch_health(state, key="rewards_health", era="rewards")
        if mode == "running":
            r1, r2, r3 = st.columns([2, 2, 3], vertical_alignment="bottom")
            if r1.button(
                "Add the next batch",
                key="running_add",
                icon=":material/add:",
                help="Samples the same prompts with the next seed (uses the live model) and folds "
                "their rewards into the running mean and std.",
            ):
                ui.add_running_batch(state, overrides)
            if r2.button(
                "Reset running statistics", key="running_reset", icon=":material/restart_alt:"
            ):
                ui.reset_running()

    trace = ui.cached_trace(state)  # the chain's own processing, as on every other page
    detail = ui.page_detail(state)

    main, side = st.columns([3, 1], gap="large")
    with side:
        ui.explainer(
            "Grey bars are the **raw rewards** the reward function gave each response; blue bars "
            "are what the pipeline keeps after **post-processing**.\n\n"
            "- *group*: each answer is compared with the other answers to the **same prompt**: "
            "above the group mean is positive.\n"
            "- *batch*: compared with every answer in the batch.\n"
            "- *running*: compared with statistics accumulated over batches (add batches below).\n\n"
            "**Try:** choose *group* and look at a prompt whose answers all scored alike: a tiny "
            "std makes tiny differences huge. Then set G = 2 in the sidebar."
        )
        st.latex(
            r"\tilde r_i = \operatorname{clip}\!\left("
            r"\dfrac{s_i - \mu}{\sigma + \varepsilon}, -c, c\right)"
        )
        if mode == "running":
            with ui.stale_section("rewards_running"):
                running = trace.running or ui.running_moments()
                st.metric("batches in the running stats", ui.running_batches() + 1)
                st.caption(
                    f"running mean {running.mean:.4f}, std {running.std:.4f}, count "
                    f"{running.count:g} (this batch included, as ROLL updates before normalizing)."
                )

    with main:
        # the bars, the clip fraction and the mean are computed in the browser from the
        # sidebar's config and follow its knobs there; a config pipeline.js does not cover is
        # drawn from the server's trace (then a knob move reruns the page)
        ui.instant_reward_bars(
            ui.instant_payload(state),
            detail,
            ui.running_moments(),
            key="rewards_bars",
            server=None if detail["config_covered"] else trace,
        )
        with ui.stale_section("rewards_formula"):
            b0 = 0
            formula = explain.normalized_reward_formula(
                float(trace.scores[b0]),
                float(trace.baseline[b0]),
                float(trace.scale[b0]),
                explain.std_eps(trace),
                float(trace.rewards[b0]),
            )
            st.markdown(f"Sample {text.sample_labels(rollout)[b0]}, {formula.title}:")
            st.latex(formula.numeric)

    st.subheader("Group statistics")
    groups = tables.group_table(rollout, scores)
    g1, g2 = st.columns([1, 1], gap="large")  # the table's 7 columns: std_population in view
    with g1:
        ui.plot(
            charts.group_stats_figure(
                rollout, scores, groups["mean"].tolist(), groups["std_unbiased"].tolist()
            ),
            key="group_stats",
        )
    with g2:
        st.dataframe(
            groups.drop(columns=["prompt"]), hide_index=True, key="group_table", width="stretch"
        )
        ui.download_csv(groups, "group_stats", key="dl_groups")
        st.caption(
            "std_unbiased divides by n - 1 (torch.std, used by every framework); std_population by n. "
            "A group of one has no unbiased std (NaN)."
        )

    with ui.stale_section("rewards_per_sample"):
        st.subheader("Per sample")
        table = tables.rewards_table(rollout, trace)
        st.dataframe(table, hide_index=True, key="rewards_table")
        c1, c2 = st.columns(2)
        with c1:
            ui.download_csv(table, "rewards", key="dl_rewards")
        with c2:
            ui.download_trace_json(trace, key="dl_trace_rewards", state=state, rollout=rollout)
        with st.expander("Conventions the dialect applied"):
            st.markdown("\n".join(f"- {n}" for n in trace.notes) or "none")

    reward_stage_page.draw(state, rollout, scores)

    ui.back_next("rewards")
