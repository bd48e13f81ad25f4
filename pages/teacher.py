"""Teacher as reference: on-policy distillation (ROLL use_opd, SDPO) on the current batch."""

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import teacher_signal
from roll_viz.ui import health_banner as health_ui
from roll_viz.ui import teacher_page as tp
from roll_viz.views import teacher_charts, text

with ui.page_guard("Teacher as reference"):
    state = ui.page_setup("Teacher as reference")
    st.title("Teacher as reference: the KL to a teacher is the signal")
    ui.prose(
        "Keep the RL machinery and swap the **reference** for a **teacher**. The student samples "
        "as usual; the teacher scores the student's own tokens; the per-token reverse KL, "
        "log s - log t on the sampled token, becomes the advantage (ROLL **is_pure_opd**: "
        "A = -opd_kl_coef x KL) or is subtracted from the reward's advantages (ROLL "
        "**use_opd**). The teacher can be the **same model told something the student is not** "
        "(the answer, a hint: SDPO's self-distillation) or another model with the same "
        "tokenizer. Blue tokens: the teacher likes them more than the student did.",
        title="On-policy distillation in one paragraph",
    )
    rollout = ui.cached_rollout(state)
    health_ui.batch_health(state, key="opd_health")
    choice = tp.controls(state, rollout)

    scores = tp.recorded(state, rollout, choice)
    source = "recorded with the preset (no model needed)"
    if scores is None:
        scores = tp.stored(state, choice)
        source = "scored live on the model"
    if scores is None:
        st.info(
            "This teacher has not scored this batch yet. The preset batches come with their "
            "own teacher recorded; another instruction, model or batch is scored on the model "
            "that wrote the answers (two forward passes).",
            icon=":material/school:",
        )
        if st.button("Score under the teacher", key=tp.KEY_SCORE, type="primary"):
            with st.spinner("Scoring the answers under the student and the teacher..."):
                problem = tp.score_live(state, rollout, choice)
            if problem:
                st.warning(text.md_escape(problem), icon=":material/block:")
            else:
                st.rerun()
        st.stop()

    trace = ui.cached_trace(state)
    batch = ui.current_batch(state)
    signal = teacher_signal.teacher_signal(
        batch.logprobs,
        scores.teacher_logprobs,
        batch.response_mask,
        trace.advantages,
        batch.scores,
        batch.group_ids,
        tokens=rollout.tokens,
        prompts=rollout.prompts,
        exact_kl=scores.exact_kl,
        kl_penalty=choice.kl_penalty,
        coef=choice.coef,
        mixed=choice.mixed,
    )
    mode = "use_opd" if choice.mixed else "is_pure_opd"
    st.caption(
        f"Teacher scores {source}. Teacher's instruction for prompt p0: "
        f"*{text.md_line(scores.instructions[0] if scores.instructions else '')}*"
    )

    st.subheader("Per token: the teacher's advantage")
    bound = teacher_charts.signal_scale(signal)
    labels = text.sample_labels(rollout)
    ui.chips(teacher_charts.chips_key_html(bound))  # the colours' key, above the answers
    for b in range(min(len(rollout.responses), 8)):
        c1, c2 = st.columns([1, 7], vertical_alignment="center")
        c1.markdown(f"**{labels[b]}**  \nreward {float(batch.scores[b]):.3g}")
        with c2:
            ui.chips(teacher_charts.answer_chips_html(signal, list(rollout.tokens[b]), b, bound))
    if len(rollout.responses) > 8:
        st.caption(
            f"The first 8 of {len(rollout.responses)} answers; every token is in the table below."
        )

    left, right = st.columns([3, 2], gap="large")
    with left:
        ui.plot(teacher_charts.signal_bars(signal, mode, labels), key="opd_bars")
    with right:
        ui.explainer(
            "Blue bars: the **reward's** advantage of each answer (the sidebar's dialect), "
            "one number spread over its tokens. Orange bars: the **teacher's**, a different "
            "number on every token, averaged here. The reward says *which answer* was good; "
            "the teacher says *which token* it would have written differently, even in a group "
            "whose answers all scored the same (where GRPO has nothing to say).\n\n"
            "**Try:** k3 instead of kl (always >= 0: every token is pushed down a little), the "
            "mixed mode, or an instruction that gives the answer away.",
            title="What to look at",
        )

    # samples named p0/s2 as on the bars above (the CSV keeps the batch index)
    def named(df):
        return df.assign(sample=[labels[b] for b in df["sample"]])

    ui.table(named(signal.answers), key="opd_answers")
    with st.expander("Every token"):
        st.dataframe(named(signal.tokens), key="opd_tokens", hide_index=True, width="stretch")
        ui.download_csv(signal.tokens, "teacher_tokens", key="opd_tokens_csv")
    ui.back_next("teacher")
