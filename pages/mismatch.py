"""Beyond one step: the sampler is not the trainer (mu != pi_old) and what each correction does."""

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import mismatch
from roll_viz.ui import mismatch_page as page
from roll_viz.ui import mismatch_stale, sequence_section
from roll_viz.views import mismatch_charts as charts

with ui.page_guard("Sampler ≠ trainer"):
    state = ui.page_setup("Sampler ≠ trainer")
    st.title("Sampler ≠ trainer: μ is not π_old")
    st.markdown(
        "The engine that **sampled** the tokens (bf16 or int8 kernels, a top-p sampler) gives "
        "them log-probs **μ**; the trainer **recomputes** them as **π_old**. They differ, so the "
        "ratio at the first update is not 1: π_θ/μ = (π_old/μ)·(π_θ/π_old)."
    )
    rollout = ui.cached_rollout(state)
    source, value = page.source_controls()
    got = page.behaviour_for(state, rollout, source, value)
    if got is not None:
        trace = ui.cached_trace(state)
        settings = page.current_settings()
        lab = mismatch.mismatch_lab(got.old, got.mu, got.mask, trace.advantages, settings)

        st.header("1. d = log π_old − log μ, token by token")
        c1, c2 = st.columns([3, 2])
        with c1:
            ui.plot(charts.delta_histogram(lab), key="mm_hist")
        with c2:
            ui.table(page.stats_table(lab, got.outside), key="mm_stats", share=0.4)
        ui.plot(charts.delta_heatmap(lab, rollout), key="mm_heat")
        ui.explainer(
            "Each cell is one sampled token: blue where the trainer's float32 recompute gives it "
            "more probability than the sampler did, red where less. bf16 keeps 8 bits of "
            "mantissa, so its logits round by about 0.4 %: a few hundredths of a nat per token. "
            "int8 rounds the weights: more. A top-p / top-k sampler reports log-probs "
            "renormalised over the kept tokens, so d = log S <= 0 on every token (TRL#6789). "
            "fp32 against itself is exactly 0.\n\n**Try:** switch the source; open the "
            "thresholds in section 3.",
            title="What to look at",
        )
        top = page.top_tokens(lab, rollout, got.old, got.mu)
        st.caption(f"The {len(top)} tokens with the largest |d| (sample as on the heatmap).")
        st.dataframe(top, hide_index=True, key="mm_top")

        st.header("2. The two factors of π_θ / μ")
        page.staleness_control()
        ui.plot(charts.two_factor_figure(lab, rollout), key="mm_two")
        st.markdown(page.ess_line(lab))

        st.header("3. What each correction does")
        with st.expander("Thresholds of every framework (each under its own name)"):
            page.threshold_controls()
        ui.plot(charts.corrections_figure(lab.table), key="mm_corr")
        ui.table(lab.table[page.table_columns(lab.table)], key="mm_table")
        ui.download_csv(lab.table, "rollout_corrections", key="mm_csv")
        index = page.pick_correction(lab)
        st.caption(page.note_of(lab, index))
        ui.plot(charts.correction_heatmap(lab, index, rollout), key="mm_weights")
        ui.plot(charts.gradient_figure(lab, index), key="mm_grad")
        ui.explainer(
            "The loss is PPO-clip (eps 0.2), token mean over the batch, with the sidebar's "
            "advantages. A correction multiplies each token's loss by its weight: TIS truncates "
            "large weights, IcePop and the masks zero them (the token still counts in the "
            "mean), verl's rejection (RS, MIS) removes the token from the mean. With s = 0 a "
            "masked token has no gradient at all; a truncated one has a smaller one.",
            title="Loss and gradient",
        )

        st.header("4. Sequence-level masks: whole responses in or out (and prime-rl's loss)")
        sequence_section.section(lab, got.old, got.mu, trace.advantages, source, rollout)

        st.header("5. Three policies: the sampler k steps behind the trainer")
        mismatch_stale.section(state, rollout, got.old, got.mu, got.mask, trace.advantages)
    ui.back_next("mismatch")
