import streamlit as st

from roll_viz import ui
from roll_viz.analysis import group_health, normalisation
from roll_viz.ui import health_banner as health_ui
from roll_viz.views import normalisation_charts as charts

with ui.page_guard("Normalisation"):
    state = ui.page_setup("Normalisation")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing

    ui.lecture_title("normalisation", "The normalisation matrix")
    st.markdown(
        "Every group method computes **A = (r - mean) / (std + eps)**. They differ in where the "
        "mean and the std come from: **nothing**, the prompt's **group**, or the whole **batch**. "
        "Nine combinations, and a paper's name is one cell: GRPO is group / group, Dr. GRPO is "
        "group / none, LitePPO and ScaleRL are group mean with the batch std, REINFORCE++ is "
        "batch / batch."
    )
    st.latex(r"A_i = \frac{r_i - \mu_{\text{level}}}{\sigma_{\text{level}} + \varepsilon}")

    rollout = ui.cached_rollout(state)
    scores = ui.cached_scores(state)
    st.header("1. Group health of the current batch")
    health_ui.batch_health(state, key="group_health", era="normalisation")

    st.header("2. All nine cells on the current batch")
    matrix = normalisation.normalisation_matrix(scores, rollout.group_ids, rollout.prompts)
    ui.plot_of("norm_matrix", charts.matrix_figure, matrix)
    if len(set(rollout.group_ids.tolist())) == 1:  # say why 4 of the 9 cells repeat
        st.caption(
            "One prompt in this batch: its group is the whole batch, so every 'group' cell "
            "shows the same numbers as the 'batch' cell beside it (4 of the 9 repeat). Pick a "
            "preset with several prompts to see them differ."
        )
    ui.explainer(
        "Each panel is one (mean level, std level) pair; each dot one answer, in its prompt's "
        "colour. Down a column the baseline changes (none -> group -> batch); along a row the "
        "divisor does. A prompt whose answers all scored the same sits at exactly 0 whenever "
        "the mean is the group's, and its dots explode when the std is the group's and the mean "
        "is not (0 / 1e-6).\n\n**Try:** change G or the reward in the sidebar; pick a preset "
        "with several prompts.",
        title="What to look at",
    )
    ui.table(matrix.summary, key="norm_summary")
    ui.download_csv(matrix.samples, "normalisation_matrix", key="norm_csv")

    st.header("3. Phantom advantages from a shaped reward")
    st.markdown(
        "Reward = correct (0/1) minus a small length penalty. The prompt **hard** fails "
        "everywhere: its answers differ only by the length term, a few hundredths. Its group "
        "std is that small, so **group std** (GRPO) rescales the length noise into advantages "
        "as large as a real right/wrong gap (verl-recipe PR #125). **No std** (Dr. GRPO) and the "
        "**batch std** (LitePPO, ScaleRL) keep them small."
    )
    coef = st.slider(
        "length penalty per token",
        0.0,
        0.01,
        0.001,
        step=0.0005,
        format="%.4f",
        key="norm_length_coef",
    )
    phantom = normalisation.phantom_advantages(length_coef=coef)
    ui.plot_of("norm_phantom", charts.phantom_figure, phantom)
    st.markdown(
        f"All-fail group: std **{phantom.fail_group_std:.3g}**, largest |A| under group std "
        f"**{phantom.fail_max_abs_group:.3g}**, under the batch std "
        f"**{phantom.fail_max_abs_batch:.3g}**."
    )
    ui.table(phantom.table, key="norm_phantom_table")

    st.header("4. Zero-variance groups: what each policy does to the loss")
    st.markdown(
        "A group whose answers all scored the same has GRPO advantage 0. The frameworks treat "
        "it differently: keep it (its tokens stay in the denominator and its KL term still "
        "pulls, TRL#7068), drop it before batching (verl filter_groups, OpenRLHF dynamic "
        "filtering, ROLL std_filter), or mask it in the loss with or without changing the "
        "denominator. And 'the same' is either exact equality or std <= eps."
    )
    c1, c2 = st.columns(2)
    with c1:
        beta = st.select_slider(
            "KL coefficient beta", [0.0, 0.01, 0.04, 0.1, 0.3], value=0.04, key="norm_beta"
        )
    with c2:
        eps = st.select_slider(
            "eps of the std <= eps filter",
            [1e-8, 1e-6, 1e-4, 1e-2],
            value=1e-4,
            key="norm_eps",
            format_func=lambda x: f"{x:g}",
        )
    demo = group_health.demo_batch()
    health_ui.group_health_banner(
        demo.scores, demo.group_ids, demo.group_labels, key="norm_demo_health", solved_at=0.5
    )
    outcome = group_health.zero_variance_policies(demo, beta=float(beta), eps=float(eps))
    ui.plot_of("norm_policies", charts.policies_figure, outcome)
    ui.table(outcome.table, key="norm_policies_table")
    ui.explainer(
        "The demo batch has an all-right group, an all-wrong group, an all-wrong group whose "
        "rewards differ by a millionth (a length term), and a mixed group; the loss is TRL's "
        "default (token sum over all tokens, beta * k3 per token), at the first update.\n\n"
        "- **keep**: the flat groups add no policy gradient but their KL gradient (red) is not "
        "0, and their tokens dilute everyone else's gradient.\n"
        "- **drop**: the other groups' gradient grows by N_all / N_kept (the denominator "
        "shrinks); exact equality misses the shaped group, std <= eps catches it.\n"
        "- **mask, same denominator**: no KL pull, the scale of keep.\n"
        "- **mask, new denominator**: the same numbers as dropping (ROLL's difficulty mask).",
        title="What to look at",
    )
    ui.back_next("normalisation")
