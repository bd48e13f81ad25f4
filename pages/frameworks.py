import streamlit as st

from roll_viz import ui
from roll_viz.analysis import compare, sweep
from roll_viz.ui import frameworks_page as fw_ui
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import compare_charts as charts_compare
from roll_viz.views import text

with ui.page_guard("Frameworks"):
    state = ui.page_setup("Frameworks")

    ui.lecture_title("frameworks", "Frameworks: one batch, four dialects")
    with ui.folded("The conventions, in formulas"):
        st.markdown(
            'ROLL, verl, OpenRLHF and TRL all say "GRPO" or "REINFORCE++", but they differ in '
            "small conventions: biased or unbiased std, which epsilon, whether the KL goes into the "
            "reward or the loss, whether advantages are whitened over all tokens. Here the **same "
            "samples and rewards** go through each dialect with the sidebar's beta, gamma, lambda, KL "
            "estimator and clip, so every difference you see comes from a convention."
        )

        # one formula per line: they wrap on a narrow screen instead of running off the edge
        st.latex(
            r"A_i = \frac{r_i - \operatorname{mean}_{g(i)} r}{\operatorname{std}_{g(i)} r + \varepsilon}"
            r"\qquad \varepsilon = \underbrace{10^{-6}}_{\text{ROLL, verl}},\ "
            r"\underbrace{10^{-9}}_{\text{OpenRLHF}},\ \underbrace{10^{-4}}_{\text{TRL}}"
        )
        st.latex(
            r"\operatorname{whiten}(A) = \frac{A - \bar A_{\text{tokens}}}"
            r"{\sqrt{\operatorname{var}_{\text{tokens}}(A) + 10^{-8}}}"
        )
        st.caption(
            "Same formula, different constants and different sets it is computed over: the group "
            "normalization above (per prompt, one number per answer) and the token-weighted whitening "
            "(over every valid token of the batch: long answers count more). The notes below list "
            "exactly which ones each dialect applied."
        )

    generic = compare.canonical_generic(state.framework, dict(state.generic))
    estimators = list(sweep.ESTIMATOR_EQUIVALENTS)
    default_est = compare.generic_estimator(state.framework, state.config)
    c1, c2, c3 = st.columns([2, 1, 1])
    with c1:
        estimator = st.selectbox(
            "Estimator (each dialect's closest equivalent)",
            estimators,
            index=estimators.index(default_est),
            key="fw_est",
            bind="query-params",
            help="The generic family; the table below lists the exact setting used in each dialect.",
        )
    with c2:
        reference = st.selectbox(
            "Compare against",
            list(ui.framework_names()),
            index=list(ui.framework_names()).index(state.framework),
            key="fw_ref",
            bind="query-params",
            help="Differences are measured against this dialect.",
        )
    with c3:
        critic = ui.critic_radio(key="fw_critic")

    @st.cache_data(show_spinner=False, max_entries=64)
    def comparison(key: tuple, settings: tuple, est: str, ref: str, fws: tuple, _batch, _prompts):
        return compare.compare_frameworks(
            _batch, dict(settings), est, frameworks=fws, reference=ref, prompts=_prompts
        )

    rollout = ui.cached_rollout(state)
    batch = ui.current_batch(state, values=critic)
    data_key = (state.source, state.preset, state.model, state.sampling, state.reward, critic)
    cmp = comparison(
        data_key,
        tuple(sorted(generic.items())),
        estimator,
        reference,
        ui.framework_names(),  # the registry: a dialect registered later is a new comparison
        _batch=batch,
        _prompts=rollout.prompts,
    )
    health_ui.batch_health(state, key="fw_health", era="frameworks")
    for fw, why in cmp.skipped.items():
        st.info(f"{ui.framework_label(fw)}: {why}.", icon=":material/block:")

    ran = list(cmp.traces)
    if not ran:
        st.error("No dialect can run this combination; pick another estimator.")
        st.stop()

    left, right = st.columns([3, 2])
    with left:
        ui.plot(charts_compare.frameworks_heatmap(cmp.samples, ran), key="fw_heatmap")
    with right:
        ui.plot(charts_compare.frameworks_diff_bars(cmp.summary), key="fw_diff")
        ui.explainer(
            "Each row of the heatmap is one sampled answer, each column a dialect; the colour is "
            "the answer's advantage averaged over its tokens (blue pushes the answer up, red "
            "down, white is 0, same scale for every column). Columns that look alike use "
            "equivalent conventions on this batch.\n\n"
            f"The bars give the largest difference to **{cmp.reference}** over all samples "
            "(reward) and all valid tokens (advantage).\n\n"
            "**Try:** turn 'KL in the reward' on in the sidebar (TRL keeps it in the loss), set "
            "G = 2, or switch to reinforce++ to see token-weighted whitening differ.",
        )

    st.subheader("What each dialect did differently")
    st.caption(
        f"Conventions each dialect applied (Trace.notes) that {cmp.reference} did not, and vice "
        "versa. A dialect whose numbers match the reference exactly is marked: its conventions "
        "differ in wording or do not matter on this batch."
    )
    summary = cmp.summary.set_index("dialect")
    for fw in ran:
        if fw == cmp.reference:
            continue
        diff = float(summary.loc[fw, "max |diff| advantage"])
        verdict = (
            ":green-badge[same numbers]"
            if diff < 1e-9
            else f":orange-badge[max advantage difference {diff:.3g}]"
        )
        with st.container(border=True):
            st.markdown(f"**{text.md_escape(ui.framework_label(fw))}** {verdict}")
            only = cmp.note_diffs.get(fw, ())
            ref_only = cmp.reference_only.get(fw, ())
            lines = [f"- {text.md_escape(n)}" for n in only] or ["- (no conventions of its own)"]
            st.markdown(f"Only in {fw}:\n" + "\n".join(lines))
            if ref_only:
                st.markdown(
                    f"Only in {cmp.reference}:\n"
                    + "\n".join(f"- {text.md_escape(n)}" for n in ref_only)
                )

    st.subheader("Numbers")
    ui.table(cmp.summary, key="fw_summary", point="dialect")
    ui.download_csv(cmp.summary, "frameworks_summary", key="fw_summary_csv")
    ui.table(cmp.samples, key="fw_table")
    ui.download_csv(cmp.samples, "frameworks_per_sample", key="fw_table_csv")
    with st.expander("Each dialect's full config and notes"):
        for fw, trace in cmp.traces.items():
            st.markdown(f"**{fw}**")
            st.json({"config": dict(trace.config), "notes": list(trace.notes)}, expanded=False)
            st.download_button(
                f"Download the whole {fw} trace (trace_{fw}.json)",
                data=lambda t=trace: ui.trace_json(t, state, rollout).encode(
                    "utf-8"
                ),  # built only on click
                file_name=f"trace_{fw}.json",
                mime="application/json",
                key=f"fw_json_{fw}",
                on_click="ignore",
                icon=":material/data_object:",
            )

    fw_ui.recipes_of_record()
    fw_ui.additions_2026()

    ui.back_next("frameworks")
