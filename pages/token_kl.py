"""Stage 3: the per-token KL penalty and the token rewards it produces."""

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import kl_placement
from roll_viz.ui import health_banner as health_ui
from roll_viz.ui import training_demos
from roll_viz.views import charts, explain, heatmaps, scales, tables, text

with ui.page_guard("Token KL"):
    state = ui.page_setup("Token KL")
    ui.lecture_title("kl", "Token KL: how far did the policy drift, token by token?")

    rollout = ui.cached_rollout(state)
    mask = rollout.response_mask
    trace = ui.cached_trace(state)
    beta = float(ui.generic_value(state, "beta", trace.beta))
    # the sidebar's knobs (beta, KL estimator, KL in the reward) move the token rewards, drawn
    # in the browser below; what only the server computes is marked until the page reruns
    with ui.stale_section("kl_health"):
        health_ui.batch_health(state, key="kl_health", era="kl")

    if state.sampling.policy_mode == "identical" and not state.adapted:
        # Policy = reference: every KL below is exactly 0. Say so first, or the empty maps look broken.
        ui.zero_kl_notice(
            "Policy = reference in this batch (the first step of RL training), so every KL on this "
            "page is **exactly 0**. Load the *pirate* preset, where the policy secretly follows an "
            "extra instruction, to see real per-token KL.",
            key="kl_pirate",
        )

    KL_FLOOR = 0.1
    ESTIMATORS = {
        "k1": r"k_1 = \log\rho_t",
        "abs": r"|k_1| = |\log\rho_t|",
        "k2": r"k_2 = \tfrac12 (\log\rho_t)^2",
        "k3": r"k_3 = e^{-\log\rho_t} - 1 + \log\rho_t",
    }

    controls, note = st.columns([1, 2], vertical_alignment="bottom")
    with controls:
        view = st.segmented_control(
            "KL estimator shown",
            list(ESTIMATORS),
            default="k1",
            key=ui.KEY_KL_VIEW,
            bind="query-params",
            required=True,
            help="Four per-token estimates of KL(policy || reference) from the sampled token alone. "
            "The pipeline's own choice is the sidebar's KL estimator.",
        )
    with note:
        st.latex(
            r"\log\rho_t = \log\pi(y_t) - \log\pi_{\mathrm{ref}}(y_t), \qquad " + ESTIMATORS[view]
        )

    kl = ui.kl_estimates(state, view)
    signed = view == "k1"
    # fixed floors: an identical policy (KL ~ 1e-7 rounding noise) must look uniformly "zero"
    nonneg_top = scales.nice_ceiling(
        max(
            scales.robust_range(rollout.exact_kl, mask),
            0.0 if signed else scales.robust_range(kl, mask),
            KL_FLOOR,
        )
    )
    k_top = (
        scales.nice_ceiling(max(scales.robust_range(kl, mask), KL_FLOOR)) if signed else nonneg_top
    )
    c1, c2 = st.columns(2)
    with c1:
        ui.plot(
            heatmaps.kl_heatmap(kl, rollout, estimator=view, signed=signed, zmax=k_top),
            key="kl_heatmap",
        )
    with c2:
        ui.plot(heatmaps.exact_kl_heatmap(rollout, zmax=nonneg_top), key="exact_kl_heatmap")
    ui.explainer(
        "Each cell is one token. The estimators only see the **sampled** token's two log-probs; "
        "the right map is the **exact** KL over the whole vocabulary at that position. "
        "k1 is unbiased but can be negative (red); k2 and k3 are never negative. The colour range "
        "is the 98th percentile (stated on the colorbar): hover a cell for the exact numbers, both "
        "log-probs and the policy's top alternatives under both models.\n\n"
        "**Try:** the *pirate* preset (a steered policy) vs *quantum* (identical policy: every "
        "KL is exactly 0); switch to k3 and compare its per-sample means with the exact KL below."
    )

    estimates = {name: ui.kl_estimates(state, name) for name in ESTIMATORS}
    summary = tables.kl_summary_table(rollout, estimates)
    s1, s2 = st.columns([3, 2], gap="large")
    with s1:
        ui.plot(
            charts.kl_bars(
                {"exact": summary["exact_kl"].tolist()}
                | {n: summary[n].tolist() for n in ESTIMATORS},
                summary["sample"].tolist(),
            ),
            key="kl_bars",
        )
    with s2:
        st.dataframe(summary, hide_index=True, key="kl_table")
        ui.download_csv(summary, "kl_per_sample", key="dl_kl")
        st.caption(
            "Averaged over many samples, k1 and k3 match the exact KL (both are unbiased); k2 is "
            "biased but low-variance. On one sample they differ."
        )

    st.header("The KL coefficient beta")
    st.caption(
        "Drag beta here: the token rewards r_t = score - beta x KL_t are recomputed in your browser "
        "(no server round trip); on release the sidebar takes the value. beta acts on the token "
        "rewards only when the KL is in the reward."
    )
    ui.instant_panel(
        ui.instant_payload(state),
        {"beta": beta},
        key="kl_instant",
        knobs=("beta",),
        view="token_rewards",
    )

    @st.fragment
    def beta_section() -> None:
        b1, b2 = st.columns([1, 2], gap="large")
        with b1:
            mode = st.radio(
                "beta",
                ["fixed", "adaptive"],
                key=ui.KEY_BETA_MODE,
                bind="query-params",
                horizontal=True,
                help="fixed: beta stays at the sidebar's value. adaptive: the Ziegler et al. (2019) "
                "controller nudges beta towards a target KL after every batch (ROLL, verl, OpenRLHF).",
            )
            observed = ui.observed_kl(trace.kl, mask)
            st.metric(
                f"observed KL ({dict(trace.config).get('kl_penalty', view)}, mean per token)",
                f"{observed:.4f}",
            )
        recording = training_demos.adaptive_recording() if mode == "adaptive" else None
        with b2:
            if mode == "fixed":
                ui.plot(charts.beta_schedule([beta] * 11, mode="fixed"), key="beta_plot")
                st.caption("A fixed controller: beta is the sidebar's value at every step.")
            elif recording is not None:
                # a closed loop: a real run whose KL answers each step's beta
                training_demos.adaptive_loop_chart(recording, "kl_closed_loop")
                st.caption(
                    f"A recorded training run ({len(recording.steps)} steps on "
                    f"{recording.model}; Training page, tab *Adaptive beta*): each step's KL "
                    "comes from the policy the previous betas shaped, so the loop closes."
                )
            else:
                st.info(
                    "The recorded adaptive run is not installed; the replay below is an open loop.",
                    icon=":material/info:",
                )
        if mode == "adaptive":
            with st.expander(
                "This batch alone: its KL replayed at every step (an open loop)",
                expanded=recording is None,
            ):
                o1, o2 = st.columns([1, 2], gap="large")
                with o1:
                    target = st.number_input(
                        "target KL",
                        min_value=0.0001,
                        max_value=10.0,
                        value=0.1,
                        step=0.01,
                        format="%.4f",
                        key=ui.KEY_TARGET_KL,
                        bind="query-params",
                    )
                    horizon = st.number_input(
                        "horizon",
                        min_value=1,
                        max_value=1_000_000,
                        value=1_000,
                        step=100,
                        key=ui.KEY_HORIZON,
                        bind="query-params",
                        help="Larger horizon = slower adaptation. The frameworks ship 10000; the "
                        "default here is smaller so the change is visible in a few hundred steps.",
                    )
                    steps = st.slider(
                        "simulated steps",
                        1,
                        1000,
                        value=300,
                        key=ui.KEY_STEPS,
                        bind="query-params",
                    )
                with o2:
                    betas = explain.simulated_betas(
                        beta,
                        observed,
                        float(target),
                        float(horizon),
                        int(mask.shape[0]),
                        int(steps),
                    )
                    ui.plot(
                        charts.beta_schedule(betas, target=float(target), observed=observed),
                        key="beta_plot",
                    )
                st.latex(
                    r"\beta \leftarrow \beta\left(1 + \operatorname{clip}\!\left("
                    r"\tfrac{\mathrm{KL}}{\mathrm{KL}_{\mathrm{target}}} - 1, -0.2, 0.2\right)"
                    r"\tfrac{n}{\mathrm{horizon}}\right)"
                )
                st.caption(
                    "An open loop: the policy does not respond to beta here, so each step sees "
                    f"this batch's KL again (n = {mask.shape[0]} samples per step); the recorded "
                    "run above closes the loop on the real KL. Observed above target: beta grows "
                    "(at most 20% x n / horizon per step); below: it shrinks."
                )

    with ui.stale_section("kl_beta"):
        beta_section()

    def placement_note(t) -> None:
        """Under a placement's token rewards: its loss term, or what each token pays."""
        if t.kl_loss is not None:
            st.metric("KL loss term (mean k3)", f"{t.kl_loss:.5f}")
        else:
            st.caption(
                f"beta = {t.beta:g}: every token pays -beta x KL; the last also gets the reward."
            )

    st.header("KL in the reward, or as a loss term?")
    in_reward = ui.kl_placement_overrides(state.framework, True, beta)
    as_loss = ui.kl_placement_overrides(state.framework, False, beta)
    k1, k2 = st.columns(2, gap="large")
    traces = {}
    for col, name, overrides in ((k1, "in the reward", in_reward), (k2, "as a loss term", as_loss)):
        with col:
            st.subheader(f"KL {name}")
            if overrides is None:
                st.info(f"{ui.framework_label(state.framework)} cannot put the KL {name}.")
                continue
            result = ui.try_trace(state, overrides=overrides)
            if isinstance(result, str):
                st.warning(result)
                continue
            traces[name] = result
    # the token rewards are computed in the browser, and redrawn there on every sidebar knob
    # move, wherever pipeline.js covers both placements; otherwise the server draws them (Plotly)
    detail = ui.page_detail(state)
    if traces and detail["placements_covered"]:
        ui.instant_token_rewards(
            ui.instant_payload(state),
            [[text.visible_whitespace(t) for t in row] for row in rollout.tokens],
            detail,
            key="kl_token_rewards",
        )
        with ui.stale_section("kl_placement_notes"):
            for col, name in zip(
                st.columns(2, gap="large"), ("in the reward", "as a loss term"), strict=True
            ):
                if name in traces:
                    with col:
                        placement_note(traces[name])
    elif traces:
        shared = scales.nice_ceiling(
            max(scales.symmetric_range(t.token_rewards, mask) for t in traces.values())
        )
        for col, name in ((k1, "in the reward"), (k2, "as a loss term")):
            if name not in traces:
                continue
            t = traces[name]
            with col:
                ui.plot(
                    heatmaps.token_reward_heatmap(
                        t, rollout, zmax=shared, title=f"Token rewards, KL {name}"
                    ),
                    key=f"token_rewards_{'reward' if name == 'in the reward' else 'loss'}",
                )
                placement_note(t)
    st.latex(r"r_t = \tilde r\,[t = T] - \beta\,\mathrm{KL}_t")
    ui.explainer(
        "**In the reward** (ROLL add_token_level_kl, verl use_kl_in_reward, OpenRLHF by default), "
        "every token's reward is lowered by beta x its KL, and the penalty flows through the returns "
        "and advantages. **As a loss term** (TRL GRPO, verl/ROLL use_kl_loss), the token rewards "
        "keep only the response reward and the KL is a separate term of the policy loss.",
        title="Two places for the same penalty",
    )

    centred_section = ui.stale_section("kl_centred")
    centred_section.subheader("Two more places: in the advantage (centred), or nowhere")
    with centred_section:
        base = traces.get("as a loss term", trace)  # advantages of the reward alone where possible
        centred = kl_placement.centred_placement(
            base.advantages, rollout.logprobs, rollout.ref_logprobs, mask, beta
        )
        a1, a2 = st.columns([3, 1], gap="large")
        with a1:
            ui.plot(
                heatmaps.heatmap(
                    centred.adjustment,
                    mask,
                    rollout=rollout,
                    title="beta x (mean KL - KL_t): what each token's advantage gains or loses",
                    quantity="adjustment",
                    signed=True,
                    zmax=scales.nice_ceiling(
                        max(scales.symmetric_range(centred.adjustment, mask), 1e-6)
                    ),
                    extra={
                        "KL_t": centred.kl,
                        "A before": base.advantages,
                        "A after": centred.advantages,
                    },
                ),
                key="kl_centred_heatmap",
            )
        with a2:
            st.metric("batch mean KL (k1)", f"{centred.mean_kl:.4f}")
            st.metric("sum of the adjustments", f"{float(centred.adjustment.sum()):.2e}")
        st.latex(r"A'_t = A_t + \beta\,(\overline{\mathrm{KL}} - \mathrm{KL}_t)")
        st.dataframe(centred.samples, hide_index=True, key="kl_centred_samples")
        ui.explainer(
            "**In the advantage** (Tinker's `incorporate_kl_penalty`, OpenPipe ART #562): the "
            "per-token KL (k1, the sampled token) is compared with the batch's mean and "
            "beta x (mean - KL_t) is added to the token's advantage. Tokens that drifted more than "
            "average lose advantage, the others gain; the adjustments sum to 0, so the KL moves the "
            "push between tokens without adding any. Unlike the reward placement it does not pass "
            "through the returns or the group normalisation; unlike the loss term it is a constant "
            "(no gradient of its own). **Nowhere** (beta = 0) is the fourth choice, and the default "
            "of 2026 (Eras page).",
            title="Four places for the penalty",
        )

    with ui.stale_section("kl_every_token"):
        st.subheader("Every token")
        tokens = tables.token_table(rollout, trace)
        st.dataframe(tokens, hide_index=True, key="kl_tokens")
        c1, c2 = st.columns(2)
        with c1:
            ui.download_csv(tokens, "kl_tokens", key="dl_kl_tokens")
        with c2:
            ui.download_trace_json(trace, key="dl_trace_kl", state=state, rollout=rollout)

    ui.back_next("kl")
