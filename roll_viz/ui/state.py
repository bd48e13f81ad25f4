"""What the sidebar decided, as one frozen value: widget keys, caps, AppState and the URL.

Every widget value lives in the URL (``bind="query-params"``; only non-default values appear),
so a link reproduces the state, seed included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from roll_viz import nav
from roll_viz.core.pipeline import dialects
from roll_viz.lm.rollout import (
    CLASS_MAX_GROUP_SIZE,
    CLASS_MAX_NEW_TOKENS,
    CLASS_MAX_PROMPTS,
)
from roll_viz.lm.rollout import MAX_INSTRUCTION_CHARS as SAMPLER_MAX_INSTRUCTION_CHARS
from roll_viz.lm.rollout import MAX_PROMPT_CHARS as SAMPLER_MAX_PROMPT_CHARS

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
KEY_FAST = "fast"  # live sampling: answers drawn by the int8 decode copy
#: the live sidebar form's "Sample" button (prompts, G, T, seed, policy apply on it)
KEY_SAMPLE_APPLY = "sample_apply"
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
KEY_RUN_SOURCE = "_run_source"  # "run:<id>#<step>" when an imported run step is the data
KEY_RUN_URL, KEY_STEP_URL = "dump", "dump_step"  # the same in the URL (not "run": Training uses it)
KEY_LAST_VALID_PARAMS = "_last_valid_reward_params"  # (reward, param) -> last valid value
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


def framework_names() -> tuple[str, ...]:
    """Every registered dialect, the shipped four first.

    Read at call time, so one registered later (a fifth framework's file) is on every page.
    """
    return tuple(dialects.DIALECTS)


def framework_label(name: str) -> str:
    """A framework's display name: its dialect record's ``LABEL``."""
    return dialects.LABELS.get(name, name)


#: Live-sampling caps (``lm.sampling.capped`` applies the same caps on top).
# One source for the classroom caps: the sampler's own (the sliders never offer more than it takes).
MAX_GROUP_SIZE = CLASS_MAX_GROUP_SIZE  # G <= 16
MAX_NEW_TOKENS = CLASS_MAX_NEW_TOKENS  # <= 128 new tokens
MAX_PROMPTS = CLASS_MAX_PROMPTS  # <= 8 prompts
MAX_PROMPT_CHARS = SAMPLER_MAX_PROMPT_CHARS  # per prompt
MAX_INSTRUCTION_CHARS = SAMPLER_MAX_INSTRUCTION_CHARS


# ---------------------------------------------------------------------------------------------
# The state a page works with
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSampling:
    """What stands for the sampling settings when an imported run step is the data.

    Attributes:
        run_id: the run ("dir:<name>" or "upload:<hash>/<name>").
        step: the training step shown.
        group_size: the largest group of the step (groups of a real run may differ in size).
        prompts: not repeated here (the rollout has them); kept empty for a small cache key.
        version: the run's files as they are now (``run_source.run_version``): every cache keyed
            on the state reads a rewritten or growing run anew.
    """

    run_id: str
    step: int
    group_size: int
    prompts: tuple[str, ...] = ()
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 0
    policy_mode: str = "run"
    instruction: str = ""
    version: str = ""


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
        decode: how live answers are drawn: "float" (the model itself) or "int8" (the labelled
            fast path: an int8 copy draws, the float model scores); "float" for every other source.
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
    decode: str = "float"
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
    def adapted(self) -> bool:
        """True when the pages show this session's updated or trained LoRA policy."""
        return "|" in self.source

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


def freeze(value: Any) -> Any:
    """Lists -> tuples (recursively) so config values stay hashable."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


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
        KEY_RUN_URL, KEY_STEP_URL, KEY_PRESET, KEY_LIVE, KEY_PROMPTS, KEY_G, KEY_TEMPERATURE,
        KEY_MAX_TOKENS, KEY_SEED,
        KEY_POLICY, KEY_INSTRUCTION, KEY_FAST, KEY_REWARD, KEY_NOISE, KEY_FRAMEWORK,
        *GENERIC_KEYS.values(), KEY_NORM, KEY_PRESENT, KEY_HIDE,
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
    """Relative URL of a page (its ``url_path``; Home is "./") with a query.

    Args:
        page: a page key of ``roll_viz.nav.PAGES``.
        params: query parameters.
    """
    path = nav.url_path(page) or "./"
    query = urlencode(params or {})
    return f"{path}?{query}" if query else path
