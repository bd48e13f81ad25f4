"""The shared sidebar: data source, reward, algorithm; ``page_setup`` starts every page.

``page_setup(title)`` sets the page config, draws the sidebar and returns the frozen AppState
that the page hands to ``flow``. ``?present=true`` enlarges fonts and ``&hide=beta,G`` hides those
controls (``hide=sidebar`` the whole sidebar) for a teacher's projector.

Size: the sidebar's sections (data, reward, algorithm) are drawn here top to bottom in the order
the visitor sees them, each section's steps a function of its own (``_sidebar_data`` calls
``_preset_data`` and ``_live_form``); split across files, the order of the widgets would be too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import streamlit as st

from roll_viz import rewards
from roll_viz.data.presets import PRESETS
from roll_viz.lm import models, rollout
from roll_viz.ui import adapters, knobs, reconnect, rollout_engine, url
from roll_viz.ui import run_source as runs
from roll_viz.ui.flow import preset_available
from roll_viz.ui.guard import page_guard
from roll_viz.ui.present import close_top_slot, inject_css, open_top_slot, presentation_controls
from roll_viz.ui.resources import model_choices, model_spec
from roll_viz.ui.settings import (
    default_reward_choice,
    describe_terms,
    preset_defaults,
    reward_choices,
    reward_defaults,
)
from roll_viz.ui.state import (
    KEY_FAST,
    KEY_G,
    KEY_INSTRUCTION,
    KEY_LAST_VALID_PARAMS,
    KEY_LIVE,
    KEY_MAX_TOKENS,
    KEY_MODEL,
    KEY_NOISE,
    KEY_POLICY,
    KEY_PRESET,
    KEY_PROMPTS,
    KEY_REWARD,
    KEY_REWARD_PARAM_PREFIX,
    KEY_SAMPLE_APPLY,
    KEY_SEED,
    KEY_TEMPERATURE,
    MAX_GROUP_SIZE,
    MAX_INSTRUCTION_CHARS,
    MAX_NEW_TOKENS,
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    PRESET_REWARD,
    AppState,
    freeze,
)
from roll_viz.ui.url import bound, url_notices
from roll_viz.views import text

#: per script thread: the state the router's frame drew for the page of this run
_FRAME = threading.local()


def _sidebar_model(live: bool) -> str:
    """The live model's spec (a selector shown only when sampling live)."""
    if not live:
        return model_spec()
    return bound(
        st.sidebar.selectbox,
        "Model",
        model_choices(),
        key=KEY_MODEL,
        help="smollm2 = SmolLM2-135M-Instruct (bundled); tiny = a random 2-layer model that only "
        "shows the mechanics. The server's ROLL_VIZ_MODEL comes first.",
    )


def _on_preset_change() -> None:
    """Load the new preset's sampling and reward settings into the sidebar."""
    name = st.session_state.get(KEY_PRESET)
    if name not in PRESETS:
        return
    sampling, reward = preset_defaults(name)
    st.session_state[KEY_G] = int(sampling.group_size)
    st.session_state[KEY_PROMPTS] = "\n".join(sampling.prompts)
    st.session_state[KEY_TEMPERATURE] = float(sampling.temperature)
    st.session_state[KEY_MAX_TOKENS] = int(sampling.max_new_tokens)
    st.session_state[KEY_SEED] = int(sampling.seed)
    st.session_state[KEY_POLICY] = sampling.policy_mode
    st.session_state[KEY_INSTRUCTION] = sampling.instruction
    _name, params = reward_defaults(reward)
    st.session_state[KEY_REWARD] = default_reward_choice(reward)
    for param, value in params.items():
        st.session_state[KEY_REWARD_PARAM_PREFIX + param] = value
    st.session_state[KEY_NOISE] = float(reward.noise_sigma)


def read_prompts(typed: str | None, fallback: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The prompts as typed: one per line (split on line feeds only), each checked on its own.

    Only a line feed starts a new prompt: U+2028, U+0085 and other separators a user did not
    type as a new line stay inside their prompt (and are shown visibly). A prompt that breaks a
    rule is reported and left out; the others are kept.

    Returns:
        (the prompts to sample, one note per problem).
    """
    lines = (typed or "").replace("\r\n", "\n").split("\n")
    prompts, notes = [], []
    for number, line in enumerate(lines, start=1):
        prompt = line.strip()
        if not prompt:
            continue
        if len(prompt) > MAX_PROMPT_CHARS:
            notes.append(
                f"Line {number} has {len(prompt)} characters (at most {MAX_PROMPT_CHARS}): "
                "left out, the other prompts are kept."
            )
            continue
        prompts.append(prompt)
    if len(prompts) > MAX_PROMPTS:
        notes.append(
            f"{len(prompts)} prompts is more than {MAX_PROMPTS}: using the first {MAX_PROMPTS}."
        )
        prompts = prompts[:MAX_PROMPTS]
    if not prompts:
        notes.append("No prompt to sample: keeping the preset's prompts.")
        return fallback, notes
    return tuple(prompts), notes


def _sidebar_policy(source: str) -> str:
    """The policy the pages show: the original, or this session's updated / trained adapter."""
    if source.startswith("run:"):
        return source
    choices = adapters.available()
    if not choices:
        return source
    views = [adapters.ORIGINAL, *choices]
    chosen = st.session_state.get(adapters.KEY_POLICY_VIEW, adapters.ORIGINAL)
    if chosen not in views:
        chosen = adapters.ORIGINAL
    # a plain session key holds the choice: the radio exists only while an adapter does
    view = st.sidebar.radio(
        "Policy the pages show",
        views,
        index=views.index(chosen),
        format_func=lambda v: adapters.label(v, choices[v][1] if v in choices else 0),
        key=adapters.KEY_POLICY_WIDGET,
        on_change=lambda: st.session_state.__setitem__(
            adapters.KEY_POLICY_VIEW, st.session_state[adapters.KEY_POLICY_WIDGET]
        ),
        help="Your updated or trained LoRA policy samples the same prompts and settings; the "
        "reference stays the base model, so Token KL shows the KL the update produced.",
    )
    st.session_state[adapters.KEY_POLICY_VIEW] = view
    if view == adapters.ORIGINAL:
        return source
    policy, steps = choices[view]
    return source + adapters.suffix(view, policy, steps)


_G_LIVE_HELP = "Applied with 'Sample', with the other edits: one sampling."
_G_PRESET_HELP = "Keeps the first G of each prompt's committed samples (at most the preset's G)."


def _group_slider(container: Any, default: int, *, live: bool) -> int:
    """The G slider (URL ``G=``): in the live form, or on its own over a preset's batch.

    With a preset, G keeps the first G committed samples of each prompt (no model work), so it
    applies at once; live, a new G means a new sampling, so it sits in the "Sample" form and
    applies with the other edits. The key is the same in both places: the value, the URL
    binding and the instant knobs' release (``instant.sync_sidebar``) carry over.
    """
    return bound(
        container.slider,
        "Group size G (samples per prompt)",
        1,
        MAX_GROUP_SIZE,
        value=default,
        key=KEY_G,
        help="How many responses each prompt gets. GRPO-style estimators compare the samples "
        "of one prompt with each other. " + (_G_LIVE_HELP if live else _G_PRESET_HELP),
    )


def _sidebar_data(messages: list[str]) -> tuple[str, str, Any]:
    """Data section: preset / live, prompts, G, sampling. Returns (source, preset, sampling)."""
    presets = PRESETS
    names = list(presets)
    sb = st.sidebar
    sb.markdown("### Data")
    run = runs.run_data(messages)
    if run is not None:
        return run
    preset = bound(
        sb.selectbox,
        "Preset",
        names,
        key=KEY_PRESET,
        on_change=_on_preset_change,
        help="A committed batch sampled from the real model: loads instantly, no model needed.",
    )
    sb.caption(presets[preset][0])
    preset_sampling, _ = preset_defaults(preset)
    live = bound(
        sb.toggle,
        "Sample live with the model",
        value=False,
        key=KEY_LIVE,
        help="Sample your own prompts with the policy and score them under the reference model. "
        "Runs only when the prompts, G, temperature, max tokens, seed or policy change.",
    )
    if not live:
        return _preset_data(sb, messages, preset, preset_sampling)
    prompts, group_size, temperature, max_tokens, seed, policy, instruction = _live_form(
        sb, preset_sampling
    )
    bound(
        sb.toggle,
        "Fast sampling (int8 answers)",
        value=False,
        key=KEY_FAST,
        help="Draw the answers with an int8 copy of the model (CPU): about 1.3x faster for a "
        "classroom request. Approximate: its next-token distributions differ from the float "
        "model's (about 0.13 nats of KL per token; the top token agrees about 83 % of the time, "
        "measured by `python -m benchmarks --sampling --only fidelity`). Every log-prob, KL "
        "and entropy shown is still the float model's, so the numbers stay exact for the tokens "
        "drawn. Seeded and deterministic like the float path.",
    )

    try:
        cfg = replace(
            preset_sampling,
            prompts=prompts,
            group_size=int(group_size),
            temperature=float(temperature),
            max_new_tokens=int(max_tokens),
            seed=int(seed),
            policy_mode=policy,
            instruction=instruction if policy == "steered" else "",
        )
    except ValueError as err:
        messages.append(f"Invalid sampling settings ({err}); using the preset's.")
        cfg = preset_sampling
    cfg, cap_messages = rollout.capped(cfg)
    messages.extend(cap_messages)
    return "live", preset, cfg


def _preset_data(sb: Any, messages: list[str], preset: str, preset_sampling: Any) -> tuple:
    """A preset's data: its committed batch, G samples per prompt (the live model if stale)."""
    # a preset: G only subsets the committed batch, so it applies at once (in the browser where
    # the page follows G: knobs.preset_group)
    default = int(preset_sampling.group_size)
    group_size = knobs.preset_group(lambda: _group_slider(st, default, live=False))
    if not preset_available(preset):
        messages.append(
            f"The committed batch of preset {preset!r} is missing or stale: sampling its "
            "settings with the live model instead."
        )
        live_fallback = True
    else:
        live_fallback = False
    if group_size > preset_sampling.group_size:
        messages.append(
            f"The preset {preset!r} has G = {preset_sampling.group_size} samples per prompt; "
            f"showing all {preset_sampling.group_size} (asked for {group_size}). "
            "Switch on 'Sample live' to sample more."
        )
        group_size = int(preset_sampling.group_size)
    sampling = replace(preset_sampling, group_size=int(group_size))
    if live_fallback:
        return "live", preset, sampling
    sb.caption(
        f"{text.count(len(sampling.prompts), 'prompt')} x G = {sampling.group_size}, "
        f"temperature {sampling.temperature:g}, up to {sampling.max_new_tokens} tokens, "
        f"seed {sampling.seed}, policy {sampling.policy_mode}. "
        "G below the preset's keeps the first G samples of each prompt."
    )
    return f"preset:{preset}", preset, sampling


def _live_form(sb: Any, preset_sampling: Any) -> tuple:
    """The live sampling form: (prompts, G, temperature, max tokens, seed, policy, instruction)."""
    # one request = one sampling: prompts, temperature, tokens, seed and policy are edited in a
    # form and applied together by "Sample" (each edit alone would re-sample the batch)
    form = sb.form("live_sampling", border=False, enter_to_submit=False)
    prompts_text = bound(
        form.text_area,
        "Prompts (one per line)",
        value="\n".join(preset_sampling.prompts),
        key=KEY_PROMPTS,
        height=110,
        help=f"Up to {MAX_PROMPTS} prompts of at most {MAX_PROMPT_CHARS} characters each; "
        "a new line starts a new prompt.",
    )
    prompts, prompt_notes = read_prompts(prompts_text, tuple(preset_sampling.prompts))
    for note in prompt_notes:
        sb.warning(text.md_escape(note), icon=":material/edit_note:")
    # live: a new G is a new sampling, so it waits for "Sample" with the other edits (the same
    # key, so the value, the URL's G= and the instant knobs' release carry over)
    group_size = _group_slider(form, int(preset_sampling.group_size), live=True)
    temperature = bound(
        form.slider,
        "Temperature",
        0.1,
        2.0,
        value=float(preset_sampling.temperature),
        step=0.05,
        key=KEY_TEMPERATURE,
        help="Softmax temperature of the policy; log-probs are taken at this temperature.",
    )
    max_tokens = bound(
        form.slider,
        "Max new tokens",
        4,
        MAX_NEW_TOKENS,
        value=int(preset_sampling.max_new_tokens),
        step=4,
        key=KEY_MAX_TOKENS,
        help="Responses that hit this length are truncated (finish reason 'length').",
    )
    seed = bound(
        form.number_input,
        "Seed",
        0,
        2**31 - 1,
        value=int(preset_sampling.seed),
        step=1,
        key=KEY_SEED,
        help="Same seed, same samples (the seed is in the URL).",
    )
    policy = bound(
        form.radio,
        "Policy",
        ["identical", "steered"],
        index=0 if preset_sampling.policy_mode == "identical" else 1,
        key=KEY_POLICY,
        horizontal=True,
        help="identical: policy = reference (KL is exactly 0). steered: the policy sees a hidden "
        "instruction the reference does not, so the two disagree.",
    )
    instruction = preset_sampling.instruction
    if policy == "steered":
        instruction = bound(
            form.text_area,
            "Hidden instruction (policy only)",
            value=preset_sampling.instruction or "Answer in one short sentence.",
            key=KEY_INSTRUCTION,
            height=68,
            help=f"At most {MAX_INSTRUCTION_CHARS} characters.",
        )
        if not instruction.strip() or len(instruction) > MAX_INSTRUCTION_CHARS:
            sb.warning(
                f"The hidden instruction must have 1 to {MAX_INSTRUCTION_CHARS} characters "
                f"(it has {len(instruction)}): using the preset's instruction.",
                icon=":material/edit_note:",
            )
            instruction = preset_sampling.instruction or "Answer in one short sentence."

    form.form_submit_button(
        "Sample",
        key=KEY_SAMPLE_APPLY,
        type="primary",
        icon=":material/casino:",
        help="Apply the edits above (prompts, G, temperature, max tokens, seed, policy) and "
        "sample once.",
    )
    return prompts, group_size, temperature, max_tokens, seed, policy, instruction


def _valid_params(name: str, typed: dict[str, Any], slots: dict[str, Any]) -> dict[str, Any]:
    """The reward's parameters with each bad one replaced by its last valid value.

    Each problem is written under its own field (``slots``); the rest of the sidebar and the
    page keep working on the last values that were valid (or the defaults).
    """
    if name not in rewards.REWARD_PARAMS:
        return typed
    last = st.session_state.setdefault(KEY_LAST_VALID_PARAMS, {})
    problems = rewards.param_problems(name, typed)
    params = dict(typed)
    for param, message in problems.items():
        fallback = last.get((name, param), rewards.REWARD_PARAMS[name][param][0])
        params[param] = fallback
        slots[param].error(
            text.md_escape(f"{message}. Using {fallback!r} until it is fixed."),
            icon=":material/error:",
        )
    if rewards.param_problems(name, params):  # a combination of fallbacks can still clash
        params = {p: d for p, (d, _) in rewards.REWARD_PARAMS[name].items()}
    for param, value in params.items():
        if param not in problems:
            last[(name, param)] = value
    return params


def _sidebar_reward(preset: str) -> Any:
    """Reward section: function, its parameters, noise. Returns the RewardSpec."""
    sb = st.sidebar
    sb.markdown("### Reward")
    _sampling, preset_reward = preset_defaults(preset)
    default_name, default_params = reward_defaults(preset_reward)
    names = reward_choices(preset_reward)
    name = bound(
        sb.selectbox,
        "Reward function",
        names,
        index=names.index(default_reward_choice(preset_reward)),
        key=KEY_REWARD,
        help="A toy, rule-based reward on the response text (no reward model). 'preset' is the "
        "preset's own weighted sum of several rewards; pick one reward to tune its parameters.",
    )
    if name == PRESET_REWARD:
        sb.caption("reward = " + describe_terms(preset_reward.terms))
    params, slots = {}, {}
    for param, (default, help_text) in rewards.REWARD_PARAMS.get(name, {}).items():
        value = default_params.get(param, default) if name == default_name else default
        key = KEY_REWARD_PARAM_PREFIX + param
        bounds = rewards.PARAM_BOUNDS.get((name, param))
        if bounds is not None:
            low, high, inclusive = bounds
            help_text += f" (allowed: {'[' if inclusive else '('}{low:g}, {high:g}])"
        if isinstance(default, bool):
            params[param] = bound(sb.toggle, param, value=bool(value), key=key, help=help_text)
        elif isinstance(default, int | float):
            params[param] = bound(
                sb.number_input,
                param,
                value=float(value) if isinstance(default, float) else int(value),
                key=key,
                help=help_text,
            )
        else:
            params[param] = bound(
                sb.text_area,
                param,
                value=str(value),
                key=key,
                max_chars=rewards.MAX_PATTERN_CHARS,
                help=help_text + f" (at most {rewards.MAX_PATTERN_CHARS} characters; regular "
                "expressions run on RE2, linear time: no back-references or look-arounds)",
            )
        slots[param] = sb.empty()  # the field's own message goes right under it
    params = _valid_params(name, params, slots)
    noise = bound(
        sb.slider,
        "Reward noise sigma",
        0.0,
        2.0,
        value=float(preset_reward.noise_sigma),
        step=0.05,
        key=KEY_NOISE,
        help="Gaussian noise added to every score (seeded): a stand-in for a noisy reward model.",
    )
    terms = (
        preset_reward.terms
        if name == PRESET_REWARD
        else ((name, 1.0, tuple(sorted(params.items()))),)
    )
    return rewards.RewardSpec(
        terms=terms,
        noise_sigma=float(noise),
        noise_seed=int(getattr(preset_reward, "noise_seed", 0)),
    )


def page_setup(title: str) -> AppState:
    """Set up a page: page config, CSS, the shared sidebar. Call first on every page.

    Under the router (``app.py``) the sidebar is already drawn (``frame``) and its state is
    returned; a page script run on its own draws the sidebar itself.

    Args:
        title: page title (browser tab).

    Returns:
        The frozen AppState the sidebar describes.
    """
    st.set_page_config(
        page_title=f"{title} - roll-viz", page_icon=":material/route:", layout="wide"
    )
    drawn = getattr(_FRAME, "state", None)
    if drawn is not None:
        return drawn
    return _draw_sidebar()


@contextlib.contextmanager
def frame(title: str) -> Iterator[None]:
    """The router's frame around a page: the shared sidebar drawn before the page runs.

    Widgets the entry script draws belong to every page: Streamlit keeps their values and their
    query parameters on a page switch (sidebar link, ``st.page_link``, Back and Forward), while
    the widgets a page draws are dropped from the URL when the page changes. So the shared
    controls are drawn here, once per run, and the page's ``page_setup`` returns their state.

    Args:
        title: the page's navigation title (browser tab, server log).
    """
    st.set_page_config(
        page_title=f"{title} - roll-viz", page_icon=":material/route:", layout="wide"
    )
    models.share_the_interpreter()  # the event loop waits less behind model threads
    _FRAME.state = None
    with page_guard(title):
        _FRAME.state = _draw_sidebar()
    if _FRAME.state is None:  # the guard showed what went wrong
        st.stop()
    open_top_slot()  # live progress goes to the top of the main column on every page
    try:
        yield
    finally:
        _FRAME.state = None
        close_top_slot()


def _use_reward(name: str) -> None:
    """Callback: choose this reward function (the URL follows)."""
    st.session_state[KEY_REWARD] = name


def _suggest_reward(source: str, sampling: Any, reward: Any) -> None:
    """Offer the arithmetic reward when live arithmetic questions get a reward blind to answers.

    A preset's reward stays when the prompts are edited live; "What is 17 + 25?" answered
    "17 + 25 = 32" would then score on sentence length (1.25) while the right answer scores 0.
    """
    if source != "live" or sampling is None:
        return
    if any(name == "arithmetic" for name, _weight, _params in reward.terms):
        return
    questions = [p for p in sampling.prompts if rewards.arithmetic_answer(p) is not None]
    if not questions:
        return
    st.sidebar.info(
        f"Your prompts include {text.count(len(questions), 'arithmetic question')} (e.g. "
        f"'{text.md_line(questions[0])[:60]}'), but the reward is "
        f"{text.md_escape(describe_terms(reward.terms))}: it does not check the answer.",
        icon=":material/calculate:",
    )
    st.sidebar.button(
        "Use the arithmetic reward",
        key="use_arithmetic_reward",
        on_click=_use_reward,
        args=("arithmetic",),
        icon=":material/check:",
        help="1 when the last number of the answer is the prompt's result, else 0.",
    )


def _draw_sidebar() -> AppState:
    """Draw the shared sidebar and return the state it describes."""
    messages: list[str] = []
    raw_url = st.query_params.to_dict()  # before the bound widgets drop what they refuse
    url.start(raw_url)
    source, preset, sampling = _sidebar_data(messages)
    model = _sidebar_model(source == "live")
    rollout_engine.sidebar_line()  # "answers from: vLLM at ..." when the operator set one
    source = _sidebar_policy(source)
    reward = _sidebar_reward(preset)
    _suggest_reward(source, sampling, reward)
    if source.startswith("run:"):
        st.sidebar.caption("These reward settings do not apply: the run's file gives the scores.")
    framework, generic, config = knobs.algorithm_section(sampling.group_size, messages)
    present, hide = presentation_controls()
    inject_css(present, hide)
    messages = url_notices(raw_url) + messages
    st.sidebar.caption(
        "Every control is in the URL: copy it to share this exact state "
        "(`?present=true&hide=beta,G` for a projector)."
    )
    reconnect.remember_student()  # the cookie that finds this student's runs after a reload
    state = AppState(
        source=source,
        preset=preset,
        sampling=sampling,
        reward=reward,
        framework=framework,
        config_items=freeze(config),
        generic=freeze(generic),
        model=model,
        present=present,
        decode="int8" if source == "live" and st.session_state.get(KEY_FAST) else "float",
        messages=tuple(messages),
    )
    if messages:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in messages), icon=":material/info:")
    return state


# ---------------------------------------------------------------------------------------------
# Page-level helpers (config mappings for page-local controls, one-click actions)
# ---------------------------------------------------------------------------------------------
def select_preset(name: str) -> None:
    """Callback: switch to a committed preset (and its settings), live sampling off."""
    st.session_state[KEY_PRESET] = name
    st.session_state[KEY_LIVE] = False
    _on_preset_change()


def go_live() -> None:
    """Callback: switch the data source to the live model (same settings as the preset)."""
    st.session_state[KEY_LIVE] = True
