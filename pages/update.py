"""Stage 7: one real policy-gradient step on the model, through this session's LoRA adapter."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import health_banner as health_ui
from roll_viz.ui import update_page as upd
from roll_viz.views import text, update_charts, update_text

with ui.page_guard("Update"):
    state = ui.page_setup("Update")
    ui.lecture_title("update", "Update: one real gradient step on the model")

    rollout = ui.cached_rollout(state)
    trace = ui.cached_trace(state)
    labels = text.sample_labels(rollout)
    mask = rollout.response_mask

    main, side = st.columns([3, 1], gap="large")
    with main:  # first: its field check reads the link before any bound select rewrites it
        lr, epochs, minibatches = upd.controls()
    with side:
        health_ui.batch_health(state, key="upd_health", era="update", below=main)
        # beside the step, not above it: the step's first figure stays in a projector's screen
        with ui.folded("Loss option, behaviour policy mu, precision"):
            option_label, loss_keys = upd.loss_option(state.framework)
            mu_source = upd.mu_control(rollout, upd.needs(state, loss_keys))
            precision = upd.precision_control()
        ui.explainer(
            "Press the button and the app takes **one real optimizer step** on the model with the "
            "advantages of the Advantages page, through a small **LoRA adapter** that belongs to "
            "your browser session only (the shared model itself never changes; the reference is "
            "the model with your adapter switched off).\n\n"
            "Its figures come first; then it re-scores the same tokens for delta log pi: "
            "**blue** tokens became more likely, **red** less. "
            "Tokens with a positive advantage should mostly turn blue, negative ones red. Not all "
            "of them do: every token shares the same weights.\n\n"
            "**Try:** K = 2 epochs with a large learning rate and watch the clip fraction of "
            "epoch 2; in epoch 1 every ratio is exactly 1, so nothing can clip."
        )

    bundle = ui.ensure_model(state.model)  # says so on the model's first use
    problem = upd.model_problem(rollout, bundle)
    with main:
        if problem:
            st.info(problem + " Sample a live batch with the loaded model to take a step.")
            st.button("Use the live model", key="upd_go_live", on_click=ui.go_live)
            ui.stop_page("update")
        lost = upd.lost_adapter_notice()  # a restart or an expired adapter: say what was lost
        if lost:
            st.warning(lost, icon=":material/history:")
        c1, c2 = st.columns([1, 1])
        with c1:
            clicked = st.button("Take one update step", key=upd.KEY_STEP, type="primary")
        with c2:
            st.button("Reset my adapter", key=upd.KEY_RESET, on_click=upd.reset_adapter)
        st.caption(
            f"Loss: the **{ui.framework_label(state.framework)}** policy "
            f"loss in the sidebar's dialect settings, loss option: {option_label}; old "
            "log-probs pi_old are the batch's own. Steps accumulate in your adapter until you "
            "reset it."
        )
        if clicked:
            with st.spinner(f"Forward, backward and optimizer step on {bundle.name}..."):
                refused = upd.take_step(
                    state, rollout, trace, lr, epochs, minibatches, loss_keys, mu_source, precision
                )
            if refused:
                st.warning(refused, icon=":material/block:")

    result = upd.stored_result(state)
    if result is None:
        with main:
            st.caption("No step taken on this batch yet.")
        ui.stop_page("update")

    with main:
        st.markdown(update_text.summary_markdown(result))
        bf16_line = update_text.precision_markdown(result)
        if bf16_line:
            st.info(bf16_line, icon=":material/speed:")
        mu_line = update_text.mu_markdown(result)
        if mu_line:
            st.markdown(mu_line)
        statement = update_text.epoch1_statement(result)
        if statement:
            st.info(statement, icon=":material/functions:")
        u1, u2 = st.columns([1, 2], vertical_alignment="center")
        u1.button(
            "Use the updated policy",
            key="upd_use_policy",
            on_click=upd.use_updated_policy,
            icon=":material/swap_horiz:",
            help="Every page then samples the same prompts from your updated policy and compares "
            "it with the reference (the base model): Token KL shows the KL this update produced. "
            "Switch back under Policy in the sidebar.",
        )
        u2.caption(update_text.timing_markdown(result))  # beside the button: the figure stays high
        if rollout.meta.policy_mode == "steered":
            st.caption(
                "This batch was sampled by the steered policy (hidden instruction), the adapter sees "
                "the plain prompt: the ratio starts away from 1."
            )
        # the step's own figure first; delta log pi (a re-score after the step) under it
        ui.plot(update_charts.grad_coef_heatmap(result, rollout), key="upd_grad_heatmap")
        if result.delta is None:
            rescoring = st.status(
                "Delta log pi: re-scoring the batch under the updated adapter...", expanded=False
            )
        else:
            ui.plot(update_charts.delta_heatmap(result, rollout), key="upd_delta_heatmap")
            ui.plot(update_charts.delta_scatter(result, rollout), key="upd_delta_scatter")

    c1, c2 = st.columns(2)
    with c1:
        ui.plot(update_charts.loss_terms_bars(result.epochs), key="upd_loss_terms")
    with c2:
        ui.plot(update_charts.ratio_figure(result.epochs, mask), key="upd_ratio")
    st.caption(
        "Clip fractions are the loss's own masks, as the framework names them (their meaning "
        "differs between frameworks: see the Frameworks page)."
    )
    ui.plot(update_charts.aggregation_figure(mask, labels), key="upd_aggregation")
    st.caption(" | ".join(f"**{mode}**: {how}" for mode, how in update_charts.AGG_MODES.items()))

    st.header("One token: its loss and gradient with the numbers")
    s1, s2 = st.columns([1, 2])
    with s1:
        b = st.selectbox(
            "Sample", list(range(len(labels))), format_func=lambda i: labels[i], key=upd.KEY_SAMPLE
        )
    length = int(mask[b].sum())
    with s2:
        t = st.slider("Token position t", 0, max(length - 1, 1), value=0, key=upd.KEY_POSITION)
    t = min(t, max(length - 1, 0))
    if length:
        st.text("Selected token: " + text.visible_whitespace(rollout.tokens[b][t]))
        a_chips, delta_chips = update_text.answer_chips(result, rollout, b, t)
        k1, k2 = st.columns(2, gap="large")
        with k1:
            st.caption(f"Answer {labels[b]}, coloured by its advantage A (the push asked for)")
            ui.chips(a_chips)
        with k2:
            st.caption("The same answer, coloured by delta log pi (what the step did)")
            if delta_chips:
                ui.chips(delta_chips)
            else:
                st.caption("(after the re-score)")
        for line in update_text.token_formula(result, b, t):
            st.latex(line)

    ui.plot(update_charts.seconds_bars(result.seconds), key="upd_seconds")
    st.caption(
        " ".join(f"{k}: {v:.3f} s." for k, v in result.seconds.items())
        + f" Adapter {result.adapter_bytes / 2**20:.1f} MB, AdamW state "
        f"{result.optimizer_bytes / 2**20:.1f} MB."
    )

    if result.delta is None:  # last: the step's figures are on screen while this runs
        why = upd.finish_rescore(state, rollout, result)  # reruns the page when done
        rescoring.update(state="error", label=why)
    ui.back_next("update")
