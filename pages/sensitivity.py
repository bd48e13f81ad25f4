import streamlit as st

from roll_viz import ui
from roll_viz.analysis import common, sweep
from roll_viz.ui import health_banner as health_ui
from roll_viz.ui import your_run_page as runs
from roll_viz.views import compare_charts as charts_compare

with ui.page_guard("Sensitivity"):
    state = ui.page_setup("Sensitivity")
    fw = state.framework
    aliases = ui.ALIASES[fw]
    generic = dict(state.generic)
    config = state.config

    st.title("Sensitivity: how much do beta, gamma, lambda and G matter?")
    with ui.folded("How a sweep is summarised"):
        st.markdown(
            "Pick one knob (or two) and sweep it over a grid. Every grid point reruns the whole "
            "reward-to-advantage pipeline on the **same cached samples** (no new model calls), then "
            "summarises the advantages in three numbers:"
        )
        # one formula per line: they wrap on a narrow screen instead of running off the edge
        st.latex(r"\text{spread} = \operatorname{std}_{(b,t)\ \text{valid}} A_{b,t}")
        st.latex(
            r"\text{sign flips} = \frac{\#\{(b,t) : \operatorname{sign} A_{b,t} \ne"
            r"\operatorname{sign} A^{\text{now}}_{b,t}\}}{\#\text{valid tokens}}"
        )
        st.latex(r"\text{agreement} = \operatorname{corr}(A^{\text{est}}, A^{\text{other}})")

    LABELS = {
        "beta": "beta (KL coefficient)",
        "gamma": "gamma (discount)",
        "lam": "lambda (GAE)",
        "G": "G (samples per prompt)",
    }
    # URL values of bound selectboxes are the displayed option strings, so options are kept short.
    SHORT = {"beta": "beta", "gamma": "gamma", "lam": "lambda", "G": "G"}
    FROM_SHORT = {v: k for k, v in SHORT.items()}
    est_key = aliases.get("estimator")
    estimators = list(ui.CHOICES[fw].get(est_key, ())) if est_key else []
    current_est = config.get(est_key) if est_key else None

    c1, c2, c3, c4 = st.columns(4)
    with c1:
        param = FROM_SHORT[
            st.selectbox(
                "Sweep",
                [SHORT[p] for p in common.SWEEP_PARAMS],
                index=list(common.SWEEP_PARAMS).index("lam"),
                key="sw",
                bind="query-params",
                help="The knob on the x axis: beta (KL coefficient), gamma (discount), lambda "
                "(GAE) or G (samples per prompt, by keeping the first G of each group).",
            )
        ]
    with c2:
        others = ["none"] + [SHORT[p] for p in common.SWEEP_PARAMS if p != param]
        param2 = st.selectbox(
            "...against (2-D grid)",
            others,
            key="sw2",
            bind="query-params",
            help="A second knob turns the line plots into a heatmap; none = a 1-D sweep.",
        )
    with c3:
        compare_options = [e for e in estimators if e != current_est] or estimators
        preferred = "grpo" if current_est == "gae" else "gae"
        if preferred not in compare_options:
            preferred = compare_options[0]
        compare = st.selectbox(
            "Compare with estimator",
            compare_options,
            index=compare_options.index(preferred),
            key="sw_cmp",
            bind="query-params",
            help=f"Agreement = correlation between the sidebar's estimator ({current_est}) and this "
            "one, token by token, at each grid point.",
        )
    with c4:
        critic = ui.critic_radio(key="sw_critic")
    param2 = None if param2 == "none" else FROM_SHORT[param2]
    health_ui.batch_health(state, key="sw_health", era="sensitivity")

    base_config = dict(config)
    notes = []
    swept = {param} | ({param2} if param2 else set())
    if "beta" in swept:
        base_config, beta_notes = sweep.beta_sweep_config(fw, config)
        notes += beta_notes
    if "beta" in swept and sweep.kl_is_zero(ui.cached_rollout(state)):
        notes.append(
            "This batch was sampled with policy = reference, so every KL is exactly 0 and beta "
            "cannot change anything. Pick a steered preset (e.g. 'pirate') or the steered policy."
        )
    for p in swept - {"G"}:
        if aliases.get(p) is None:
            notes.append(f"{fw} has no {LABELS[p]} setting: that axis changes nothing.")
    for note in notes:
        st.info(note, icon=":material/info:")

    batch = ui.current_batch(state, values=critic)
    G = state.group_size
    values = runs.capped_grid(sweep.default_grid(param, G, points=11 if param2 is None else 7))
    values2 = runs.capped_grid(sweep.default_grid(param2, G, points=7)) if param2 else ()
    compare_config = dict(base_config)
    if est_key:
        compare_config[est_key] = compare

    @st.cache_data(show_spinner="Running the sweep...", max_entries=64)
    def run_sweep(key: tuple, p1, v1, p2, v2, cfg: tuple, cmp_cfg: tuple, _batch):
        return sweep.sweep(_batch, fw, dict(cfg), p1, v1, p2, v2, dict(cmp_cfg))

    cache_key = (state.source, state.preset, state.model, state.sampling, state.reward, critic, fw)
    table = run_sweep(
        cache_key,
        param,
        values,
        param2,
        values2,
        tuple(sorted(base_config.items(), key=lambda kv: kv[0])),
        tuple(sorted(compare_config.items(), key=lambda kv: kv[0])),
        _batch=batch,
    )
    errors = sorted({e for e in table["error"] if e})
    for e in errors:
        st.warning(f"Some grid points are not valid in {fw}: {e}", icon=":material/warning:")

    def current_value(p: str) -> float:
        return float(G) if p == "G" else float(generic.get(p, 0.0) or 0.0)

    if param2 is None:
        ui.plot(
            charts_compare.sensitivity_lines(table, param, current_value(param)),
            key="sw_lines",
        )
        if sweep.sweep_is_flat(table, "spread"):
            st.info(
                f"The spread does not move: {LABELS[param]} has no effect on {fw}'s {current_est} "
                "advantages with these settings.",
                icon=":material/info:",
            )
        ui.explainer(
            "- **Spread** (left): how large the advantages are overall. Whitening and group "
            "normalization pin it near 1; raw returns let it grow with gamma and lambda.\n"
            "- **Sign flips** (middle): the share of tokens that would be pushed the other way "
            "than with the sidebar's current value (dotted line, where it is 0).\n"
            f"- **Agreement** (right): correlation between {current_est} and {compare}; near 1 "
            "they give the same signal, near 0 they disagree token by token.\n\n"
            "**Try:** sweep lambda with GAE (from one-step TD at 0 to Monte-Carlo at 1); sweep "
            "beta with the KL in the reward; sweep G with GRPO and watch small groups flip signs.",
            title="What to look at",
        )
    else:
        metric = st.radio(
            "Heatmap shows",
            list(charts_compare.METRICS),
            captions=[charts_compare.METRICS[m][0] for m in charts_compare.METRICS],
            key="sw_metric",
            horizontal=True,
            bind="query-params",
        )
        ui.plot(charts_compare.sensitivity_heatmap(table, param, param2, metric), key="sw_heatmap")
        ui.explainer(
            "Each cell is one full pipeline run at that pair of values. Spreads and fractions use a "
            "sequential colour scale (0 = dark); the correlation is signed and uses a diverging "
            "scale with white at 0. Hover a cell for its number.",
            title="What to look at",
        )

    # under the sweep: the sweep is the page's point and opens a projector's first screen
    st.subheader("The live point: move it and the advantages recompute in your browser")
    ui.instant_panel(
        ui.instant_payload(state, critic),
        {k: ui.generic_value(state, k) for k in ("estimator", "beta", "gamma", "lam")},
        key="sw_instant",
        knobs=("estimator", "beta", "gamma", "lam"),
    )
    ui.table(table, key="sw_table")
    ui.download_csv(table, f"sweep_{param}" + (f"_{param2}" if param2 else ""), key="sw_csv")

    ui.back_next("sensitivity")
