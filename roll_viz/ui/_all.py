"""The shared Streamlit layer: page set-up, the sidebar, cached data and downloads.

This is the only package module that imports streamlit. Every page starts with
``state = ui.page_setup("Title")`` and then asks the cached functions below for the data it shows:

    cached_models()           the one shared model (st.cache_resource)
    cached_rollout(state)     the sampled batch: a committed preset (instant) or the live model
    cached_scores(state)      (B,) raw rewards of the batch
    current_batch(state)      the calculator's input (Batch), with a zero or a probe critic
    cached_trace(state, ...)  the pipeline's Trace in the sidebar's dialect (or another one)

The data flow follows the DAG: a hyperparameter change (beta, gamma, lam, estimator ...) is a cache
hit on the rollout and the scores and only reruns ``pipeline.run`` (pure, milliseconds). Nothing a
page computes is handed to another page through ``st.session_state``; the only per-session state
is the running reward statistics of the Rewards page and the presentation-mode flags.

Widget values live in the URL (``bind="query-params"``; only non-default values appear), so a
link reproduces the state, seed included. ``?present=true`` enlarges fonts and ``&hide=beta,G``
hides those sidebar controls (``hide=sidebar`` hides the whole sidebar) for a teacher's
projector; both are bound controls too (sidebar, "Presentation mode"), so they survive page
switches.

Live samples are cached in a small shared LRU held by ``st.cache_resource`` rather than in
``st.cache_data``: that way the sampling progress (``st.status`` + ``st.progress``) is drawn only
on a cache miss, and never replayed on a hit.
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st
import torch

from roll_viz.core.records import Batch, Rollout, RunningMoments, Trace, batch_from_rollout
from roll_viz.views import explain

# ---------------------------------------------------------------------------------------------
# Widget keys (also the URL query-parameter names). Keep them short and stable.
# ---------------------------------------------------------------------------------------------
KEY_PRESET = "preset"
KEY_MODEL = "model"
PRESET_REWARD = "preset"  # reward selector value: the preset's own (possibly weighted-sum) reward
KEY_LIVE = "live"
KEY_PROMPTS = "prompts"
KEY_G = "G"
KEY_TEMPERATURE = "temp"
KEY_MAX_TOKENS = "T"
KEY_SEED = "seed"
KEY_POLICY = "policy"
KEY_INSTRUCTION = "instr"
KEY_REWARD = "reward"
KEY_REWARD_PARAM_PREFIX = "rp_"
KEY_NOISE = "noise"
KEY_FRAMEWORK = "fw"
KEY_ESTIMATOR = "est"
KEY_BETA = "beta"
KEY_KL_ESTIMATOR = "kl"
KEY_KL_IN_REWARD = "klr"
KEY_GAMMA = "gamma"
KEY_LAM = "lam"
KEY_CLIP = "clip"
KEY_WHITEN = "whiten"

# Page-local controls (defined here so tests and the browser suite can find them by key).
KEY_CRITIC = "critic"  # Advantages: "zero" | "probe"
KEY_SAMPLE = "sample"  # Advantages / Token KL: selected sample b
KEY_POSITION = "pos"  # Advantages: selected token position t
KEY_KL_VIEW = "klv"  # Token KL: which estimator the heatmap shows
KEY_BETA_MODE = "beta_mode"  # Token KL: fixed | adaptive
KEY_TARGET_KL = "target_kl"  # Token KL: target KL of the adaptive controller
KEY_HORIZON = "horizon"  # Token KL: horizon of the adaptive controller
KEY_STEPS = "steps"  # Token KL: simulated steps
KEY_NORM = "norm"  # Rewards: none | group | batch | running
KEY_CHIP_VIEW = "chips"  # Samples: what the token chips colour by

# Per-session state (small values only, never tensors).
KEY_RUNNING = "_running_moments"
KEY_RUNNING_BATCHES = "_running_batches"
KEY_PRESENT = "present"
KEY_HIDE = "hide"

#: Generic sidebar controls and their widget keys (generic names as in ``pipeline.ALIASES``).
GENERIC_KEYS: dict[str, str] = {
    "estimator": KEY_ESTIMATOR,
    "beta": KEY_BETA,
    "kl_estimator": KEY_KL_ESTIMATOR,
    "kl_in_reward": KEY_KL_IN_REWARD,
    "gamma": KEY_GAMMA,
    "lam": KEY_LAM,
    "clip": KEY_CLIP,
    "whiten": KEY_WHITEN,
}

FRAMEWORK_LABELS = {
    "roll": "ROLL (default)",
    "verl": "verl",
    "openrlhf": "OpenRLHF",
    "trl": "TRL",
}

#: Live-sampling caps (the models engineer's ``sampling.capped`` applies its own on top).
MAX_GROUP_SIZE = 16
MAX_NEW_TOKENS = 256
MAX_PROMPTS = 8
LIVE_CACHE_ENTRIES = 16
_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")

PAGES = {
    "home": "app.py",
    "samples": "pages/1_Samples.py",
    "rewards": "pages/2_Rewards.py",
    "kl": "pages/3_Token_KL.py",
    "advantages": "pages/4_Advantages.py",
    "local_global": "pages/5_Local_vs_Global.py",
    "sensitivity": "pages/6_Sensitivity.py",
    "frameworks": "pages/7_Frameworks.py",
    "self_test": "pages/8_Self_test.py",
}

#: What a group of one sample means in each dialect (shown when G = 1).
SINGLETON_NOTES = {
    "roll": "ROLL's group std of one sample is NaN (torch.std with n - 1 = 0), so GRPO / group "
    "normalization is undefined; use gae or reinforce.",
    "verl": "verl treats a group of one as mean 0, std 1: GRPO then passes the raw reward through, "
    "RLOO keeps the raw score.",
    "openrlhf": "OpenRLHF asserts n_samples_per_prompt > 1 for rloo, reinforce_baseline, "
    "group_norm and dr_grpo; gae and reinforce still work.",
    "trl": "TRL requires at least 2 generations per prompt (GRPO and RLOO are both group methods).",
}

PRESENT_CSS = """
<style>
[data-testid="stMain"] { font-size: 21px; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.2rem; }
[data-testid="stMain"] [data-testid="stHeading"] h1 { font-size: 2.6rem; }
[data-testid="stMain"] .katex { font-size: 1.35em !important; }
[data-testid="stMain"] [data-testid="stMetricValue"] { font-size: 2.8rem; }
</style>
"""

BASE_CSS = """
<style>
.rv-chips { line-height: 2.0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
a.rv-link { display: inline-block; padding: 0.35rem 0.8rem; border: 1px solid #2166ac;
  border-radius: 0.5rem; color: #2166ac; text-decoration: none; font-weight: 600; }
a.rv-link:hover { background: #2166ac; color: #ffffff; }
</style>
"""


# ---------------------------------------------------------------------------------------------
# The state a page works with
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AppState:
    """Everything the sidebar decided, frozen and hashable (a cache key).

    Attributes:
        source: "preset:<name>" (committed rollout, no model needed) or "live".
        preset: name of the selected preset (the live path starts from its settings).
        sampling: the effective SamplingConfig (for a preset: its own config, group size possibly
            reduced by subsampling).
        reward: the RewardSpec scoring the samples.
        framework: dialect, one of pipeline.FRAMEWORKS ("roll" by default).
        config_items: the dialect's resolved config as sorted (key, value) pairs: the dialect's
            shipped DEFAULTS overridden by the sidebar's generic controls.
        generic: sorted (generic name, value) pairs of the sidebar's generic controls
            (estimator, beta, kl_estimator, kl_in_reward, gamma, lam, clip, whiten).
        model: model spec of the live path ("tiny", "smollm2", a path ...).
        present: presentation mode is on.
        messages: input problems the sidebar corrected (shown once, above the page).
    """

    source: str
    preset: str
    sampling: Any
    reward: Any
    framework: str = "roll"
    config_items: tuple = ()
    generic: tuple = ()
    model: str = "smollm2"
    present: bool = False
    messages: tuple[str, ...] = field(default=(), compare=False)

    @property
    def config(self) -> dict:
        """The dialect config (framework key names) as a dict."""
        return dict(self.config_items)

    @property
    def dialect_config(self) -> dict:
        """Alias of ``config``."""
        return self.config

    @property
    def live(self) -> bool:
        """True when the data comes from the live model rather than a committed preset."""
        return self.source == "live"

    @property
    def group_size(self) -> int:
        """Samples per prompt G of the batch the pages show."""
        return int(self.sampling.group_size)

    @property
    def seed(self) -> int:
        """Sampling seed of the batch."""
        return int(self.sampling.seed)


# ---------------------------------------------------------------------------------------------
# Small helpers around the other modules (imported lazily: pages stay importable while the
# models / pipeline modules evolve)
# ---------------------------------------------------------------------------------------------
def _pipeline():
    from roll_viz.core import pipeline

    return pipeline


def _presets() -> dict:
    from roll_viz.data import presets

    return presets.PRESETS


def _model_spec() -> str:
    from roll_viz.lm import models

    return (os.environ.get("ROLL_VIZ_MODEL") or models.DEFAULT_MODEL).strip()


def model_choices() -> list[str]:
    """Models a user may pick in the UI: the server's ROLL_VIZ_MODEL, the bundled one, tiny.

    A short allow-list, not free text: every distinct model stays loaded in the shared process,
    so letting each visitor name a folder or hub id would let one URL exhaust the server's memory.
    Any other model is chosen by whoever starts the server (ROLL_VIZ_MODEL or the CLI's --model).
    """
    from roll_viz.lm import models

    return list(dict.fromkeys([_model_spec(), models.DEFAULT_MODEL, "tiny"]))


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


def _freeze(value: Any) -> Any:
    """Lists -> tuples (recursively) so config values stay hashable."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


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


# ---------------------------------------------------------------------------------------------
# Sidebar
# ---------------------------------------------------------------------------------------------
def _preset_defaults(name: str) -> tuple[Any, Any]:
    """(SamplingConfig, RewardSpec) the preset was made with."""
    _description, sampling, reward = _presets()[name]
    return sampling, reward


def _reward_choices(reward_spec: Any) -> list[str]:
    """Reward selector options: "preset" first when the preset sums several rewards."""
    from roll_viz import rewards

    names = list(rewards.REWARD_FNS)
    return [PRESET_REWARD, *names] if len(reward_spec.terms) > 1 else names


def _default_reward_choice(reward_spec: Any) -> str:
    """The selector value that reproduces a preset's reward exactly."""
    return PRESET_REWARD if len(reward_spec.terms) > 1 else reward_spec.terms[0][0]


def _describe_terms(terms: tuple) -> str:
    """'1 x one_sentence + 1 x target_length(target=20, tolerance=20)' for a caption."""
    parts = []
    for name, weight, params in terms:
        args = ", ".join(f"{k}={v}" for k, v in params)
        parts.append(f"{weight:g} x {name}" + (f"({args})" if args else ""))
    return " + ".join(parts)


def _reward_defaults(reward_spec: Any) -> tuple[str, dict]:
    """(reward name, params dict) of the first term of a RewardSpec."""
    name, _weight, params = reward_spec.terms[0]
    return name, dict(params)


def _generic_defaults(framework: str) -> dict[str, Any]:
    """Widget values that reproduce the dialect's shipped defaults."""
    pipeline = _pipeline()
    defaults = pipeline.DEFAULTS[framework]
    out: dict[str, Any] = {}
    for generic, key in pipeline.ALIASES[framework].items():
        value = defaults.get(key) if key is not None else None
        out[generic] = _to_widget(generic, value)
    return out


def _to_widget(generic: str, value: Any) -> Any:
    """A dialect config value -> the generic widget's value."""
    if generic in {"beta", "gamma", "lam"}:
        return float(value) if value is not None else (0.0 if generic == "beta" else 1.0)
    if generic == "clip":
        if value is None:
            return 0.0
        if isinstance(value, list | tuple):
            return float(max(abs(float(v)) for v in value))
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


def _from_widget(generic: str, value: Any, default: Any) -> Any:
    """A generic widget's value -> the dialect config value (shape of the default kept)."""
    if generic == "clip":
        if not value:
            return None
        if isinstance(default, list | tuple):
            return (-float(value), float(value))
        return float(value)
    if generic in {"beta", "gamma", "lam"}:
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


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


def _bound(widget: Callable, *args: Any, key: str, **kwargs: Any) -> Any:
    """A widget bound to the URL query parameter ``key``, kept across page switches."""
    return widget(*args, key=key, bind="query-params", persist_state="session", **kwargs)


def _sidebar_data(messages: list[str]) -> tuple[str, str, Any]:
    """Data section: preset / live, prompts, G, sampling. Returns (source, preset, sampling)."""
    from roll_viz.lm import sampling as sampling_mod

    presets = _presets()
    names = list(presets)
    sb = st.sidebar
    sb.markdown("### Data")
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
            f"{len(sampling.prompts)} prompts x G = {sampling.group_size}, "
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
    )
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
        )

    prompts = tuple(p.strip() for p in (prompts_text or "").splitlines() if p.strip())
    if not prompts:
        messages.append("The prompt box is empty: keeping the preset's prompts.")
        prompts = tuple(preset_sampling.prompts)
    if len(prompts) > MAX_PROMPTS:
        messages.append(f"{len(prompts)} prompts is more than {MAX_PROMPTS}: using the first 8.")
        prompts = prompts[:MAX_PROMPTS]
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
    params = {}
    for param, (default, help_text) in rewards.REWARD_PARAMS.get(name, {}).items():
        value = default_params.get(param, default) if name == default_name else default
        key = KEY_REWARD_PARAM_PREFIX + param
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
            params[param] = _bound(sb.text_area, param, value=str(value), key=key, help=help_text)
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
    config = resolve_config(framework, generic)
    if group_size < 2:
        messages.append(
            f"G = 1: a group of one has no spread. {SINGLETON_NOTES.get(framework, '')}"
        )
    return framework, generic, config


def resolve_config(
    framework: str, generic: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict:
    """The dialect config: DEFAULTS[framework], then the generic controls, then overrides.

    A generic value that the dialect does not accept (an estimator name of another dialect, a
    knob the dialect lacks) is skipped, so the same sidebar drives every dialect.

    Args:
        framework: one of pipeline.FRAMEWORKS.
        generic: generic control name -> widget value (names as in pipeline.ALIASES).
        overrides: framework keys (or generic names) -> values, applied last.

    Returns:
        A fresh dict with the framework's own key names.
    """
    pipeline = _pipeline()
    defaults = pipeline.DEFAULTS[framework]
    aliases = pipeline.ALIASES[framework]
    choices = pipeline.CHOICES.get(framework, {})
    config = dict(defaults)
    for name, value in generic.items():
        key = aliases.get(name)
        if key is None:
            continue
        converted = _from_widget(name, value, defaults.get(key))
        if key in choices and converted not in choices[key]:
            continue
        config[key] = converted
    for name, value in (overrides or {}).items():
        key = name if name in defaults or name not in aliases else aliases[name]
        if key is None:
            continue
        config[key] = value
    return config


def page_setup(title: str) -> AppState:
    """Set up a page: page config, CSS, the shared sidebar. Call first on every page.

    Args:
        title: page title (browser tab).

    Returns:
        The frozen AppState the sidebar describes.
    """
    st.set_page_config(
        page_title=f"{title} - roll-viz", page_icon=":material/route:", layout="wide"
    )
    messages: list[str] = []
    source, preset, sampling = _sidebar_data(messages)
    model = _sidebar_model(source == "live")
    reward = _sidebar_reward(preset)
    framework, generic, config = _sidebar_algorithm(sampling.group_size, messages)
    present, hide = _sidebar_presentation()
    _inject_css(present, hide)
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
        messages=tuple(messages),
    )
    if messages:
        st.warning("\n".join(f"- {m}" for m in messages), icon=":material/info:")
    return state


# ---------------------------------------------------------------------------------------------
# Cached data
# ---------------------------------------------------------------------------------------------
@st.cache_resource(show_spinner="Loading the policy and reference model...")
def cached_models(spec: str | None = None) -> Any:
    """The shared ModelBundle (one per process). ``spec`` None reads ROLL_VIZ_MODEL."""
    from roll_viz.lm import models

    return models.load_models(spec or _model_spec())


class _LiveStore:
    """A small thread-safe LRU of live Rollouts, shared by every session."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.items: OrderedDict = OrderedDict()

    def get(self, key: Any) -> Rollout | None:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            return None

    def put(self, key: Any, value: Rollout) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


@st.cache_resource
def _live_store() -> _LiveStore:
    return _LiveStore(LIVE_CACHE_ENTRIES)


@st.cache_data(show_spinner=False, max_entries=32, ttl=60)
def preset_available(name: str) -> bool:
    """Whether the preset's committed JSON loads (exists and matches its config)."""
    try:
        _preset_rollout(name)
    except (OSError, ValueError, KeyError):
        return False
    return True


@st.cache_data(show_spinner=False, max_entries=32)
def _preset_rollout(name: str) -> Rollout:
    from roll_viz.data import presets

    return presets.load_preset(name)[2]


def sample_live(model: str, sampling: Any) -> Rollout:
    """A live rollout for ``sampling`` (cached; progress drawn only when it really samples).

    Args:
        model: model spec (part of the cache key).
        sampling: the SamplingConfig.

    Returns:
        The Rollout.
    """
    from roll_viz.lm import models as models_mod
    from roll_viz.lm import sampling as sampling_mod

    store = _live_store()
    key = (model, sampling)
    rollout = store.get(key)
    if rollout is not None:
        return rollout
    try:
        bundle = cached_models(model)
    except models_mod.ModelNotFoundError as err:
        st.error(f"The live model is not available: {err}")
        st.stop()
    n_rows = len(sampling.prompts) * sampling.group_size
    label = f"Sampling {n_rows} responses with {bundle.name}..."
    if bundle.lock.locked():
        label = "Waiting for the shared model (another user is sampling)... then " + label
    with st.status(label, expanded=True) as status:
        bar = st.progress(0.0, text="starting")

        def progress(fraction: float, text: str) -> None:
            bar.progress(min(max(float(fraction), 0.0), 1.0), text=text)

        rollout = sampling_mod.sample(bundle, sampling, progress=progress)
        status.update(label=f"Sampled {n_rows} responses", state="complete", expanded=False)
    store.put(key, rollout)
    return rollout


def cached_rollout(state: AppState) -> Rollout:
    """The batch the pages show: the preset's committed rollout, or a live sample.

    Args:
        state: from page_setup.

    Returns:
        The Rollout (for a preset with a smaller G: the first G samples of each prompt).
    """
    if state.live:
        return sample_live(state.model, state.sampling)
    rollout = _preset_rollout(state.preset)
    if state.group_size < rollout.group_size:
        rollout = _subsampled(state.preset, state.group_size)
    return rollout


@st.cache_data(show_spinner=False, max_entries=64)
def _subsampled(preset: str, group_size: int) -> Rollout:
    return explain.subsample_rollout(_preset_rollout(preset), group_size)


def _rollout_key(state: AppState) -> tuple:
    return (state.source, state.preset, state.model, state.sampling)


@st.cache_data(show_spinner=False, max_entries=128)
def _scores(_rollout: Rollout, key: tuple, spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    from roll_viz import rewards

    scores = rewards.score_rollout(_rollout, spec)
    greedy_fn = getattr(rewards, "score_greedy", None)
    greedy = (
        greedy_fn(_rollout, spec) if greedy_fn is not None and _rollout.greedy_responses else None
    )
    return scores, greedy


def cached_scores(state: AppState) -> torch.Tensor:
    """(B,) float64 raw rewards of the current batch under the sidebar's RewardSpec."""
    return _scores(cached_rollout(state), _rollout_key(state), state.reward)[0]


def current_batch(state: AppState, values: str = "zero") -> Batch:
    """The calculator's input for the current batch.

    Args:
        state: from page_setup.
        values: critic for GAE: "zero" (V = 0 everywhere) or "probe" (cross-fitted ridge probe on
            the reference model's features, fitted to the Monte-Carlo returns).

    Returns:
        A Batch with scores, masks, log-probs, values and the greedy baseline scores (ReMax).
    """
    rollout = cached_rollout(state)
    scores, greedy = _scores(rollout, _rollout_key(state), state.reward)
    if values == "probe":
        value_tensor = _probe(state)
    elif values == "zero":
        value_tensor = torch.zeros_like(rollout.response_mask)
    else:
        raise ValueError(f"values must be 'zero' or 'probe', got {values!r}")
    return batch_from_rollout(rollout, scores, values=value_tensor, baseline_scores=greedy)


def _probe(state: AppState) -> torch.Tensor:
    rollout = cached_rollout(state)
    return _probe_cached(
        _rollout_key(state), state.reward, state.framework, state.config_items, _rollout=rollout
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _probe_cached(
    key: tuple, spec: Any, framework: str, config_items: tuple, _rollout: Rollout
) -> torch.Tensor:
    from roll_viz.core.pipeline import values as values_mod

    if _rollout.features is None:
        return torch.zeros_like(_rollout.response_mask)
    scores, greedy = _scores(_rollout, key, spec)
    batch = batch_from_rollout(
        _rollout, scores, values=torch.zeros_like(_rollout.response_mask), baseline_scores=greedy
    )
    targets = _mc_returns(batch, framework, dict(config_items))
    return values_mod.probe_values(_rollout.features, targets, _rollout.response_mask)


def _mc_returns(batch: Batch, framework: str, config: dict) -> torch.Tensor:
    """Monte-Carlo returns of the dialect's token rewards: the value probe's targets.

    Computed as the dialect's GAE with lam = 1, a zero critic and no whitening.
    """
    pipeline = _pipeline()
    fw = framework
    aliases = pipeline.ALIASES[fw]
    choices = pipeline.CHOICES.get(fw, {})
    est_key = aliases.get("estimator")
    if est_key is None or "gae" not in choices.get(est_key, ()):
        fw = "roll"
        aliases = pipeline.ALIASES[fw]
        est_key = aliases["estimator"]
    overrides = {est_key: "gae"}
    if aliases.get("lam"):
        overrides[aliases["lam"]] = 1.0
    if aliases.get("whiten"):
        overrides[aliases["whiten"]] = False
    base = config if fw == framework else {}
    trace = pipeline.run(batch, fw, {**pipeline.DEFAULTS[fw], **base, **overrides})
    return trace.returns


def running_moments() -> RunningMoments:
    """This session's running reward statistics (the Rewards page's "running" mode)."""
    return st.session_state.get(KEY_RUNNING, RunningMoments())


def running_batches() -> int:
    """How many extra batches were added to this session's running statistics."""
    return int(st.session_state.get(KEY_RUNNING_BATCHES, 0))


def reset_running() -> None:
    """Forget this session's running statistics."""
    st.session_state[KEY_RUNNING] = RunningMoments()
    st.session_state[KEY_RUNNING_BATCHES] = 0


def add_running_batch(state: AppState, overrides: Mapping[str, Any] | None = None) -> None:
    """Sample the next batch (same prompts, next seed), fold its rewards into the running stats.

    Args:
        state: from page_setup.
        overrides: extra dialect config (e.g. the Rewards page's normalization mode).
    """
    pipeline = _pipeline()
    k = running_batches() + 1
    base = state.sampling
    if not state.live:
        base = _preset_defaults(state.preset)[0]
        base = replace(base, group_size=state.group_size)
    next_sampling = replace(base, seed=int(base.seed) + k)
    rollout = sample_live(state.model, next_sampling)
    key = ("live", state.preset, state.model, next_sampling)
    scores, greedy = _scores(rollout, key, state.reward)
    batch = batch_from_rollout(
        rollout, scores, values=torch.zeros_like(rollout.response_mask), baseline_scores=greedy
    )
    config = resolve_config(state.framework, dict(state.generic), overrides)
    trace = pipeline.run(batch, state.framework, config, running=running_moments())
    if trace.running is not None:
        st.session_state[KEY_RUNNING] = trace.running
    st.session_state[KEY_RUNNING_BATCHES] = k


def _uses_running(config: Mapping[str, Any]) -> bool:
    return any(v == "running" for v in config.values())


@st.cache_data(show_spinner=False, max_entries=256)
def _trace_cached(
    key: tuple,
    spec: Any,
    values: str,
    framework: str,
    config_items: tuple,
    running: RunningMoments | None,
    _batch: Batch,
) -> Trace:
    return _pipeline().run(_batch, framework, dict(config_items), running=running)


def cached_trace(
    state: AppState,
    framework: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    values: str = "zero",
) -> Trace:
    """The pipeline's Trace for the current batch.

    A bad config stops the page with one clear error message (pipeline.run raises ValueError).

    Args:
        state: from page_setup.
        framework: dialect (default: the sidebar's). For another dialect the sidebar's generic
            controls are mapped onto that dialect's keys where it has them.
        overrides: framework keys (or generic names) -> values, applied last.
        values: critic for GAE, "zero" or "probe".

    Returns:
        The Trace (running statistics from this session when the config normalizes by "running").
    """
    fw = framework or state.framework
    if fw == state.framework and not overrides:
        config = state.config
    else:
        config = resolve_config(fw, dict(state.generic), overrides)
    running = running_moments() if _uses_running(config) else None
    batch = current_batch(state, values=values)
    try:
        return _trace_cached(
            _rollout_key(state), state.reward, values, fw, _freeze(config), running, _batch=batch
        )
    except ValueError as err:
        st.error(f"This combination of settings is not valid in {fw}: {err}")
        st.stop()
        raise  # pragma: no cover - st.stop() raises


def kl_estimates(state: AppState, estimator: str) -> torch.Tensor:
    """(B, T) per-token KL of the current batch with a generic estimator name (k1/abs/k2/k3)."""
    from roll_viz.core.pipeline import kl as kl_mod

    rollout = cached_rollout(state)
    return kl_mod.token_kl(
        rollout.logprobs, rollout.ref_logprobs, rollout.response_mask, estimator=estimator
    )


# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------
def explainer(markdown: str, *, title: str = "What am I looking at?") -> None:
    """A bordered box of plain-language explanation beside a picture."""
    with st.container(border=True):
        st.markdown(f"**{title}**")
        st.markdown(markdown)


def next_page(page: str, label: str) -> None:
    """The "Next ->" link at the bottom of a page (carries the whole URL state)."""
    st.divider()
    page_link(page, label + " \u2192")


def _url_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def url_state() -> dict[str, str]:
    """The shared sidebar's current values as query parameters.

    Returns:
        key -> URL text for every shared control that has a value (defaults included; the next
        page's widgets drop the ones equal to their default from the URL).
    """
    keys = [
        KEY_PRESET, KEY_LIVE, KEY_PROMPTS, KEY_G, KEY_TEMPERATURE, KEY_MAX_TOKENS, KEY_SEED,
        KEY_POLICY, KEY_INSTRUCTION, KEY_REWARD, KEY_NOISE, KEY_FRAMEWORK, *GENERIC_KEYS.values(),
        KEY_PRESENT, KEY_HIDE,
    ]  # fmt: skip
    keys += sorted(k for k in st.session_state if str(k).startswith(KEY_REWARD_PARAM_PREFIX))
    params: dict[str, str] = {}
    for key in keys:
        if key in st.session_state:
            text = _url_value(st.session_state[key])
            if text is not None and text != "":
                params[key] = text
    return params


def page_url(page: str, params: Mapping[str, str] | None = None) -> str:
    """Relative URL of a page (pages/N_Title.py -> "Title", app.py -> "./") with a query."""
    target = PAGES.get(page, page)
    name = os.path.basename(target).removesuffix(".py")
    path = "./" if target == PAGES["home"] else name.split("_", 1)[1] if "_" in name else name
    query = urlencode(params or {})
    return f"{path}?{query}" if query else path


def page_link(page: str, label: str, **_kwargs: Any) -> None:
    """A link to a page by short name (see PAGES) that carries the whole URL state.

    st.page_link cannot do this: on a page transition Streamlit drops query parameters bound to
    widgets of another page, and the shared sidebar's widgets belong to each page separately. A
    plain link reloads the app with the state in the URL instead (caches are shared, so the next
    page is still instant); the sidebar navigation keeps the state by itself.
    """
    href = html.escape(page_url(page, url_state()), quote=True)
    st.html(
        f'<a class="rv-link" href="{href}" target="_self">{html.escape(label)}</a>',
    )


def download_csv(df: pd.DataFrame, name: str, key: str, label: str | None = None) -> None:
    """A download button for a table as CSV.

    Args:
        df: the table.
        name: file name without extension.
        key: widget key.
        label: button label (default "Download <name>.csv").
    """
    st.download_button(
        label or f"Download {name}.csv",
        # A callable runs only when clicked, so an unused button costs nothing per rerun.
        data=lambda: df.to_csv(index=False).encode("utf-8"),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=key,
        on_click="ignore",
        icon=":material/download:",
    )


def trace_json(trace: Trace) -> str:
    """The whole trace as a JSON string (calculator.trace_to_dict when available)."""
    try:
        from roll_viz.cli.calculator import trace_to_dict
    except ImportError:  # pragma: no cover - fallback while the calculator is missing
        trace_to_dict = explain.trace_to_plain
    return json.dumps(trace_to_dict(trace), indent=1)


def download_trace_json(trace: Trace, key: str, name: str = "trace") -> None:
    """A download button for the whole trace as JSON."""
    st.download_button(
        f"Download the whole trace ({name}.json)",
        data=lambda: trace_json(trace).encode("utf-8"),
        file_name=f"{name}.json",
        mime="application/json",
        key=key,
        on_click="ignore",
        icon=":material/data_object:",
    )


def critic_radio(key: str = KEY_CRITIC, captions: bool = False) -> str:
    """The "Critic for GAE" choice ("zero" or "probe"), bound to the URL under ``key``."""
    return st.radio(
        "Critic for GAE",
        ["zero", "probe"],
        captions=["V = 0", "ridge probe on the reference model's hidden states, cross-fitted"]
        if captions
        else None,
        key=key,
        bind="query-params",
        horizontal=True,
        help="GAE needs a value estimate V(s_t). zero: V = 0. probe: a ridge regression from the "
        "reference model's hidden states to the returns, fitted on the other samples only.",
    )


def plot(fig: Any, key: str, **kwargs: Any) -> None:
    """st.plotly_chart with a key and the figure's own colours (theme off for fixed scales)."""
    st.plotly_chart(fig, key=key, theme=None, config={"displaylogo": False}, **kwargs)


def chips(html_text: str) -> None:
    """Render token chips (an already escaped HTML string from charts.token_chips_html)."""
    st.html(html_text)


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


def try_trace(
    state: AppState,
    framework: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    values: str = "zero",
) -> Trace | str:
    """Like cached_trace, but returns the error message instead of stopping the page.

    Args:
        state: from page_setup.
        framework: dialect (default: the sidebar's).
        overrides: framework keys (or generic names) -> values.
        values: critic for GAE, "zero" or "probe".

    Returns:
        The Trace, or the ValueError's message (an estimator undefined for this batch).
    """
    fw = framework or state.framework
    config = resolve_config(fw, dict(state.generic), overrides)
    running = running_moments() if _uses_running(config) else None
    batch = current_batch(state, values=values)
    try:
        return _trace_cached(
            _rollout_key(state), state.reward, values, fw, _freeze(config), running, _batch=batch
        )
    except ValueError as err:
        return str(err)


def estimator_options(framework: str) -> tuple[str, ...]:
    """The advantage estimators (or TRL scale_rewards modes) a dialect offers."""
    pipeline = _pipeline()
    return tuple(pipeline.CHOICES[framework].get(pipeline.ESTIMATOR_KEY[framework], ()))


def estimator_overrides(framework: str, estimator: str) -> dict[str, Any]:
    """Config overrides that select ``estimator`` in ``framework``."""
    return {_pipeline().ESTIMATOR_KEY[framework]: estimator}


def norm_overrides(framework: str, mode: str) -> dict[str, Any] | None:
    """Overrides for a reward-normalization mode (none/group/batch/running).

    Only ROLL has a separate reward-normalization stage; other dialects get None.

    Args:
        framework: dialect.
        mode: "none", "group", "batch" or "running".

    Returns:
        {norm_mean_type, norm_std_type} for ROLL, else None.
    """
    if framework != "roll":
        return None
    kind = None if mode == "none" else mode
    return {"norm_mean_type": kind, "norm_std_type": kind}


def kl_placement_overrides(framework: str, in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Overrides that put the KL in the token rewards (True) or in the loss (False).

    Args:
        framework: dialect.
        in_reward: where the KL goes.
        beta: coefficient to use in either place (the loss coefficient is set to it too).

    Returns:
        The overrides, or None where the dialect cannot do it (TRL GRPO: loss only).
    """
    if framework == "roll":
        return {
            "add_token_level_kl": in_reward,
            "use_kl_loss": not in_reward,
            "kl_loss_coef": 0.0 if in_reward else beta,
        }
    if framework == "verl":
        return {
            "use_kl_in_reward": in_reward,
            "use_kl_loss": not in_reward,
            "kl_loss_coef": beta,
        }
    if framework == "openrlhf":
        return {"use_loss": not in_reward}
    if framework == "trl":
        return None if in_reward else {}
    return None


def generic_value(state: AppState, name: str, default: Any = None) -> Any:
    """The sidebar's value of a generic control (beta, gamma, lam, estimator, ...)."""
    return dict(state.generic).get(name, default)
