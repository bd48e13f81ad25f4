"""Stage 1: the sampled responses, token by token."""

import html

import streamlit as st

from roll_viz import ui
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import chips, tables, text

with ui.page_guard("Samples"):
    state = ui.page_setup("Samples")
    ui.lecture_title("samples", "Samples: what the policy wrote")

    rollout = ui.cached_rollout(state)
    scores = ui.cached_scores(state)
    trace = ui.cached_trace(state)
    labels = text.sample_labels(rollout)
    health_ui.batch_health(state, key="samples_health", era="samples")

    st.caption(
        "Reward: "
        + (
            "the run's own scores (from its file)"
            if state.source.startswith("run:")
            else text.md_escape(ui.describe_terms(state.reward.terms))
        )
        + " (change it under Reward in the sidebar)."
    )
    main, side = st.columns([3, 1], gap="large")
    with side:
        view = st.radio(
            "Colour tokens by",
            list(chips.CHIP_VIEWS),
            format_func=lambda v: chips.CHIP_VIEWS[v][0],
            key=ui.KEY_CHIP_VIEW,
            bind="query-params",
            help="Per-token numbers from the forward passes of the policy and the reference model.",
        )
        ui.explainer(
            f"The policy answered each of the **{text.count(len(rollout.prompts), 'prompt')}** "
            f"**G = {rollout.group_size}** times (seed {state.seed}). Every chip is one token; its "
            "colour is how surprised the policy was by it (pale = it was sure, red = a surprising "
            "pick). Hover a chip for the exact log-prob.\n\n"
            "The **reward** on the left of each answer is one number for the whole response. The "
            "next pages turn it into one number per token.\n\n"
            "**Try:** set G = 2 in the sidebar and watch the groups shrink; switch on *Sample live* "
            "and raise the temperature to see more surprising tokens; choose the *pirate* preset "
            "and colour by *exact KL* to see where the steered policy departs from the reference."
        )
        st.latex(r"\text{surprise}_t = -\log \pi(y_t)")

    with main:
        if rollout.meta.decode_weights == "int8-dynamic":
            st.info(
                "Fast sampling: these answers were drawn by an int8 copy of the model; every "
                "log-prob, KL and entropy below is the float model's score of the drawn tokens.",
                icon=":material/speed:",
            )
        st.html(chips.chip_legend_html(view))
        for p, prompt in enumerate(rollout.prompts):
            rows = [b for b, g in enumerate(rollout.group_ids.tolist()) if g == p]
            group_scores = [float(scores[b]) for b in rows]
            with st.expander(
                f"Prompt p{p}: {text.md_line(prompt)}  "
                f"(mean reward {sum(group_scores) / len(group_scores):.3f})",
                expanded=len(rollout.prompts) <= 4 or p == 0,
            ):
                st.html(
                    "<div style='font-size:0.9em;color:#555;white-space:pre-wrap'>"
                    f"{html.escape(text.visible_controls(prompt))}</div>"
                )
                for b in rows:
                    n = int(rollout.response_mask[b].sum())
                    c1, c2 = st.columns([1, 6], vertical_alignment="center")
                    finish = rollout.finish_reasons[b]
                    c1.markdown(
                        f"**{labels[b]}**  \nreward **{float(scores[b]):.3f}**  \n"
                        f":{'green' if finish == 'eos' else 'orange'}-badge[{finish}] {n} tokens"
                    )
                    with c2:
                        ui.chips(chips.sample_chips_html(rollout, b, view))

    st.subheader("All samples")
    table = tables.samples_table(rollout, scores)
    ui.table(table, key="samples_table")
    c1, c2 = st.columns(2)
    with c1:
        ui.download_csv(table, "samples", key="dl_samples")
    with c2:
        ui.download_trace_json(trace, key="dl_trace_samples", state=state, rollout=rollout)
    with st.expander("Every token (long table)"):
        tokens = tables.token_table(rollout)
        st.dataframe(tokens, hide_index=True, key="samples_tokens")
        ui.download_csv(tokens, "sample_tokens", key="dl_sample_tokens")

    ui.back_next("samples")
