"""Your run: open a ROLL, verl, TRL, UNIPO (or plain) dump and walk every page on any step."""

import streamlit as st

from roll_viz import ui
from roll_viz.analysis import downsampling as pods
from roll_viz.analysis import history
from roll_viz.ui import episodes_page as episodes
from roll_viz.ui import your_run_page as runs
from roll_viz.views import history_charts, text

with ui.page_guard("Your run"):
    state = ui.page_setup("Your run")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing
    st.title("Your run: a real training run, step by step")
    ABOUT = (
        "Open what ROLL (`save_logging_board_dir`, `rollout_dump_dir`), verl (`rollout_data_dir`), "
        "TRL (`completions_*.parquet`), UNIPO or roll-viz's own trainer wrote, or a plain CSV / "
        "JSONL with prompt, response and reward. An ATIF file (agent trajectories) opens the "
        "Episodes page's mask and credit views here. Pick a step and press **Use this step on every "
        "page**: Rewards, Token KL, Advantages, Local vs global, Frameworks and Sensitivity then "
        "show that step of your run. Nothing in a file is executed."
    )

    # --- 1. open a run --------------------------------------------------------------------------
    choices: list[str] = []
    folder = runs.runs_folder()
    if folder is not None:
        choices += [f"dir:{name}" for name in runs.allowed_runs()]
    # on a projector the words and the uploader fold into one expander (the run comes from the
    # folder); expanders do not nest, so the explainer is plain text there
    with ui.folded("What am I looking at? Upload a dump"):
        if ui.is_present():
            st.markdown(ABOUT)
        else:
            ui.explainer(ABOUT)
        uploaded = runs.uploader()
    if uploaded:
        try:
            st.session_state["_run_uploaded"] = runs.save_uploaded(uploaded)
        except ValueError as err:
            st.error(text.md_escape(str(err)), icon=":material/error:")
    if st.session_state.get("_run_uploaded"):
        choices.insert(0, st.session_state["_run_uploaded"])
    if folder is None:
        st.caption(
            f"To list runs from a folder, start the server with {runs.RUNS_ENV}=/path/to/runs "
            "(only that folder's entries can be opened)."
        )
    if not choices:
        st.info("Upload a file, or ask whoever runs the server for a runs folder.")
        ui.stop_page("your_run")
    run_id = st.selectbox(
        "Run", choices, format_func=lambda c: c.split(":", 1)[1].split("/")[-1], key="run_pick"
    )
    # an ATIF file holds agent trajectories, not a run of samples: the Episodes page's views
    try:
        path = runs.resolve(run_id)
    except ValueError as err:
        st.error(f"Cannot open this run: {text.md_escape(str(err))}", icon=":material/error:")
        ui.stop_page("your_run")
    if path.is_file() and episodes.is_atif(path):
        st.header("Agent trajectories (ATIF): the mask and credit per turn")
        data = episodes.atif_from_path(path, run_id.split(":", 1)[1].split("/")[-1])
        if data is not None:
            st.caption(text.md_escape(data.source))
            episodes.draw_views(data, prefix="yr")
        ui.stop_page("your_run")
    try:
        version = runs.run_version(run_id)  # the caches below read a rewritten file anew
        run = runs.open_cached(run_id, version)
    except (ValueError, OSError) as err:
        st.error(f"Cannot open this run: {text.md_escape(str(err))}", icon=":material/error:")
        ui.stop_page("your_run")

    with ui.folded("What was detected in the run"):
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Format", run.format, help=run.label)
        c2.metric("Steps", len(run.steps))
        c3.metric("Samples (last step)", run.summaries[-1].samples if run.summaries else 0)
        c4.metric("Rows skipped", len(run.warnings) + run.warnings_dropped)
        st.caption(
            text.md_escape(
                f"{run.label}. Present: {', '.join(run.present) or 'scores only'}. "
                f"Missing: {', '.join(run.missing) or 'nothing'}."
            )
        )
        if "logprobs" in run.missing:
            st.info(
                "This file has no token log-probs: the KL views have nothing to show (KL is drawn "
                "as 0 and said so); rewards, advantages and normalization work on its scores.",
                icon=":material/info:",
            )
        # on a projector this list is already inside the folded block (expanders do not nest)
        problems_title = "What was detected, and problems by file, line and field"
        with st.container() if ui.is_present() else st.expander(problems_title):
            for note in run.notes:
                st.markdown(f"- {text.md_escape(note)}")
            for warning in run.warnings[:50]:
                st.markdown(f"- {text.md_escape(str(warning))}")
    if not run.steps:
        st.warning("The file has no steps with samples.")
        ui.stop_page("your_run")

    # --- 2. choose a step and make it the data of every page -----------------------------------
    pick, use = st.columns([2, 1], vertical_alignment="bottom")  # the button label whole
    step_no = pick.select_slider(
        "Step", options=list(run.steps), value=run.steps[-1], key="run_step"
    )
    source = f"run:{run_id}#{step_no}"
    active = st.session_state.get(ui.state.KEY_RUN_SOURCE) == source
    use.button(
        "Use this step on every page" if not active else "This step is the data of every page",
        key="run_use",
        type="primary",
        disabled=active,
        icon=":material/input:",
        on_click=ui.use_run_step,
        args=(run_id, step_no),
    )
    step = runs.step_cached(run_id, step_no, version)
    with ui.folded("How this step was read"):
        for note in step.notes:
            st.caption(text.md_escape(note))

    # --- 3. history across steps ----------------------------------------------------------------
    heading, choose = st.columns([1, 2], vertical_alignment="bottom")
    heading.subheader("History across steps")
    table = runs.history_cached(run_id, version)  # once per file as it is
    what = choose.segmented_control(
        "Quantity",
        ["reward", "advantage", "kl_k1", "kl_k3", "length"],
        default="reward",
        required=True,
        key="run_what",
    )
    long = runs.distributions_cached(run_id, version, what)
    if long.empty:
        st.info(f"The file has no {what}.")
    else:
        ui.plot(history_charts.step_distributions(long, what), key="run_dist")
    ui.plot(history_charts.zero_signal_share(table), key="run_zero")
    zero = table.loc[table["step"] == step_no, "zero_signal_ids"].iloc[0]
    st.markdown(
        f"Step {step_no}: **{text.count(len(zero), 'group')}** of "
        f"{len(step.prompts)} with every reward equal (no learning signal)."
    )
    if zero:
        summary = run.summary(step_no)
        rows = [
            {
                "group": summary.group_labels[g],
                "prompt": summary.prompts[g][:120],
                "rewards": ", ".join(
                    f"{v:g}" for v in summary.scores[summary.group_ids == g].tolist()
                ),
            }
            for g in range(summary.num_prompts)
            if summary.group_labels[g] in zero
        ]
        st.dataframe(rows, hide_index=True, key="run_zero_table")
    metrics = runs.metrics_cached(run_id, version)
    if not metrics.empty:
        with st.expander("The framework's own metrics per step"):
            st.dataframe(metrics, hide_index=True, key="run_metrics")
    with st.expander("Per-step statistics (table)"):
        st.dataframe(table.drop(columns=["zero_signal_ids"]), hide_index=True, key="run_history")
        ui.download_csv(table.drop(columns=["zero_signal_ids"]), "run_history", key="dl_run_hist")

    # --- 4. cross-check the file's advantages ---------------------------------------------------
    if run.summary(step_no).advantages is not None:
        st.header("Cross-check: the file's advantage beside roll-viz's")
        try:
            check = history.cross_check(run.summary(step_no))
        except ValueError as err:
            st.warning(text.md_escape(str(err)))
        else:
            mismatches = int((~check["match"]).sum())
            st.markdown(
                f"**{mismatches}** of {len(check)} samples differ from roll-viz's TRL "
                "(scale_rewards=group, eps 1e-4); `explained_by` names the convention that "
                "reproduces the file's number."
            )
            st.dataframe(check, hide_index=True, key="run_cross_check")

    # --- 5. PODS --------------------------------------------------------------------------------
    st.header("PODS: which m of the n rollouts to train on")
    counts = step.group_ids.bincount()
    n = int(counts.max()) if counts.numel() else 0
    if n < 3:
        st.info("PODS needs groups of at least 3 rollouts.")
    else:
        if n - 1 > 2:
            m = st.slider(
                f"Rollouts kept per prompt m (of n = {n})",
                2,
                n - 1,
                value=max(2, n // 2),
                key="run_m",
            )
        else:
            m = 2
            st.caption(f"n = {n} rollouts per prompt: keeping m = 2.")
        result = pods.compare_step(step.scores, step.group_ids, tuple(step.group_labels), m)
        ui.plot(history_charts.pods_groups(result.results, result.group_labels), key="run_pods")
        summary_rows = [
            {
                "method": method,
                "mean std before": float(res.std_before.mean()),
                "mean std after": float(res.std_after.mean()),
                "zero-signal prompts after": int(res.zero_signal.sum()),
            }
            for method, res in result.results.items()
        ]
        st.dataframe(summary_rows, hide_index=True, key="run_pods_table")
        st.caption(
            "Max-variance (PODS) keeps the k best and m - k worst rollouts, the subset with the "
            "largest reward variance; advantages are normalized over the kept subset. Keeping the "
            "top m collapses the spread (often to zero signal); a random m does no better than "
            "training on all n."
        )
        sweep_rows = runs.pods_sweep_cached(
            run_id, version, step_no, m, result.results["max_variance"].rewards
        )
        ui.plot(history_charts.pods_sweep(sweep_rows), key="run_pods_sweep")
    ui.back_next("your_run")
