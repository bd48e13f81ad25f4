"""The field checks of lesson files: each reads one field and names the gate and field if bad.

``roll_viz.data.lessons`` describes the format and assembles gates from these readers; a bad
field raises ``LessonError`` with one message, ``<file>: gate '<id>', field '<name>': <problem>``.
The bounds below are the format's (a lesson file is untrusted input).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roll_viz.core.agentic.credit import CREDIT_RULES
from roll_viz.core.agentic.masks import MASK_RULES
from roll_viz.core.pipeline import ALIASES, FRAMEWORKS, resolve_config
from roll_viz.data.lesson_expr import BASE_PREFIX, ExprError, Expression, compile_expression
from roll_viz.data.presets import PRESETS
from roll_viz.data.recorded_runs import RECORDED

MAX_CHOICES = 6
MAX_TEXT_CHARS = 1500
MAX_LABEL_CHARS = 200
MAX_INLINE_GROUPS = 8
MAX_INLINE_SAMPLES = 16
MAX_INLINE_TOKENS = 64
MAX_ABS_NUMBER = 1e9

#: the labels of a sign gate's three options when the file gives none: value +1, 0, -1
SIGN_LABELS = ("Up (positive)", "No change (zero)", "Down (negative)")
SIGN_VALUES = (1.0, 0.0, -1.0)

#: every name an answer expression may read, with what it holds (B samples, T_i tokens of sample
#: i, P prompts; lists index from 0). Which ones a gate has depends on its batch.
NAMES: dict[str, str] = {
    "scores": "(B,) raw rewards",
    "rewards": "(B,) response-level rewards after the dialect's normalisation",
    "advantage": "(B,) advantage of each answer's first token",
    "mean_advantage": "(B,) mean advantage over each answer's tokens",
    "advantages": "(B, T_i) advantage of every token",
    "token_rewards": "(B, T_i) token rewards (KL penalty included)",
    "returns": "(B, T_i) returns",
    "kl": "(B, T_i) per-token KL estimate",
    "kl_mean": "(B,) mean KL over each answer's tokens",
    "lengths": "(B,) tokens per answer",
    "group": "(B,) prompt index of each answer",
    "B": "number of answers",
    "G": "answers per prompt (the largest group)",
    "P": "number of prompts",
    "beta": "the KL coefficient used",
    "group_mean": "(P,) mean reward of each prompt",
    "group_std": "(P,) unbiased std of each prompt's rewards",
    "local_adv": "(B,) advantage under local (per-prompt) normalisation",
    "global_adv": "(B,) advantage under global (batch) normalisation",
    "local_scale": "(P,) batch std / group std: how much local normalisation amplifies a prompt",
    "zero_groups": "prompts whose rewards are all equal (no signal)",
    "loss": "the policy loss at the first update step (ratio 1)",
    "grad_coef": "(B, T_i) d loss / d log-prob of every token at the first step",
    "grad_tokens": "tokens with a non-zero gradient at the first step",
    "trained": "episodes: tokens the gate's mask trains",
    "sampled": "episodes: tokens the sampler generated (what the right mask trains)",
    "context_tokens": "episodes: tokens the mask trains that the sampler did not write",
    "dropped": "episodes: sampled tokens the mask leaves out",
    "context_share": "episodes: share of the gradient (sum |dL/dlog pi|) on context tokens",
    "grad_scale": "episodes: scale of a rightly trained token's gradient (right count / count)",
    "turns": "episodes: (B,) agent turns of each episode",
    "outcome": "episodes: (B,) outcome of each episode",
    "first_advantage": "episodes: (B,) the credit rule's advantage of each episode's first turn",
    "extra_turn": "episodes: change of the mean first-turn advantage per extra turn taken",
    "steps": "recorded run: number of steps",
    "run_reward": "recorded run: (steps,) mean reward per step",
    "run_kl": "recorded run: (steps,) exact KL(policy || reference) per step",
    "run_entropy": "recorded run: (steps,) mean token entropy per step",
    "run_length": "recorded run: (steps,) mean answer length per step",
    "run_loss": "recorded run: (steps,) loss per step",
    "run_grad_norm": "recorded run: (steps,) gradient norm per step",
}

#: a gate's kinds of answer, and the one figure its reveal draws
KINDS = ("choice", "sign", "number", "fix")
FIGURES = ("rewards", "advantages", "kl", "local_global", "update", "training", "episodes", "none")

#: settings keys that are not dialect keys
SETTING_FRAMEWORK = "framework"
SETTING_G = "G"
#: settings of an episodes batch: the loss mask rule and the credit rule (core.agentic)
SETTING_MASK = "mask"
SETTING_CREDIT = "credit"
EPISODE_SETTINGS = {SETTING_MASK: tuple(MASK_RULES), SETTING_CREDIT: tuple(CREDIT_RULES)}
#: the episode sets a gate's ``batch = "episodes:<name>"`` names (analysis.lesson_episodes)
EPISODE_SETS = ("calculator", "stops")
EPISODES_PREFIX = "episodes:"
#: what a knob may change besides the settings
KNOB_BATCH_KEYS = ("batch", "rewards", "lengths")


class LessonError(ValueError):
    """A lesson file that cannot be used; the one message names the gate and the field."""


def name_allowed(name: str) -> bool:
    """Whether an answer expression may read ``name`` (NAMES, or ``base_`` + one of NAMES)."""
    return name in NAMES or (name.startswith(BASE_PREFIX) and name[len(BASE_PREFIX) :] in NAMES)


@dataclass(frozen=True)
class Choice:
    """One option of a gate: what the class sees and the value the answer is matched to.

    ``run`` is a fix gate's: the recorded run that shows this knob change's outcome.
    """

    label: str
    value: float
    run: str | None = None


# ---------------------------------------------------------------------------------------------
# Field readers: each raises LessonError naming gate and field
# ---------------------------------------------------------------------------------------------


class Where:
    """Builds the one message of a bad file: source, gate and field."""

    def __init__(self, source: str, gate: str | None = None) -> None:
        self.source = source
        self.gate = gate

    def error(self, name: str, problem: str) -> LessonError:
        """The LessonError of field ``name``."""
        where = f"gate {self.gate!r}, " if self.gate else ""
        return LessonError(f"{self.source}: {where}field {name!r}: {problem}")


def text_field(w: Where, data: Mapping, name: str, limit: int, required: bool = True) -> str:
    """A text field (at most ``limit`` characters; required ones non-empty)."""
    value = data.get(name)
    if value is None:
        if required:
            raise w.error(name, "is missing")
        return ""
    if not isinstance(value, str):
        raise w.error(name, f"must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise w.error(name, f"is longer than {limit} characters")
    if required and not value.strip():
        raise w.error(name, "is empty")
    return value


def real_field(w: Where, name: str, value: Any) -> float:
    """A finite number within +-MAX_ABS_NUMBER."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise w.error(name, f"must be a number, got {value!r}"[:200])
    if not math.isfinite(value) or abs(value) > MAX_ABS_NUMBER:
        raise w.error(name, f"must be a finite number within +-{MAX_ABS_NUMBER:g}")
    return float(value)


def int_field(w: Where, name: str, value: Any, low: int, high: int) -> int:
    """A whole number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise w.error(name, f"must be a whole number {low}..{high}, got {value!r}"[:200])
    return int(value)


def nested_field(
    w: Where, name: str, value: Any, item_max: int, integer: bool
) -> tuple[tuple[Any, ...], ...]:
    """Per prompt, a list of values (an inline batch's rewards or lengths)."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_INLINE_GROUPS:
        raise w.error(name, f"must be a list of 1..{MAX_INLINE_GROUPS} lists (one per prompt)")
    out = []
    for g, group in enumerate(value):
        if not isinstance(group, list) or not 1 <= len(group) <= MAX_INLINE_SAMPLES:
            raise w.error(name, f"prompt {g + 1}: must list 1..{MAX_INLINE_SAMPLES} answers")
        if integer:
            out.append(tuple(int_field(w, name, v, 1, item_max) for v in group))
        else:
            out.append(tuple(real_field(w, name, v) for v in group))
    return tuple(out)


def batch_field(w: Where, value: Any) -> str:
    """A batch source: a preset name, "live", "inline", "recorded:<run>" or "episodes:<set>"."""
    if not isinstance(value, str):
        raise w.error("batch", "must be text")
    if value in ("live", "inline") or value in PRESETS:
        return value
    if value.startswith("recorded:") and value.removeprefix("recorded:") in RECORDED:
        return value
    if value.startswith(EPISODES_PREFIX) and value.removeprefix(EPISODES_PREFIX) in EPISODE_SETS:
        return value
    known = ", ".join(
        [
            *sorted(PRESETS),
            "live",
            "inline",
            *(f"recorded:{n}" for n in RECORDED),
            *(EPISODES_PREFIX + n for n in EPISODE_SETS),
        ]
    )
    raise w.error("batch", f"{value[:60]!r} is not one of {known}")


def settings_field(w: Where, value: Any, label: str = "settings") -> tuple[tuple[str, Any], ...]:
    """Check every key on its own against the dialect (one message names the bad key)."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise w.error(label, 'must be a table, e.g. { estimator = "grpo", beta = 0.1 }')
    framework = value.get(SETTING_FRAMEWORK, "roll")
    if framework not in FRAMEWORKS:
        raise w.error(f"{label}.{SETTING_FRAMEWORK}", f"{framework!r} is not one of {FRAMEWORKS}")
    out: list[tuple[str, Any]] = []
    for key, item in value.items():
        if key == SETTING_FRAMEWORK:
            out.append((key, item))
            continue
        if key == SETTING_G:
            out.append((key, int_field(w, f"{label}.G", item, 1, 64)))
            continue
        if key in EPISODE_SETTINGS:
            if item not in EPISODE_SETTINGS[key]:
                known = ", ".join(EPISODE_SETTINGS[key])
                raise w.error(f"{label}.{key}", f"{str(item)[:60]!r} is not one of {known}")
            out.append((key, item))
            continue
        dialect_key = ALIASES[framework].get(key, key)
        if dialect_key is None:
            raise w.error(f"{label}.{key}", f"{framework} has no setting for {key!r}")
        try:
            resolve_config(framework, {dialect_key: item})
        except ValueError as err:
            raise w.error(f"{label}.{key}", str(err)) from None
        out.append((key, item))
    return tuple(out)


def dialect_config(framework: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A gate's settings in the dialect's own keys (generic names translated, G dropped)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in (SETTING_FRAMEWORK, SETTING_G, *EPISODE_SETTINGS):
            continue
        out[ALIASES[framework].get(key) or key] = value
    return out


def choices_field(w: Where, kind: str, value: Any) -> tuple[Choice, ...]:
    """The options of a gate (none for a number gate; three fixed values for a sign gate)."""
    if kind == "number":
        if value is not None:
            raise w.error("choices", "a number gate has a slider, not choices")
        return ()
    if kind == "sign":
        if value is None:
            return tuple(Choice(lab, v) for lab, v in zip(SIGN_LABELS, SIGN_VALUES, strict=True))
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(isinstance(v, str) for v in value)
        ):
            raise w.error("choices", "a sign gate takes three labels: [up, zero, down]")
        labels = [label_field(w, v) for v in value]
        return tuple(Choice(lab, v) for lab, v in zip(labels, SIGN_VALUES, strict=True))
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_CHOICES:
        raise w.error("choices", f"a choice gate needs 2..{MAX_CHOICES} choices")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(Choice(label_field(w, item), float(i)))
        elif isinstance(item, Mapping):
            extra = set(item) - {"label", "value"}
            if extra or "label" not in item or "value" not in item:
                raise w.error("choices", f"choice {i + 1} must be {{ label = ..., value = ... }}")
            out.append(
                Choice(label_field(w, item["label"]), real_field(w, "choices", item["value"]))
            )
        else:
            raise w.error("choices", f"choice {i + 1} must be a label or a {{label, value}} table")
    if len({c.value for c in out}) != len(out):
        raise w.error("choices", "two choices have the same value")
    if len({c.label for c in out}) != len(out):
        raise w.error("choices", "two choices have the same label")
    return tuple(out)


def fix_choices_field(w: Where, value: Any) -> tuple[Choice, ...]:
    """A fix gate's knob changes: 2..MAX_CHOICES ``{ label, run }``, each run a recorded one.

    Every outcome is a real recording (``data.recorded_runs.RECORDED``): a change with no
    recording cannot be offered, so no outcome is ever made up. The value is the index.
    """
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_CHOICES:
        raise w.error("choices", f"a fix gate needs 2..{MAX_CHOICES} choices")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) != {"label", "run"}:
            raise w.error("choices", f"choice {i + 1} must be {{ label = ..., run = ... }}")
        run = item["run"]
        if not isinstance(run, str) or run not in RECORDED:
            raise w.error(
                "choices",
                f"choice {i + 1}: run {str(run)[:60]!r} is not a recorded run "
                f"({', '.join(RECORDED)}); every outcome must be a real recording",
            )
        out.append(Choice(label_field(w, item["label"]), float(i), run))
    if len({c.label for c in out}) != len(out):
        raise w.error("choices", "two choices have the same label")
    return tuple(out)


def check_fix_gate(w: Where, data: Mapping, stage: str, batch: str, figure: str) -> None:
    """A fix gate: a training stage, a recorded collapsing run, its own figure, a seen step."""
    if stage != "training":
        raise w.error("stage", 'a fix gate is about a training run: stage = "training"')
    if not batch.startswith("recorded:"):
        raise w.error("batch", 'a fix gate shows a recorded collapsing run: "recorded:<run>"')
    if figure != "training":
        raise w.error("figure", 'a fix gate shows its runs\' curves: figure = "training"')
    for part in ("knob", "followup"):
        if part in data:
            raise w.error(part, "a fix gate's outcomes are recordings: it takes a seen step only")


def label_field(w: Where, value: Any) -> str:
    """One option's label."""
    if not isinstance(value, str) or not value.strip():
        raise w.error("choices", "every label must be non-empty text")
    if len(value) > MAX_LABEL_CHARS:
        raise w.error("choices", f"a label is longer than {MAX_LABEL_CHARS} characters")
    return value


def answer_field(w: Where, value: Any) -> Expression:
    """The checked answer expression."""
    try:
        return compile_expression(value, name_allowed)
    except ExprError as err:
        raise w.error("answer", str(err)) from None


def reject_unknown(w: Where, data: Mapping, allowed: set[str]) -> None:
    """Refuse a field the format does not have (a typo would otherwise be ignored)."""
    extra = sorted(set(data) - allowed)
    if extra:
        raise w.error(extra[0], f"is not a field of a gate (fields: {', '.join(sorted(allowed))})")


def inline_fields(w: Where, data: Mapping, batch: str) -> tuple[Any, Any]:
    """An inline batch's rewards and lengths (None, None for any other batch)."""
    rewards = data.get("rewards")
    lengths = data.get("lengths")
    if batch != "inline":
        for name, value in (("rewards", rewards), ("lengths", lengths)):
            if value is not None:
                raise w.error(name, f"only an inline batch lists its rewards (batch is {batch!r})")
        return None, None
    if rewards is None:
        raise w.error("rewards", "an inline batch needs its rewards, e.g. [[8.2, 6.5, 9.1]]")
    groups = nested_field(w, "rewards", rewards, 0, integer=False)
    if lengths is None:
        return groups, None
    sizes = nested_field(w, "lengths", lengths, MAX_INLINE_TOKENS, integer=True)
    if [len(g) for g in sizes] != [len(g) for g in groups]:
        raise w.error("lengths", "must have one length per reward, prompt by prompt")
    return groups, sizes


def number_fields(w: Where, data: Mapping, kind: str, base: Any = None) -> dict[str, float]:
    """A number gate's slider (low, high, step) and tolerance; the tolerance of the others."""
    out: dict[str, float] = {}
    if kind == "number":
        inherit = base is not None and base.kind == "number"
        for name, key in (("min", "low"), ("max", "high"), ("step", "step")):
            if name in data:
                out[key] = real_field(w, name, data[name])
            elif inherit:
                out[key] = float(getattr(base, key))
            else:
                raise w.error(name, "a number gate needs min, max and step")
        if not out["low"] < out["high"]:
            raise w.error("max", "must be larger than min")
        if not 0 < out["step"] <= out["high"] - out["low"]:
            raise w.error("step", "must be > 0 and at most max - min")
        fallback = base.tolerance if inherit and base is not None else out["step"] / 2
        tol = data.get("tolerance", fallback)
        out["tolerance"] = real_field(w, "tolerance", tol)
    else:
        for name in ("min", "max", "step"):
            if name in data:
                raise w.error(name, f"only a number gate has a slider (kind is {kind!r})")
        out["tolerance"] = real_field(w, "tolerance", data.get("tolerance", 1e-6))
    if out["tolerance"] < 0:
        raise w.error("tolerance", "must be >= 0")
    return out
