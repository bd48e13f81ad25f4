"""Training: the whole loop (sample -> reward -> KL -> advantages -> update), step after step."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import run_files, training_mu, training_stale, training_steps
from roll_viz.ui import training_demos as demos
from roll_viz.ui import training_page as tr
from roll_viz.ui import training_view as tv
from roll_viz.views import training_charts


def _start(state, slot: str) -> None:
    bundle = ui.cached_models(state.model)
    settings, _ = tr.base_settings(state, bundle.spec)
    tr.start_run(bundle, slot, settings)


def _start_compare(state, knob: str) -> None:
    bundle = ui.cached_models(state.model)
    base, _ = tr.base_settings(state, bundle.spec)
    for slot, (label, changes) in zip(tr.SLOTS, tr.KNOBS[knob], strict=False):
        tr.start_run(bundle, slot, tr.vary(base, label, changes))


def _start_hacking(state) -> None:
    bundle = ui.cached_models(state.model)
    base, _ = tr.base_settings(state, bundle.spec)
    base = tr.vary(
        base,
        "",
        {
            "reward": tr.HACK_REWARD,
            "lr": 1e-3,
            "framework": "roll",
            "config": {"adv_estimator": "grpo"},
            "steps": max(base.steps, tr.HACK_STEPS),
        },
    )
    tr.start_run(bundle, "A", tr.vary(base, "beta = 0", {"beta": 0.0, "beta_mode": "fixed"}))
    tr.start_run(
        bundle,
        "B",
        tr.vary(base, f"beta = {tr.HACK_BETA:g}", {"beta": tr.HACK_BETA, "beta_mode": "fixed"}),
    )


with ui.page_guard("Training"):
    state = ui.page_setup("Training")
    tr.link_beta()  # a link's beta=x trains at x (the page's own tr_beta= wins)
    ui.lecture_title("training", "Training: the whole loop, step after step")
    ui.prose(
        "Every other page shows **one** step. Here the loop runs: sample G answers per prompt "
        "from the policy, score them, compute the per-token KL to the reference, turn rewards "
        "into advantages in the sidebar's framework and estimator, update the policy (a LoRA "
        "adapter over the shared model), and again. The policy you train is yours alone; the "
        "model is shared, so other students keep working while it trains."
    )
    live = tr.any_running()  # auto-refresh the panels only while a run of this session trains
    refresh = tv.REFRESH_SECONDS if live else None
    # only the open tab runs (its .open), so only its panel refreshes; ?tab=... opens one
    tabs = st.tabs(
        [
            "Recorded runs",
            "Train live",
            "Compare runs",
            "Reward hacking",
            "Adaptive beta",
            "GRPO vs REINFORCE++",
            "2024 vs 2026",
            "Async: k steps behind",
        ],
        key="tab",
        bind="query-params",
        on_change="rerun",
    )

    # ---------------------------------------------------------------- recorded runs (no model)
    if tabs[0].open:
        with tabs[0]:
            names = tv.recorded_names()
            if not names:
                st.info("No recorded runs are installed.", icon=":material/info:")
            else:
                wanted = tv.recorded_choice()  # ?run=<name> opens that run
                name = st.selectbox(
                    "Recorded run",
                    names,
                    index=names.index(wanted) if wanted else 0,
                    format_func=lambda n: tv.RECORDED[n].title,
                    key="tr_run_pick",
                    help="Runs made with this app's own trainer on the bundled SmolLM2-135M on CPU "
                    "(the CLI command is below). Address one in the URL as ?run=<name>.",
                )
                st.query_params[tr.KEY_RUN] = name
                run = tv.recorded_run(name)
                meta = tv.RECORDED[name]
                st.caption(
                    f":material/history: **Recorded run**, not trained in this session: "
                    f"{len(run.steps)} steps on {run.model or run.settings.model}. "
                    f"{meta.description}"
                )
                st.caption(run.settings.describe())
                if run.status != "done" and run.message:
                    st.caption(f"Status: {run.status}: {run.message}.")
                tv.curves([run], key="tr_rec_curves")
                training_steps.scrubber(run, key="rec")
                with st.expander("Settings and the command that made it"):
                    st.code(meta.command, language="bash")
                    training_steps.settings_panel([run])
            with st.expander(
                "Open a run file: a run of yours, downloaded from Train live, or one the CLI wrote",
                expanded=run_files.KEY_PARSED in st.session_state,
            ):
                run_files.run_file_panel()

    # ---------------------------------------------------------------- live training
    if tabs[1].open:
        with tabs[1]:
            st.caption(tr.CAPS_TEXT)
            tr.controls()
            training_mu.controls(state.framework, dict(state.config))
            training_stale.controls()
            settings, notes = None, []
            try:
                settings, notes = tr.base_settings(state, state.model)
            except ValueError as err:
                st.error(f"These settings cannot train: {err}", icon=":material/error:")
            for note in notes:
                st.caption(note)
            if settings is not None:
                st.caption(
                    f"Prompts from the sidebar; reward **{settings.reward.label()}**; "
                    f"{settings.describe()}. The KL penalty goes into the token rewards "
                    "(ROLL add_token_level_kl, verl use_kl_in_reward, OpenRLHF by default; TRL: "
                    "in the loss). GAE uses a zero critic."
                )
            slot = st.segmented_control(
                "Slot",
                list(tr.SLOTS),
                default="A",
                key=tr.KEY_SLOT,
                required=True,
                help="Up to three runs of yours at once; starting in a used slot replaces its run.",
            )
            st.button(
                f"Start training in slot {slot}",
                key="tr_start",
                type="primary",
                icon=":material/play_arrow:",
                on_click=_start,
                args=(state, slot),
                disabled=settings is None,
            )

            @st.fragment(run_every=refresh)
            def live_panel() -> None:
                table = tr.runners()
                if not table:
                    lost = tr.lost_run_notice()  # a restart or an expired run: say what was lost
                    if lost:
                        st.warning(lost, icon=":material/history:")
                    else:
                        st.info("No run yet: press Start.", icon=":material/info:")
                    return
                for s, runner in sorted(table.items()):
                    tv.status_line(runner, s)
                    tv.run_buttons(runner, s)
                    run_files.download_button(runner, s)  # a run that is not training
                runner = table.get(slot) or next(iter(table.values()))
                run = runner.run()
                tv.curves([run], key="tr_live_curves")
                if runner.status != "running":
                    training_steps.scrubber(run, key="live")
                else:
                    st.caption("Pause or wait for the end to scrub through the samples.")
                if live and not tr.any_running():
                    st.rerun()  # the last run ended: redraw the page once, without auto-refresh

            live_panel()

    # ---------------------------------------------------------------- compare
    if tabs[2].open:
        with tabs[2]:
            st.markdown(
                "Overlay up to three runs. Runs that differ in **one** knob show what that knob does; "
                "the table lists the settings that differ first."
            )
            knob = st.selectbox("Knob to compare", list(tr.KNOBS), key=tr.KEY_KNOB)
            st.button(
                "Start these runs (slots A, B, C)",
                key="tr_start_compare",
                on_click=_start_compare,
                args=(state, knob),
                icon=":material/compare_arrows:",
                help="Each run uses the Train live settings with only this knob changed.",
            )
            options = {f"live {s}": s for s in sorted(tr.runners())}
            options |= {f"recorded: {tv.RECORDED[n].title}": n for n in tv.recorded_names()}
            default = [k for k in options if k.startswith("live")][:3] or [
                k for k in options if options[k] in tv.HACKING_PAIR
            ]
            chosen = st.multiselect(  # no key: new runs reset the choice to them
                "Runs to overlay", list(options), default=default, max_selections=3
            )

            @st.fragment(run_every=refresh)
            def compare_panel() -> None:
                runs = []
                for label in chosen:
                    value = options[label]
                    if label.startswith("live"):
                        runner = tr.runners().get(value)
                        if runner is not None:
                            runs.append(runner.run(label=runner.settings.label or label))
                    else:
                        runs.append(tv.recorded_run(value))
                if not runs:
                    st.info("Choose runs to overlay.", icon=":material/info:")
                    return
                tv.curves(runs, key="tr_compare_curves")
                differ = training_charts.differing_settings(runs)
                if differ:
                    st.caption("Differ in: " + ", ".join(f"`{d}`" for d in differ[:8]))
                training_steps.settings_panel(runs)

            compare_panel()

    # ---------------------------------------------------------------- reward hacking
    if tabs[3].open:
        with tabs[3]:
            tv.hacking_explainer()
            pair = [n for n in tv.HACKING_PAIR if n in tv.recorded_names()]
            live_pair = any(s in tr.runners() for s in ("A", "B"))
            c1, c2 = st.columns(2)
            with c1:
                # after "Train the pair live" the live runs lead; the recording is a faint overlay
                show_recorded = st.toggle(
                    "Overlay the recorded pair (faint)"
                    if live_pair
                    else "Show the recorded pair (instant)",
                    value=bool(pair) and not live_pair,
                    key="tr_hack_recorded_live" if live_pair else "tr_hack_recorded",
                )
            with c2:
                st.button(
                    "Train the pair live on the sidebar's prompts (slots A and B)",
                    key="tr_hack_start",
                    on_click=_start_hacking,
                    args=(state,),
                    icon=":material/science:",
                    help=f"Same reward (positive words), lr 1e-3, ROLL GRPO, at least "
                    f"{tr.HACK_STEPS} steps: beta = 0 in slot A, beta = {tr.HACK_BETA:g} in "
                    "slot B. Each step takes seconds on a GPU, up to minutes on a busy CPU.",
                )

            @st.fragment(run_every=refresh)
            def hacking_panel() -> None:
                table = tr.runners()
                slots = [s for s in ("A", "B") if s in table]
                for s in slots:
                    tv.status_line(table[s], s)  # step k / N, s per step, time left
                runs = [table[s].run() for s in slots]
                faint: tuple[int, ...] = ()
                if show_recorded and pair:
                    if runs:
                        faint = tuple(range(len(runs), len(runs) + len(pair)))
                    runs += [tv.recorded_run(n) for n in pair]
                if not runs:
                    st.info("Start the pair or show the recorded one.", icon=":material/info:")
                    return
                tv.curves(runs, key="tr_hack_curves", faint=faint)
                shown = runs[:2]
                last = [next((r for r in reversed(run.steps) if r.samples), None) for run in shown]
                if len(shown) == 2 and all(last):
                    st.markdown("**The answers at the last recorded step, side by side**")
                    cols = st.columns(2)
                    for col, run, rec in zip(cols, shown, last, strict=True):
                        with col:
                            st.markdown(f"**{run.label}**, step {rec.step}")
                            st.dataframe(
                                {
                                    "answer": list(rec.samples.responses),
                                    "reward": list(rec.samples.rewards),
                                },
                                hide_index=True,
                                width="stretch",
                            )

            hacking_panel()

    # ---------------------------------------------------------------- adaptive beta (closed loop)
    if tabs[4].open:
        with tabs[4]:
            demos.adaptive_tab(state, refresh)

    # ---------------------------------------------------------------- local vs global over steps
    if tabs[5].open:
        with tabs[5]:
            demos.local_global_tab(state, refresh)

    # ---------------------------------------------------------------- the two eras over steps
    if tabs[6].open:
        with tabs[6]:
            demos.era_tab(state, refresh)

    # ---------------------------------------------------------------- async: k steps behind
    if tabs[7].open:
        with tabs[7]:
            training_stale.async_tab(tr.runners, refresh)
    ui.back_next("training")
