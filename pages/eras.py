"""The recipes of record (GRPO 2024 and the frameworks of 2026), MaxRL, and the KL gradients."""

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import era_diff, kl_placement
from roll_viz.ui import era_compare
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import era_charts

with ui.page_guard("Eras"):
    state = ui.page_setup("Eras")
    st.title("The recipes of record, on one batch")
    ui.prose(
        "Five recipes, one batch. **GRPO as published** (DeepSeekMath, 2024): group mean and "
        "group std, a k3 KL term in the loss (beta 0.04), each answer's token mean averaged over "
        "answers, clip 0.2. The frameworks of record dropped the std: **prime-rl** and "
        "**Tinker** (their code) and **DeepSeek-V3.2** (secondary summaries) use the reward "
        "minus the group mean; prime-rl takes one token mean over the batch and filters "
        "zero-advantage tokens, Tinker sums its importance-sampling loss over every token, "
        "V3.2 keeps a k3 KL made unbiased by the ratio pi / pi_old. **ScaleRL / Olmo 3**: no "
        "KL, one token mean over the whole batch, clip-higher (0.2 below, 0.28 above), groups "
        "whose answers all scored the same dropped before batching, and the batch's std "
        "(ScaleRL; Olmo 3 drops it): what roll-viz called the *defaults of 2026*.",
        title="The recipes in one paragraph",
    )

    rollout = ui.cached_rollout(state)
    scores = ui.cached_scores(state)
    batch = ui.current_batch(state)
    prompts = list(rollout.prompts)
    health_ui.batch_health(state, key="eras_health")

    st.header("1. The recipes of record")
    fw = st.segmented_control(
        "Framework",
        list(ui.framework_names()),
        default=state.framework,
        format_func=ui.framework_label,
        key="eras_framework",
        required=True,
        help="Each recipe in this framework's own keys; the notes say what it cannot express.",
    )
    # the std note goes under the figure, so the figure starts in a projector's first screen
    picked = era_compare.recipe_picker("eras_pick", note=False)
    diff = None
    try:
        diff = era_diff.diff_eras(batch, fw, prompts, eras=picked) if picked else None
    except ValueError as err:
        st.error(f"The recipes cannot run on this batch in {ui.framework_label(fw)}: {err}")
    if diff is not None:  # section 1 needs a recipe; sections 2 and 3 draw regardless
        ui.plot(era_charts.era_bars(diff), key="eras_bars")
        ui.explainer(
            "One bar per answer and recipe. At the first update (policy = rollout policy) "
            "the ratio is 1 everywhere, so the clip ranges and trust-region masks do not act "
            "yet; what differs is the advantage (group std, batch std or none), who is in the "
            "loss (a filtered group has no bar under prime-rl and ScaleRL / Olmo 3), the "
            "divisor (the answer's own length x the number of answers, every token of the "
            "batch, or none: Tinker's sum) and the KL term, which in 2024 and V3.2 still pulls "
            "on answers whose advantage is 0. The middle panel is that divisor as each answer's "
            "share of the loss's weight: under a token mean a long answer weighs more, under a "
            "sequence mean every answer the same; Tinker's sum weighs the answers as a token "
            "mean does, only its scale is larger (the table below gives the weights).",
            title="What to look at",
        )
        era_compare.minority_note(picked)
        tabs = st.tabs([er.era.label for er in diff.runs.values()])
        for tab, (key, er) in zip(tabs, diff.runs.items(), strict=True):
            with tab:
                st.markdown("\n".join(f"- {item}" for item in er.era.recipe))
                st.caption(f"Sources: {er.era.sources}")
                with ui.folded(f"{ui.framework_label(fw)} config"):
                    st.json(era_diff.ERAS[key].config(fw))
                for note in diff.notes[key]:
                    st.caption(note)
        ui.table(diff.summary, key="eras_summary", point="era")
        ui.table(era_diff.long_samples(diff), key="eras_samples")
        ui.download_csv(diff.samples, "eras_per_answer", key="eras_csv")

    st.header("2. MaxRL: divide by the pass rate")
    st.info(
        "**A roll-viz estimator.** No framework release ships MaxRL (Tajwar et al. 2026, "
        "arXiv 2602.02710); a TRL pull request (MaxRLTrainer) uses the same formula. "
        "A = (r - mean) / (|mean| + 1e-6): with 0/1 rewards and pass rate p, a right answer "
        "gets (1 - p) / p, a wrong one -1, and a prompt nobody solved gets 0.",
        icon=":material/science:",
    )
    cmp = era_diff.maxrl_vs_grpo(scores, rollout.group_ids, prompts)
    ui.plot(era_charts.maxrl_bars(cmp), key="eras_maxrl")
    ui.table(cmp.groups, key="eras_maxrl_groups")
    if cmp.groups.filter(like="A right").isna().any().any():
        st.caption(era_diff.NO_RIGHT_ANSWER)
    ui.explainer(
        "GRPO's right answer gets (1 - p) / std with std ~ sqrt(p (1 - p)): the same size for a "
        "prompt solved 1 time in 4 and 3 times in 4. MaxRL's gets (1 - p) / p: 3 at p = 1/4, "
        "1/3 at p = 3/4. It is the gradient of log p instead of p, maximum likelihood of being "
        "right, so hard prompts weigh more.",
        title="What to look at",
    )

    st.header("3. The KL estimators judged by their gradient")
    st.markdown(
        "The same estimate can sit **in the reward** (r_t -= beta k, computed without a "
        "gradient: it reaches the policy only through the advantage's -A log pi) or **in the "
        "loss** (beta k is differentiated: its slope k'(x) acts on the token directly). verl's "
        "straight-through names (k1+, k3+, abs+) keep the value and take k2's gradient. "
        "**k3\\*r** is TRL's default since PR #6503 (k3 times the ratio pi / pi_old): the ratio "
        "is 1 on-policy, but its derivative is 1 too, so the slope becomes k3' + k3 = x, k2's: "
        "not a no-op for the gradient (the Silent bugs page, *k3 x ratio at ratio 1*)."
    )
    if state.sampling.policy_mode == "identical" and not state.adapted:
        ui.zero_kl_notice(
            "Policy = reference in this batch, so every KL value below is **exactly 0** "
            "(and so are the KL terms of 2024 and V3.2 above). The *pirate* preset's policy "
            "follows an extra instruction: real per-token KL.",
            key="eras_pirate",
        )
    c1, c2 = st.columns(2)
    with c1:
        beta = st.select_slider(
            "beta", [0.001, 0.01, 0.04, 0.1, 0.3, 1.0], value=0.1, key="eras_kl_beta"
        )
    with c2:
        variant = st.segmented_control(
            "Estimator",
            list(kl_placement.VARIANT_LABELS),
            default="k3",
            key="eras_kl_variant",
            required=True,
        )
    view = kl_placement.kl_view(
        batch.logprobs, batch.ref_logprobs, batch.response_mask, float(beta), tokens=rollout.tokens
    )
    k1, k2 = st.columns([3, 2], gap="large")
    with k1:
        ui.plot(era_charts.kl_token_figure(view, variant), key="eras_kl_tokens")
    with k2:
        ui.plot(era_charts.kl_summary_bars(view), key="eras_kl_summary")
    ui.explainer(
        "Each dot is one token of the batch at x = log pi - log pi_ref, per unit weight (a "
        "plain token sum: a framework then multiplies by its aggregation weight, 1 / tokens "
        "for a token mean). As a loss, k1's slope is "
        "1 everywhere (pure noise: its expected gradient is 0), k2's is x, k3's is 1 - e^-x. In "
        "the reward (REINFORCE, gamma 1, no baseline), the token's push is beta times the KL "
        "still to come in its answer, whatever the estimator's slope; a '+' variant changes "
        "nothing there.",
        title="What to look at",
    )
    st.dataframe(view.summary, key="eras_kl_table", hide_index=True, width="stretch")
    st.subheader("In the reward, through this framework's own advantages")
    try:
        through = kl_placement.through_the_advantage(
            batch, state.framework, dict(state.config), float(beta), variant.rstrip("+")
        )
    except ValueError as err:
        st.info(f"{ui.framework_label(state.framework)}: {err}", icon=":material/info:")
    else:
        labels = [f"{i}: {rollout.prompts[g]}" for i, g in enumerate(rollout.group_ids.tolist())]
        ui.plot(
            era_charts.in_reward_share_bars(
                through.share.sum(-1).tolist(),
                labels,
                f"{ui.framework_label(state.framework)}, sidebar estimator, "
                f"{variant.rstrip('+')} in the reward, beta {beta:g}",
            ),
            key="eras_kl_through",
        )
        st.caption(
            "The sidebar's estimator with the KL moved into the reward: the loss gradient with "
            "the penalty minus the one without. The penalty reaches the policy only through the "
            "advantages (the pipeline computes it without a gradient); an outcome estimator "
            "such as GRPO folds it into each answer's score and normalises it with the group."
        )
    st.subheader("In expectation, on one next-token distribution")
    seed = st.number_input("toy distribution seed", 0, 999, 0, key="eras_kl_seed")
    st.dataframe(
        kl_placement.expected_table(*kl_placement.toy_step(int(seed))),
        key="eras_kl_expected",
        hide_index=True,
        width="stretch",
    )
    st.caption(
        "Exact sums over a 6-token vocabulary: k1 in the reward and k2 (or any '+') as a loss "
        "follow grad KL(pi || ref); k1 as a loss gives 0; k3 as a loss follows the reverse "
        "KL(ref || pi)."
    )
    ui.download_csv(view.tokens, "kl_gradient_per_token", key="eras_kl_csv")
    ui.back_next("eras")
