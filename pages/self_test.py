import json

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import selftest
from roll_viz.ui import rollout_engine
from roll_viz.views import text

with ui.page_guard("Self-test"):
    state = ui.page_setup("Self-test")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing

    st.title("Self-test: is the math right, right now?")
    with ui.folded("What the checks compare"):
        st.markdown(
            "These checks run live on the data the other pages show. They compare the pipeline with "
            "numbers computed by hand (docs/reference-values.md, written into the checks as literals), with "
            "an exact enumeration of the KL, and with properties that must hold exactly. The unit "
            "tests run the very same functions, so a green page here is a green test suite there."
        )
        st.latex(
            r"A_i = \frac{r_i - \bar r}{\operatorname{std}(r) + \varepsilon}:\quad "
            r"r = (8.2,\ 6.5,\ 9.1) \;\Rightarrow\; A \approx (0.2020,\ -1.0856,\ 0.8836)"
        )
        st.latex(
            r"\mathbb{E}_{y\sim p}[k_1] = \mathbb{E}_{y\sim p}\!\left[\log\tfrac{p(y)}{q(y)}\right]"
            r"= \mathbb{E}_{y\sim p}[k_3] = \mathbb{E}_{y\sim p}\!\left[\tfrac{q(y)}{p(y)} - 1 - "
            r"\log\tfrac{q(y)}{p(y)}\right] = \mathrm{KL}(p\,\|\,q)"
        )

    @st.cache_data(show_spinner="Running the checks...", max_entries=32)
    def checks_for(key: tuple, _rollout, _batch):
        return selftest.run_self_tests(_rollout, _batch)

    rollout = ui.cached_rollout(state)
    batch = ui.current_batch(state)
    # The checks depend on the samples and rewards only, not on the sidebar's hyperparameters.
    checks = checks_for(
        (state.source, state.preset, state.model, state.sampling, state.reward),
        _rollout=rollout,
        _batch=batch,
    )
    n_pass = sum(c.passed for c in checks)

    c1, c2, c3 = st.columns(3)
    c1.metric("Checks passed", f"{n_pass} / {len(checks)}")
    c2.metric(
        "Samples x tokens checked",
        f"{batch.response_mask.shape[0]} x {batch.response_mask.shape[1]}",
    )
    c3.metric("Data", "live model" if state.live else f"preset {state.preset}")
    if n_pass == len(checks):
        st.success("Every check passes on the current batch.", icon=":material/check_circle:")
    else:
        failed = ", ".join(c.name for c in checks if not c.passed)
        st.error(f"Failing: {text.md_escape(failed)}", icon=":material/error:")

    rollout_engine.self_test_line()  # the operator's engine vs the in-process model, if set
    table = selftest.checks_table(checks)
    st.dataframe(table, key="st_table", hide_index=True, width="stretch")
    ui.download_csv(table, "self_test", key="st_csv")

    for check in checks:
        badge = (
            ":green-badge[:material/check: pass]"
            if check.passed
            else ":red-badge[:material/close: FAIL]"
        )
        label = f"{badge} **{text.md_escape(check.name)}** — {text.md_escape(check.summary)}"
        with st.expander(label, expanded=not check.passed):
            if check.description:
                st.markdown(text.md_escape(check.description))
            st.code(json.dumps(check.detail, indent=1, default=str), language="json")

    ui.explainer(
        "- **seed example** rows: the 8.2 / 6.5 / 9.1 group in each dialect's own estimator, "
        "against the values printed in docs/reference-values.md (T1, T2, T4, T5, T14).\n"
        "- **at every position**: the same group placed on every row of the current batch's "
        "response mask, so padding and lengths are the real ones.\n"
        "- **E_p[k1] = E_p[k3]**: the two unbiased KL estimators average to the exact KL.\n"
        "- **KL = 0**: an identical policy has zero KL, token by token.\n"
        "- **masks never leak**: padding stays exactly 0 and garbage there changes nothing.\n\n"
        "**Try:** switch the preset, G or the policy mode in the sidebar: the checks rerun on the "
        "new batch.",
        title="What is checked",
    )

    ui.back_next("self_test")
