"""Stage 4: from token rewards to advantages, estimator by estimator."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import chips, explain, heatmaps, scales, tables, text

with ui.page_guard("Advantages"):
    state = ui.page_setup("Advantages")
    ui.lecture_title("advantages", "Advantages: which tokens get pushed up, which down")

    rollout = ui.cached_rollout(state)
    mask = rollout.response_mask
    labels = text.sample_labels(rollout)
    fw = state.framework
    current = ui.generic_value(state, "estimator")
    with ui.stale_section("health"):
        health_ui.batch_health(state, key="adv_health", era="advantages")

    # the heatmaps first, the instant knobs under them: the page's point in a projector's first
    # screen (the strip above them had pushed them to 938 px)
    controls, side = st.columns([3, 1], gap="large")
    with side:
        critic = ui.critic_radio(captions=True)

    estimators = ui.estimator_options(fw)
    results = {}
    errors = {}
    for est in estimators:
        result = ui.try_trace(state, overrides=ui.estimator_overrides(fw, est), values=critic)
        if isinstance(result, str):
            errors[est] = result
        else:
            results[est] = result
    ordered = sorted(results, key=lambda e: (e != current, estimators.index(e)))
    shown = {
        f"{e}" + (" (sidebar)" if e == current else ""): results[e].advantages for e in ordered
    }

    # the heatmaps are computed in the browser, and redrawn there on every sidebar knob move,
    # wherever pipeline.js covers the configs; otherwise the server draws them (Plotly)
    detail = ui.page_detail(state)
    in_browser = bool(results) and detail["covered"]
    # over a preset the browser holds the whole batch and follows G; the probe critic is fitted
    # on the rows shown: what reads it (its numbers differ from V = 0's) is the server's after a
    # G move, marked until the page reruns
    whole = ui.preset_payload(state, critic) if ui.follows_group(state) else None
    payload = whole or ui.instant_payload(state, critic)
    on_rows = []
    if whole and critic == "probe":
        for est, res in results.items():
            zero = ui.try_trace(state, overrides=ui.estimator_overrides(fw, est))
            if isinstance(zero, str) or not zero.advantages.equal(res.advantages):
                on_rows.append(est)

    with side:
        with ui.stale_section("beta_note"):
            ui.beta_note(state)
        ui.explainer(
            "Each row is a response, each cell a token, coloured by its **advantage**: blue tokens "
            "are made more likely by the update, red ones less likely, white ones are left alone. "
            "All estimators share **one fixed colour scale**, so you can compare them cell by cell.\n\n"
            "- **GAE** uses a critic V: A = discounted sum of TD errors.\n"
            "- **GRPO** compares each answer with its group: all tokens of an answer get the "
            "same A.\n"
            "- **REINFORCE++** whitens the returns over the whole batch.\n\n"
            "**Try:** lower gamma or lambda in the sidebar and watch early tokens fade in GAE; set "
            "G = 2 and watch GRPO's values jump to about +-0.7."
        )
        st.caption(
            "GAE critic shown: "
            f"**{'zero (V = 0)' if critic == 'zero' else 'cross-fitted ridge probe'}**."
        )

    with controls:
        if in_browser:
            rows = ui.preset_tokens(state) if whole else rollout.tokens
            tokens = [[text.visible_whitespace(t) for t in row] for row in rows]
            server = {
                e: results[e].advantages if e in results else errors.get(e, "undefined")
                for e in {*detail["server"], *on_rows}
            }
            ui.instant_estimators(
                payload,
                tokens,
                detail,
                server,
                key="adv_heatmaps",
                group_size=state.group_size if whole else None,
                on_rows=on_rows,
            )
        else:
            if shown:
                ui.plot(heatmaps.estimator_heatmaps(shown, rollout), key="advantage_heatmaps")
            for est, message in errors.items():
                st.warning(
                    f"**{est}** is undefined for this batch: {message}", icon=":material/block:"
                )
        st.subheader("Instant knobs: recomputed in your browser as you drag")
        with ui.folded("How the instant knobs work"):
            st.caption(
                "The same pipeline in JavaScript (checked against the Python one to 1e-9): no "
                "server round trip while you drag. On release the sidebar takes the values and the "
                "heatmaps above follow."
            )
        knobs = ("estimator", "beta", "gamma", "lam") + (() if state.live else ("G",))
        # the strip follows the sidebar's G with the zero critic; the probe's values are this
        # G's, so there it keeps this batch, marked after a move until the page reruns
        strip = st.container() if critic == "zero" else ui.stale_section("instant_strip")
        with strip:
            ui.instant_panel(
                payload if critic == "zero" else ui.instant_payload(state, critic),
                {k: ui.generic_value(state, k) for k in ("estimator", "beta", "gamma", "lam")}
                | {"G": state.group_size},
                key="adv_instant",
                knobs=knobs,
            )
        st.latex(
            r"\text{GAE: } A_t=\sum_{l\ge0}(\gamma\lambda)^l\delta_{t+l},\ "
            r"\delta_t=r_t+\gamma V_{t+1}-V_t"
        )
        st.latex(
            r"\text{GRPO: } A_i=\dfrac{s_i-\operatorname{mean}(s)}{\operatorname{std}(s)+\varepsilon}"
        )
        st.latex(
            r"\text{REINFORCE++: } A_t=\operatorname{whiten}\Big(\sum_{k\ge0}\gamma^k r_{t+k}\Big)"
        )

    values = ui.current_batch(state, values=critic).values  # (B, T) critic used by GAE

    # what follows is computed on the server only: marked while a burst of knob moves lasts
    detail_section = ui.stale_section("token_detail")
    detail_section.header("One token, every estimator: the formula with its numbers")

    main_advantages = results[ordered[0]].advantages if results else None
    default_b, default_t = ui.first_moving_token(main_advantages, mask)
    index_notice = ui.accept_index_url(ui.KEY_SAMPLE, labels)

    @st.fragment
    def token_detail() -> None:
        if index_notice:
            st.info(index_notice, icon=":material/link:")
        s1, s2 = st.columns([1, 2])
        with s1:
            b = st.selectbox(
                "Sample",
                list(range(len(labels))),
                format_func=lambda i: labels[i],
                key=ui.KEY_SAMPLE,
                bind="query-params",
                **ui.widget_default(ui.KEY_SAMPLE, index=default_b),
            )
        length = int(mask[b].sum())
        width = int(mask.shape[1])
        first_t = ui.first_moving_token(main_advantages, mask, b)[1]
        with s2:
            t = st.slider(
                "Token position t",
                0,
                max(width - 1, 1),
                key=ui.KEY_POSITION,
                bind="query-params",
                **ui.widget_default(ui.KEY_POSITION, value=first_t if b == default_b else 0),
            )
        if t >= length:
            st.caption(
                f"Sample {labels[b]} has only {length} tokens: "
                f"showing its last token (t = {length - 1})."
            )
            t = max(length - 1, 0)
        if not results:
            return
        main_est = ordered[0]
        main_trace = results[main_est]
        zmax = max(
            scales.ADVANTAGE_RANGE,
            scales.nice_ceiling(scales.symmetric_range(main_trace.advantages, mask)),
        )
        tokens = list(rollout.tokens[b][:length])
        st.html(
            chips.colorbar_html("RdBu", -zmax, zmax, f"advantage ({main_est}):")
            + chips.token_chips_html(
                tokens,
                main_trace.advantages[b, :length].tolist(),
                "RdBu",
                vmin=-zmax,
                vmax=zmax,
                name=f"A ({main_est})",
                highlight=t,
            )
        )
        token = text.visible_whitespace(tokens[t]) if t < len(tokens) else ""
        st.markdown(f"Selected: sample **{labels[b]}**, position **t = {t}**, token `{token}`")
        tabs = st.tabs(ordered)
        for tab, est in zip(tabs, ordered, strict=True):
            with tab:
                for step in explain.token_formulas(results[est], b, t, mask, values):
                    st.caption(step.title)
                    st.latex(step.symbolic + r"\qquad\Longrightarrow\qquad " + step.numeric)

    with detail_section:
        token_detail()

    trace = ui.cached_trace(state, values=critic)
    with ui.stale_section("every_token"):
        st.subheader("Every token")
        c1, c2 = st.columns(2)
        with c2:
            ui.download_trace_json(trace, key="dl_trace_advantages", state=state, rollout=rollout)
        # the long table is built and sent only on request: it is most of a redraw's bytes
        if st.toggle("Show the table of every token", key="show_token_table"):
            table = tables.token_table(
                rollout, trace, values, {est: results[est] for est in ordered}
            )
            st.dataframe(table, hide_index=True, key="advantage_tokens")
            with c1:
                ui.download_csv(table, "advantages", key="dl_advantages")
        if st.toggle("Show the critic values V(s_t) used by GAE", key="show_values"):
            ui.plot(
                heatmaps.heatmap(
                    values,
                    mask,
                    rollout=rollout,
                    title=f"Critic values ({critic})",
                    quantity="V",
                    signed=True,
                ),
                key="values_heatmap",
            )
        with st.expander("Conventions the dialect applied"):
            for est in ordered:
                st.markdown(f"**{est}**\n" + "\n".join(f"- {n}" for n in results[est].notes))

    ui.back_next("advantages")
