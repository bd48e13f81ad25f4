"""roll-viz home: what this is, the signal chain, presets, the live model."""

import streamlit as st

from roll_viz import ui
from roll_viz.views import chips, scales, text

with ui.page_guard("Home"):
    state = ui.page_setup("Home")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing

    st.title("roll-viz: how a reward becomes a training signal")
    ui.prose(
        "Reinforcement learning for language models does not train on the reward directly. "
        "The reward of each response is post-processed, mixed with a per-token penalty for drifting "
        "away from a reference model, spread over the tokens, compared with a baseline and normalized "
        "before it becomes the **advantage** that scales each token's gradient. This app runs a real "
        "small policy and reference model and shows every stage on the same tokens, in the "
        "conventions of ROLL, verl, OpenRLHF and TRL. Change a knob in the sidebar and every page "
        "recomputes instantly; the URL keeps your settings, so you can share exactly what you see."
    )

    st.subheader("The signal chain")
    CHAIN = [
        ("1", "Sample", "the policy writes G answers per prompt", "samples", "Samples"),
        ("2", "Raw reward", "score each answer; clip and normalize", "rewards", "Rewards"),
        (
            "3",
            "+ KL penalty",
            "per token: how far the policy drifted from the reference",
            "kl",
            "Token KL",
        ),
        (
            "4",
            "Token rewards and returns",
            "reward on the last token, discounted back",
            "kl",
            "Token KL",
        ),
        (
            "5",
            "- baseline = advantage",
            "GAE (critic), GRPO (group mean), REINFORCE++",
            "advantages",
            "Advantages",
        ),
        (
            "6",
            "Normalize",
            "per prompt group (local) or whole batch (global)",
            "local_global",
            "Local vs global",
        ),
        (
            "7",
            "Update",
            "the advantage scales each token's log-prob gradient: one real LoRA step",
            "update",
            "Update",
        ),
    ]
    with st.container(key="rv_chain"):  # one picture: two rows of stages, then beyond
        for row in (CHAIN[:4], CHAIN[4:]):
            cols = st.columns(4, gap="small")
            for col, (num, title, blurb, page, label) in zip(cols, row, strict=False):
                with col, st.container(border=True, height="stretch"):
                    arrow = " &rarr;" if num != CHAIN[-1][0] else ""
                    st.markdown(f"**{num}. {title}**{arrow}")
                    st.caption(blurb)
                    ui.page_link(page, label=label, icon=":material/arrow_outward:")
        beyond = st.columns(2, gap="small")
        with beyond[0], st.container(border=True):
            st.markdown("**8. Train for many steps**")
            st.caption("watch reward rise, KL grow, beta adapt, and a gameable reward get hacked")
            ui.page_link("training", label="Training", icon=":material/arrow_outward:")
        with beyond[1], st.container(border=True):
            st.markdown("**Your run**")
            st.caption("open a ROLL, verl, TRL or UNIPO dump and walk every page on any step")
            ui.page_link("your_run", label="Your run", icon=":material/arrow_outward:")

    left, right = st.columns([3, 2], gap="large")
    with left:
        st.subheader("Start from a preset (instant)")
        st.caption(
            "Each preset is a batch sampled once from the real model and committed with the app: "
            "it loads immediately, no model needed."
        )
        for name, (description, cfg, _spec) in ui.PRESETS.items():
            active = state.preset == name and not state.live
            c1, c2 = st.columns([1, 3], vertical_alignment="center")
            c1.button(
                name,
                key=f"preset_btn_{name}",
                on_click=ui.select_preset,
                args=(name,),
                type="primary" if active else "secondary",
                width="stretch",
                icon=":material/check:" if active else None,
            )
            c2.markdown(
                f"{description} *({text.count(len(cfg.prompts), 'prompt')} x G = {cfg.group_size}.)*",
            )
        st.subheader("Or use the live model")
        if state.live:
            st.success(
                "Live model on: the sidebar's prompts, G, temperature, max tokens and seed are sampled "
                "with the model (cached; only a change to those re-samples).",
                icon=":material/bolt:",
            )
        else:
            st.button(
                "Use the live model",
                key="go_live",
                on_click=ui.go_live,
                type="primary",
                icon=":material/bolt:",
                help="Samples the current preset's prompts with the model; then edit the prompts "
                "in the sidebar.",
            )

        rollout = ui.cached_rollout(state)
        scores = ui.cached_scores(state)
        # two by two: four in a row cut the labels to "samples per pr..." at 1280 px
        m1, m2 = st.columns(2)
        m3, m4 = st.columns(2)
        m1.metric("prompts P", len(rollout.prompts))
        m2.metric("samples per prompt G", rollout.group_size)
        m3.metric("longest response T", int(rollout.response_mask.sum(-1).max()))
        m4.metric("mean reward", f"{float(scores.mean()):.3f}")

    with right:
        st.subheader("How to read the colours")
        st.html(
            chips.colorbar_html(scales.SIGNED_SCALE, -3, 3, "signed (advantage, token reward, k1):")
            + "<div style='font-size:0.85em;margin:-4px 0 10px 0'>red = negative, white = 0, "
            "blue = positive. The range is fixed and symmetric, so colours compare across "
            "settings.</div>"
            + chips.colorbar_html(scales.SEQUENTIAL_SCALE, 0, 1, "non-negative (k2, k3, exact KL):")
            + "<div style='font-size:0.85em;margin:-4px 0 10px 0'>pale = 0, dark blue = large.</div>"
            + chips.colorbar_html("YlOrRd", 0, 8, "token surprise -log p (Samples page):")
            + "<div style='font-size:0.85em;margin:-4px 0 10px 0'>pale = the model was sure, "
            "red = a surprising token.</div>"
            "<div style='font-size:0.85em'>Blank cells are padding (the response had ended), never "
            "zero. Hover any cell or token for its exact numbers. Whitespace is shown as "
            "<code>\u00b7</code> (space) and <code>\u21b5</code> (newline).</div>"
        )
        st.subheader("For teachers")
        st.markdown(
            "- Every control is in the URL: set it up, copy the link, share it.\n"
            "- *Presentation mode* (bottom of the sidebar, or `?present=true` in the URL) enlarges "
            "the fonts for a projector; `&hide=beta,gamma` hides those controls, `&hide=sidebar` "
            "the whole sidebar.\n"
            "- Each page ends with a link to the next stage."
        )
        spec = state.model if state.live else ui.model_spec()
        if ui.is_warm(spec):
            st.caption(
                f":material/check_circle: Model {spec} loaded and warm: live pages and the "
                "Update step answer at once."
            )
        elif st.button(
            "Warm up the model",
            key="warm_up",
            icon=":material/local_fire_department:",
            help="Loads the policy and reference model now (up to a minute or two on a CPU) and "
            "takes one throwaway update step on a scratch adapter, so the first live page and "
            "the first Update step in class do not wait. Your own adapter stays at step 0.",
        ):
            seconds = ui.warm_up(spec)
            st.success(
                f"Model {spec} is ready (update path warmed in {seconds:.1f} s; your adapter is "
                "untouched).",
                icon=":material/check_circle:",
            )

    ui.back_next("home")
