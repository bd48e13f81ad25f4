"""The shared sidebar: data source, reward, algorithm; ``page_setup`` starts every page.

``page_setup(title)`` sets the page config, draws the sidebar and returns the frozen AppState
that the page hands to ``flow``. ``?present=true`` enlarges fonts and ``&hide=beta,G`` hides those
controls (``hide=sidebar`` the whole sidebar) for a teacher's projector.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import streamlit as st
import torch

from roll_viz.ui.flow import preset_available
from roll_viz.ui.guard import page_guard
from roll_viz.ui.settings import (
    _default_reward_choice,
    _describe_terms,
    _generic_defaults,
    _preset_defaults,
    _reward_choices,
    _reward_defaults,
    norm_overrides,
    resolve_config,
)
from roll_viz.ui.state import (
    _KEY_RE,
    FRAMEWORK_LABELS,
    GENERIC_KEYS,
    KEY_BETA,
    KEY_CLIP,
    KEY_ESTIMATOR,
    KEY_FAST,
    KEY_FRAMEWORK,
    KEY_G,
    KEY_GAMMA,
    KEY_HIDE,
    KEY_INSTRUCTION,
    KEY_KL_ESTIMATOR,
    KEY_KL_IN_REWARD,
    KEY_LAM,
    KEY_LAST_VALID_PARAMS,
    KEY_LIVE,
    KEY_MAX_TOKENS,
    KEY_MODEL,
    KEY_NOISE,
    KEY_NORM,
    KEY_POLICY,
    KEY_PRESENT,
    KEY_PRESET,
    KEY_PROMPTS,
    KEY_REWARD,
    KEY_REWARD_PARAM_PREFIX,
    KEY_RUN_SOURCE,
    KEY_RUN_URL,
    KEY_SEED,
    KEY_STEP_URL,
    KEY_TEMPERATURE,
    KEY_WHITEN,
    MAX_GROUP_SIZE,
    MAX_INSTRUCTION_CHARS,
    MAX_NEW_TOKENS,
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    PRESET_REWARD,
    SINGLETON_NOTES,
    AppState,
    RunSampling,
    _freeze,
    _model_spec,
    _pipeline,
    _presets,
    model_choices,
)
from roll_viz.views import text

PRESENT_CSS = """
<style>
[data-testid="stMain"] { font-size: 21px; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.2rem; }
[data-testid="stMain"] [data-testid="stHeading"] h1 { font-size: 2.6rem; }
[data-testid="stMain"] .katex { font-size: 1.35em !important; }
[data-testid="stMain"] [data-testid="stMetricValue"] { font-size: 2.8rem; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] { font-size: 1.05rem; }
/* tables draw on a canvas: zoom scales their text with the mode */
[data-testid="stMain"] [data-testid="stDataFrame"] { zoom: 1.3; }
/* one column on a projector: side panels stack under the figures instead of squeezing */
[data-testid="stMain"] [data-testid="stHorizontalBlock"] { flex-direction: column; }
[data-testid="stMain"] [data-testid="stColumn"] {
  width: 100% !important; flex: 1 1 100% !important; }
</style>
"""

BASE_CSS = """
<style>
.rv-chips { line-height: 2.0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
a.rv-link { display: inline-block; padding: 0.35rem 0.8rem; border: 1px solid #2166ac;
  border-radius: 0.5rem; color: #2166ac; text-decoration: none; font-weight: 600; }
a.rv-link:hover { background: #2166ac; color: #ffffff; }
/* the run step's URL fields: the sidebar names the run in words */
.st-key-dump, .st-key-dump_step { display: none; }
</style>
"""


def _sidebar_model(live: bool) -> str:
    """The live model's spec (a selector shown only when sampling live)."""
    if not live:
        return _model_spec()
    return _bound(
        st.sidebar.selectbox,
        "Model",
        model_choices(),
        key=KEY_MODEL,
        help="smollm2 = SmolLM2-135M-Instruct (bundled); tiny = a random 2-layer model that only "
        "shows the mechanics. The server's ROLL_VIZ_MODEL comes first.",
    )


# ---------------------------------------------------------------------------------------------
# Presentation mode
# ---------------------------------------------------------------------------------------------
def _sidebar_presentation() -> tuple[bool, tuple[str, ...]]:
    """The presentation controls (bound to the URL: ``?present=true&hide=beta,gamma``)."""
    with st.sidebar.expander("Presentation mode", expanded=False):
        present = _bound(
            st.toggle,
            "Presentation mode (larger fonts)",
            value=False,
            key=KEY_PRESENT,
            help="For a projector. In the URL as present=true.",
        )
        hide_text = _bound(
            st.text_input,
            "Hide these controls",
            value="",
            key=KEY_HIDE,
            placeholder="beta,gamma  (or: sidebar)",
            help="Comma-separated control keys as they appear in the URL (beta, gamma, lam, G, "
            "seed, fw, est, ...); 'sidebar' hides the whole sidebar. In the URL as hide=...",
        )
    # keys only (letters, digits, _ and -): the text goes into a CSS selector
    hide = tuple(h for h in (p.strip() for p in (hide_text or "").split(",")) if _KEY_RE.match(h))
    return bool(present), hide


def _show_sidebar(kept: str) -> None:
    """Callback: drop 'sidebar' from the hidden controls (the URL follows)."""
    st.session_state[KEY_HIDE] = kept


def _inject_css(present: bool, hide: tuple[str, ...]) -> None:
    css = BASE_CSS
    if present:
        css += PRESENT_CSS
    rules = []
    for key in hide:
        if key == "sidebar":
            rules.append('[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"]')
        else:
            rules.append(f".st-key-{key}")
    if rules:
        css += "<style>" + ", ".join(rules) + " { display: none !important; }</style>"
    st.html(css)
    if "sidebar" in hide:
        # the sidebar and its toggle are hidden: leave a visible way back (same tab, same state)
        st.button(
            "Show the controls",
            key="show_sidebar",
            on_click=_show_sidebar,
            args=(",".join(h for h in hide if h != "sidebar"),),
            icon=":material/tune:",
            type="tertiary",
        )


def _on_framework_change() -> None:
    """Load the new dialect's shipped defaults into the generic controls."""
    framework = st.session_state.get(KEY_FRAMEWORK, "roll")
    for generic, value in _generic_defaults(framework).items():
        key = GENERIC_KEYS.get(generic)
        if key is not None and value is not None:
            st.session_state[key] = value


def _on_preset_change() -> None:
    """Load the new preset's sampling and reward settings into the sidebar."""
    name = st.session_state.get(KEY_PRESET)
    if name not in _presets():
        return
    sampling, reward = _preset_defaults(name)
    st.session_state[KEY_G] = int(sampling.group_size)
    st.session_state[KEY_PROMPTS] = "\n".join(sampling.prompts)
    st.session_state[KEY_TEMPERATURE] = float(sampling.temperature)
    st.session_state[KEY_MAX_TOKENS] = int(sampling.max_new_tokens)
    st.session_state[KEY_SEED] = int(sampling.seed)
    st.session_state[KEY_POLICY] = sampling.policy_mode
    st.session_state[KEY_INSTRUCTION] = sampling.instruction
    _name, params = _reward_defaults(reward)
    st.session_state[KEY_REWARD] = _default_reward_choice(reward)
    for param, value in params.items():
        st.session_state[KEY_REWARD_PARAM_PREFIX + param] = value
    st.session_state[KEY_NOISE] = float(reward.noise_sigma)


#: per script thread: what each URL key allows, and the state the router's frame drew
_RUN = threading.local()


def _allowed_text(widget: Callable, args: tuple, kwargs: dict) -> str:
    """How a bound widget's allowed values read in a notice ("1 to 16", "one of a, b")."""
    name = getattr(widget, "__name__", "")
    if name in {"slider", "number_input"} and len(args) >= 3:
        return f"{args[1]:g} to {args[2]:g}"
    if name in {"selectbox", "radio"} and len(args) >= 2:
        options = [str(o) for o in args[1]]
        shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
        return f"one of {shown}"
    if name == "toggle":
        return "true or false"
    return "a valid value"


def _bound(widget: Callable, *args: Any, key: str, **kwargs: Any) -> Any:
    """A widget bound to the URL query parameter ``key``, kept across page switches."""
    allowed = getattr(_RUN, "allowed", None)
    if allowed is not None:
        allowed[key] = _allowed_text(widget, args, kwargs)
    return widget(*args, key=key, bind="query-params", persist_state="session", **kwargs)


def _same_value(raw: str, value: Any) -> bool:
    """Whether a URL string means the widget's current value (then dropping it was no loss)."""
    if isinstance(value, bool):
        return raw.strip().lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return math.isclose(float(raw), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return raw == str(value)


def _url_notices(raw: Mapping[str, Any]) -> list[str]:
    """One line per URL value the bound widgets refused (out of range, NaN, unknown option).

    Streamlit drops an invalid bound value silently; a student who pasted a link must learn
    which value was ignored, what is allowed and what is used instead.
    """
    notices = []
    kept = st.query_params
    for key, allowed in getattr(_RUN, "allowed", {}).items():
        if key not in raw or key in kept:
            continue
        value = raw[key]
        raw_text = value[-1] if isinstance(value, list) else str(value)
        current = st.session_state.get(key)
        if current is None or _same_value(raw_text, current):
            continue
        notices.append(
            f"The link's value {key}={raw_text[:40]} is not allowed ({key} takes {allowed}); "
            f"using {current}."
        )
    return notices


def _read_prompts(
    typed: str | None, fallback: tuple[str, ...]
) -> tuple[tuple[str, ...], list[str]]:
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


def _sidebar_policy(source: str, model: str, sampling: Any) -> str:
    """The policy the pages show: the original, or this session's updated / trained adapter."""
    from roll_viz.ui import policies

    if source.startswith("run:"):
        return source
    choices = policies.available(model, int(getattr(sampling, "seed", 0)))
    if not choices:
        return source
    views = [policies.ORIGINAL, *choices]
    chosen = st.session_state.get(policies.KEY_POLICY_VIEW, policies.ORIGINAL)
    if chosen not in views:
        chosen = policies.ORIGINAL
    # a plain session key holds the choice (a widget's own state does not follow page switches)
    view = st.sidebar.radio(
        "Policy the pages show",
        views,
        index=views.index(chosen),
        format_func=lambda v: policies.label(v, choices[v][1] if v in choices else 0),
        key=policies.KEY_POLICY_WIDGET,
        on_change=lambda: st.session_state.__setitem__(
            policies.KEY_POLICY_VIEW, st.session_state[policies.KEY_POLICY_WIDGET]
        ),
        help="Your updated or trained LoRA policy samples the same prompts and settings; the "
        "reference stays the base model, so Token KL shows the KL the update produced.",
    )
    st.session_state[policies.KEY_POLICY_VIEW] = view
    if view == policies.ORIGINAL:
        return source
    policy, steps = choices[view]
    return source + policies.suffix(view, policy, steps)


def stop_run() -> None:
    """Callback: back to the presets (the run step leaves the URL)."""
    st.session_state[KEY_RUN_URL] = ""
    st.session_state[KEY_STEP_URL] = ""


def use_run_step(run_id: str, step: int) -> None:
    """Callback: make one step of an imported run the data of every page (and of the URL)."""
    st.session_state[KEY_RUN_URL] = run_id
    st.session_state[KEY_STEP_URL] = str(step)


def _run_link() -> str | None:
    """The run step named in the URL (``dump=<run id>&dump_step=<step>``) as a source, or None.

    Two bound fields carry it: widgets drawn by the router belong to every page, so Streamlit
    keeps them (and their query parameters) on every page switch, as it keeps the other
    controls. The sidebar names the run in words, so the fields themselves are hidden (CSS).
    """
    hidden = {"label_visibility": "collapsed", "max_chars": 300}
    run_id = _bound(st.sidebar.text_input, "Run", value="", key=KEY_RUN_URL, **hidden)
    step = _bound(st.sidebar.text_input, "Run step", value="", key=KEY_STEP_URL, **hidden)
    if not run_id or not step:
        return None
    return f"run:{run_id}#{step}"


def _run_data(messages: list[str]) -> tuple[str, str, Any] | None:
    """The imported run step as the data source, when one is chosen (Your run page or URL)."""
    from roll_viz.ui import runs

    source = _run_link()
    if source is None:
        st.session_state.pop(KEY_RUN_SOURCE, None)
        return None
    try:
        run_id, step_no = runs.parse_source(source)
        step = runs.step_cached(run_id, step_no)
    except (ValueError, KeyError, OSError) as err:
        messages.append(f"The run in the link cannot be opened ({err}); using the presets.")
        st.session_state.pop(KEY_RUN_SOURCE, None)
        st.sidebar.button("Forget the link's run", key="stop_run", on_click=stop_run)
        return None
    st.session_state[KEY_RUN_SOURCE] = source
    sb = st.sidebar
    sb.info(
        text.md_escape(
            f"Data: your run {run_id.split('/')[-1].removeprefix('dir:')}, step {step_no} "
            f"({text.count(len(step.prompts), 'prompt')}, {int(step.scores.numel())} samples; "
            f"scores: {step.score_kind} from the file)."
        ),
        icon=":material/folder_open:",
    )
    sb.button("Back to the presets", key="stop_run", on_click=stop_run)
    group_size = int(torch.bincount(step.group_ids).max()) if step.scores.numel() else 1
    preset = st.session_state.get(KEY_PRESET) or next(iter(_presets()))
    return source, preset, RunSampling(run_id=run_id, step=step_no, group_size=group_size)


def _sidebar_data(messages: list[str]) -> tuple[str, str, Any]:
    """Data section: preset / live, prompts, G, sampling. Returns (source, preset, sampling)."""
    from roll_viz.lm import sampling as sampling_mod

    presets = _presets()
    names = list(presets)
    sb = st.sidebar
    sb.markdown("### Data")
    run = _run_data(messages)
    if run is not None:
        return run
    preset = _bound(
        sb.selectbox,
        "Preset",
        names,
        key=KEY_PRESET,
        on_change=_on_preset_change,
        help="A committed batch sampled from the real model: loads instantly, no model needed.",
    )
    sb.caption(presets[preset][0])
    preset_sampling, _ = _preset_defaults(preset)
    live = _bound(
        sb.toggle,
        "Sample live with the model",
        value=False,
        key=KEY_LIVE,
        help="Sample your own prompts with the policy and score them under the reference model. "
        "Runs only when the prompts, G, temperature, max tokens, seed or policy change.",
    )
    group_size = _bound(
        sb.slider,
        "Group size G (samples per prompt)",
        1,
        MAX_GROUP_SIZE,
        value=int(preset_sampling.group_size),
        key=KEY_G,
        help="How many responses each prompt gets. GRPO-style estimators compare the samples "
        "of one prompt with each other.",
    )
    if not live and not preset_available(preset):
        messages.append(
            f"The committed batch of preset {preset!r} is missing or stale: sampling its "
            "settings with the live model instead."
        )
        live_fallback = True
    else:
        live_fallback = False
    if not live:
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

    prompts_text = _bound(
        sb.text_area,
        "Prompts (one per line)",
        value="\n".join(preset_sampling.prompts),
        key=KEY_PROMPTS,
        height=110,
        help=f"Up to {MAX_PROMPTS} prompts of at most {MAX_PROMPT_CHARS} characters each; "
        "a new line starts a new prompt.",
    )
    prompts, prompt_notes = _read_prompts(prompts_text, tuple(preset_sampling.prompts))
    for note in prompt_notes:
        sb.warning(text.md_escape(note), icon=":material/edit_note:")
    temperature = _bound(
        sb.slider,
        "Temperature",
        0.1,
        2.0,
        value=float(preset_sampling.temperature),
        step=0.05,
        key=KEY_TEMPERATURE,
        help="Softmax temperature of the policy; log-probs are taken at this temperature.",
    )
    max_tokens = _bound(
        sb.slider,
        "Max new tokens",
        4,
        MAX_NEW_TOKENS,
        value=int(preset_sampling.max_new_tokens),
        step=4,
        key=KEY_MAX_TOKENS,
        help="Responses that hit this length are truncated (finish reason 'length').",
    )
    seed = _bound(
        sb.number_input,
        "Seed",
        0,
        2**31 - 1,
        value=int(preset_sampling.seed),
        step=1,
        key=KEY_SEED,
        help="Same seed, same samples (the seed is in the URL).",
    )
    policy = _bound(
        sb.radio,
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
        instruction = _bound(
            sb.text_area,
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

    _bound(
        sb.toggle,
        "Fast sampling (int8 answers)",
        value=False,
        key=KEY_FAST,
        help="Draw the answers with an int8 copy of the model (CPU): about 1.3x faster for a "
        "classroom request. Approximate: its next-token distributions differ from the float "
        "model's (about 0.13 nats of KL per token; the top token agrees about 83 % of the time, "
        "measured by `python -m roll_viz.bench --sampling --only fidelity`). Every log-prob, KL "
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
    capped = getattr(sampling_mod, "capped", None)
    if capped is not None:
        cfg, cap_messages = capped(cfg)
        messages.extend(cap_messages)
    return "live", preset, cfg


def _valid_params(name: str, typed: dict[str, Any], slots: dict[str, Any]) -> dict[str, Any]:
    """The reward's parameters with each bad one replaced by its last valid value.

    Each problem is written under its own field (``slots``); the rest of the sidebar and the
    page keep working on the last values that were valid (or the defaults).
    """
    from roll_viz import rewards

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
    from roll_viz import rewards

    sb = st.sidebar
    sb.markdown("### Reward")
    _sampling, preset_reward = _preset_defaults(preset)
    default_name, default_params = _reward_defaults(preset_reward)
    names = _reward_choices(preset_reward)
    name = _bound(
        sb.selectbox,
        "Reward function",
        names,
        index=names.index(_default_reward_choice(preset_reward)),
        key=KEY_REWARD,
        help="A toy, rule-based reward on the response text (no reward model). 'preset' is the "
        "preset's own weighted sum of several rewards; pick one reward to tune its parameters.",
    )
    if name == PRESET_REWARD:
        sb.caption("reward = " + _describe_terms(preset_reward.terms))
    params, slots = {}, {}
    for param, (default, help_text) in rewards.REWARD_PARAMS.get(name, {}).items():
        value = default_params.get(param, default) if name == default_name else default
        key = KEY_REWARD_PARAM_PREFIX + param
        bounds = rewards.PARAM_BOUNDS.get((name, param))
        if bounds is not None:
            low, high, inclusive = bounds
            help_text += f" (allowed: {'[' if inclusive else '('}{low:g}, {high:g}])"
        if isinstance(default, bool):
            params[param] = _bound(sb.toggle, param, value=bool(value), key=key, help=help_text)
        elif isinstance(default, int | float):
            params[param] = _bound(
                sb.number_input,
                param,
                value=float(value) if isinstance(default, float) else int(value),
                key=key,
                help=help_text,
            )
        else:
            params[param] = _bound(
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
    noise = _bound(
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


def _sidebar_algorithm(group_size: int, messages: list[str]) -> tuple[str, dict, dict]:
    """Algorithm section: dialect and generic knobs. Returns (framework, generic, config)."""
    pipeline = _pipeline()
    sb = st.sidebar
    sb.markdown("### Algorithm")
    frameworks = list(pipeline.FRAMEWORKS)
    framework = _bound(
        sb.selectbox,
        "Framework dialect (roll = default)",
        frameworks,
        key=KEY_FRAMEWORK,
        on_change=_on_framework_change,
        help="Whose conventions the pipeline follows. Switching loads that framework's shipped "
        "defaults into the controls below.",
    )
    aliases = pipeline.ALIASES[framework]
    choices = pipeline.CHOICES.get(framework, {})
    helps = pipeline.HELP.get(framework, {})
    widget_defaults = _generic_defaults(framework)

    def label(generic: str, text: str) -> str:
        key = aliases.get(generic)
        return f"{text} ({key})" if key else f"{text} (not in {framework})"

    def help_for(generic: str) -> str:
        key = aliases.get(generic)
        if key is None:
            return f"{FRAMEWORK_LABELS.get(framework, framework)} has no such setting."
        return helps.get(key, "")

    generic: dict[str, Any] = {}
    est_key = aliases.get("estimator")
    est_options = list(choices.get(est_key, ())) if est_key else []
    if est_options:
        default_est = widget_defaults.get("estimator")
        generic["estimator"] = _bound(
            sb.selectbox,
            label("estimator", "Advantage estimator"),
            est_options,
            index=est_options.index(default_est) if default_est in est_options else 0,
            key=KEY_ESTIMATOR,
            help=help_for("estimator"),
        )
    generic["beta"] = _bound(
        sb.slider,
        label("beta", "KL coefficient beta"),
        0.0,
        1.0,
        value=float(widget_defaults.get("beta") or 0.0),
        step=0.001,
        format="%.3f",
        key=KEY_BETA,
        disabled=aliases.get("beta") is None,
        help=help_for("beta"),
    )
    kl_key = aliases.get("kl_estimator")
    kl_options = list(choices.get(kl_key, ())) if kl_key else []
    if kl_options:
        default_kl = widget_defaults.get("kl_estimator")
        generic["kl_estimator"] = _bound(
            sb.selectbox,
            label("kl_estimator", "KL estimator"),
            kl_options,
            index=kl_options.index(default_kl) if default_kl in kl_options else 0,
            key=KEY_KL_ESTIMATOR,
            help=help_for("kl_estimator"),
        )
    generic["kl_in_reward"] = _bound(
        sb.toggle,
        label("kl_in_reward", "KL in the reward"),
        value=bool(widget_defaults.get("kl_in_reward")),
        key=KEY_KL_IN_REWARD,
        disabled=aliases.get("kl_in_reward") is None,
        help=help_for("kl_in_reward"),
    )
    generic["gamma"] = _bound(
        sb.slider,
        label("gamma", "Discount gamma"),
        0.0,
        1.0,
        value=float(widget_defaults.get("gamma", 1.0)),
        step=0.01,
        key=KEY_GAMMA,
        disabled=aliases.get("gamma") is None,
        help=help_for("gamma"),
    )
    generic["lam"] = _bound(
        sb.slider,
        label("lam", "GAE lambda"),
        0.0,
        1.0,
        value=float(widget_defaults.get("lam", 1.0)),
        step=0.01,
        key=KEY_LAM,
        disabled=aliases.get("lam") is None,
        help=help_for("lam"),
    )
    generic["clip"] = _bound(
        sb.number_input,
        label("clip", "Reward clip (0 = off)"),
        0.0,
        100.0,
        value=float(widget_defaults.get("clip") or 0.0),
        step=0.5,
        key=KEY_CLIP,
        disabled=aliases.get("clip") is None,
        help=help_for("clip"),
    )
    generic["whiten"] = _bound(
        sb.toggle,
        label("whiten", "Whiten advantages"),
        value=bool(widget_defaults.get("whiten")),
        key=KEY_WHITEN,
        disabled=aliases.get("whiten") is None,
        help=help_for("whiten"),
    )
    norm_overrides_ = None
    if framework == "roll":
        # ROLL's reward normalization is a stage of the chain: one control drives every page
        generic["norm"] = _bound(
            sb.segmented_control,
            "Reward normalization (norm_mean_type / norm_std_type)",
            ["none", "group", "batch", "running"],
            default="none",
            required=True,
            key=KEY_NORM,
            help="ROLL normalizes the response rewards before the KL and the estimator: subtract "
            "the mean and divide by the std of the prompt's group, the whole batch, or running "
            "statistics over many batches. ROLL's grpo forces group.",
        )
        norm_overrides_ = norm_overrides(framework, generic["norm"])
    config = resolve_config(framework, generic, overrides=norm_overrides_)
    if group_size < 2:
        messages.append(
            f"G = 1: a group of one has no spread. {SINGLETON_NOTES.get(framework, '')}"
        )
    return framework, generic, config


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
    drawn = getattr(_RUN, "state", None)
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
    _RUN.state = None
    with page_guard(title):
        _RUN.state = _draw_sidebar()
    if _RUN.state is None:  # the guard showed what went wrong
        st.stop()
    try:
        yield
    finally:
        _RUN.state = None


def _draw_sidebar() -> AppState:
    """Draw the shared sidebar and return the state it describes."""
    messages: list[str] = []
    raw_url = st.query_params.to_dict()  # before the bound widgets drop what they refuse
    _RUN.allowed = {}
    source, preset, sampling = _sidebar_data(messages)
    model = _sidebar_model(source == "live")
    source = _sidebar_policy(source, model, sampling)
    reward = _sidebar_reward(preset)
    if source.startswith("run:"):
        st.sidebar.caption("These reward settings do not apply: the run's file gives the scores.")
    framework, generic, config = _sidebar_algorithm(sampling.group_size, messages)
    present, hide = _sidebar_presentation()
    _inject_css(present, hide)
    messages = _url_notices(raw_url) + messages
    st.sidebar.caption(
        "Every control is in the URL: copy it to share this exact state "
        "(`?present=true&hide=beta,G` for a projector)."
    )
    state = AppState(
        source=source,
        preset=preset,
        sampling=sampling,
        reward=reward,
        framework=framework,
        config_items=_freeze(config),
        generic=_freeze(generic),
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
