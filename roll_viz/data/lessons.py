"""Lesson files: a sequence of prediction gates along the chain, as small TOML a teacher can edit.

A lesson asks the class to predict before the app reveals. Each gate freezes a batch, asks one
question whose distractors are known misconceptions, and names an answer *expression* that
``roll_viz.analysis.lessons`` evaluates on the pipeline's output for that batch: the revealed
number is computed, never typed. Built-in lessons live in ``data/lessons/*.toml``.

Format (every field of a gate; ``[gates.knob]`` is the optional "change one knob and predict
again" follow-up, which inherits everything it does not set)::

    title = "..."                 # the lesson (required), plus optional description, minutes
    [[gates]]
    id = "push_down"              # [a-z0-9_], unique in the lesson
    stage = "advantage"           # one of STAGES
    batch = "inline"              # a preset name (PRESETS), "live", "inline" or "recorded:<run>"
    rewards = [[8.2, 6.5, 9.1]]   # inline only: one list of rewards per prompt
    lengths = [[3, 2, 4]]         # inline only, optional: tokens per answer (default 1)
    seed = 0                      # the sampling seed (a preset's or recorded run's own seed)
    settings = { estimator = "grpo", beta = 0.0, G = 4 }   # generic names or dialect keys
    question = "..."
    kind = "choice"               # choice | sign | number
    choices = ["Answer 1", ...]   # choice: labels (value = index from 0) or {label, value}
    answer = "argmin(advantage)"  # an expression (see lesson_expr and NAMES)
    explanation = "..."           # shown at the reveal
    figure = "advantages"         # one of FIGURES (default: the stage's)
    focus = 1                     # optional: the sample (from 0) the formula shows
    min = -3.0, max = 0.0, step = 0.1, tolerance = 0.15   # number gates
    [gates.knob]
    change = { beta = 0.1 }       # settings keys, or batch / rewards / lengths
    question = "...", kind = "sign", answer = "advantage[2] - base_advantage[2]", ...

Rules: a choice answer picks the choice whose value is nearest the expression's value; a sign
answer is +1 / 0 / -1 (``|value| <= tolerance`` counts as 0); a number answer is right within
``tolerance``. Indexes in expressions count from 0 (answer 1 is ``advantage[0]``).

Bounds (a lesson file is untrusted input): ``MAX_FILE_BYTES`` bytes, ``MAX_GATES`` gates (each
with at most one knob), ``MAX_CHOICES`` choices, ``MAX_TEXT_CHARS`` characters per text field,
``MAX_LABEL_CHARS`` per choice label, inline batches up to ``MAX_INLINE_GROUPS`` prompts x
``MAX_INLINE_SAMPLES`` answers x ``MAX_INLINE_TOKENS`` tokens, and the expression bounds of
``lesson_expr``. Text fields are plain text: the pages show them literally (no Markdown, HTML
or script). A bad file raises ``LessonError`` with one message naming the gate and the field.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roll_viz.core.pipeline import ALIASES, FRAMEWORKS, resolve_config
from roll_viz.data.lesson_expr import (
    BASE_PREFIX,
    ExprError,
    Expression,
    compile_expression,
)
from roll_viz.data.presets import PRESETS
from roll_viz.data.recorded_runs import RECORDED

LESSON_DIR = Path(__file__).with_name("lessons")

MAX_FILE_BYTES = 64_000
MAX_GATES = 30
MAX_CHOICES = 6
MAX_TEXT_CHARS = 1500
MAX_LABEL_CHARS = 200
MAX_INLINE_GROUPS = 8
MAX_INLINE_SAMPLES = 16
MAX_INLINE_TOKENS = 64
MAX_ABS_NUMBER = 1e9

STAGES = ("reward", "normalisation", "kl", "advantage", "local_global", "update", "training")
KINDS = ("choice", "sign", "number")
FIGURES = ("rewards", "advantages", "kl", "local_global", "update", "training", "none")
DEFAULT_FIGURE = {
    "reward": "rewards",
    "normalisation": "rewards",
    "kl": "kl",
    "advantage": "advantages",
    "local_global": "local_global",
    "update": "update",
    "training": "training",
}
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
    "steps": "recorded run: number of steps",
    "run_reward": "recorded run: (steps,) mean reward per step",
    "run_kl": "recorded run: (steps,) exact KL(policy || reference) per step",
    "run_entropy": "recorded run: (steps,) mean token entropy per step",
    "run_length": "recorded run: (steps,) mean answer length per step",
    "run_loss": "recorded run: (steps,) loss per step",
    "run_grad_norm": "recorded run: (steps,) gradient norm per step",
}

#: settings keys that are not dialect keys
SETTING_FRAMEWORK = "framework"
SETTING_G = "G"
#: what a knob may change besides the settings
KNOB_BATCH_KEYS = ("batch", "rewards", "lengths")

_ID = re.compile(r"^[a-z0-9_]{1,40}$")
_TOP_KEYS = {"title", "description", "minutes", "gates"}
_GATE_KEYS = {
    "id",
    "stage",
    "batch",
    "rewards",
    "lengths",
    "seed",
    "settings",
    "question",
    "kind",
    "choices",
    "answer",
    "explanation",
    "figure",
    "focus",
    "min",
    "max",
    "step",
    "tolerance",
    "knob",
}
_KNOB_KEYS = (_GATE_KEYS - {"id", "stage", "knob", "settings", "seed"}) | {"change"}


class LessonError(ValueError):
    """A lesson file that cannot be used; the one message names the gate and the field."""


def _name_allowed(name: str) -> bool:
    return name in NAMES or (name.startswith(BASE_PREFIX) and name[len(BASE_PREFIX) :] in NAMES)


@dataclass(frozen=True)
class Choice:
    """One option of a gate: what the class sees and the value the answer is matched to."""

    label: str
    value: float


@dataclass(frozen=True)
class Gate:
    """One prediction gate (or a knob follow-up: ``parent`` is the gate it follows).

    Attributes:
        id: unique id in the lesson (a knob's is ``<parent>.knob``).
        stage: where in the chain (STAGES).
        batch: a preset name, "live", "inline" or "recorded:<run>".
        rewards: inline batch: per prompt, the rewards of its answers.
        lengths: inline batch: per prompt, the tokens of each answer (None = 1 each).
        seed: the sampling seed of the batch.
        settings: (key, value) pairs: "framework", "G", generic names or dialect keys.
        question: the question (plain text).
        kind: "choice", "sign" or "number".
        choices: the options (choice and sign gates; empty for number).
        answer: the checked answer expression.
        explanation: shown at the reveal (plain text).
        figure: the one figure of the reveal (FIGURES).
        focus: the sample the formula shows (None = the answer's own choice).
        low, high, step, tolerance: a number gate's slider and how close counts as right (for
            a sign gate, ``tolerance`` is the band read as zero).
        parent: the gate a knob follows (None for a gate).
        change: what the knob changed, as (key, value) pairs.
    """

    id: str
    stage: str
    batch: str
    rewards: tuple[tuple[float, ...], ...] | None
    lengths: tuple[tuple[int, ...], ...] | None
    seed: int
    settings: tuple[tuple[str, Any], ...]
    question: str
    kind: str
    choices: tuple[Choice, ...]
    answer: Expression
    explanation: str
    figure: str
    focus: int | None = None
    low: float = 0.0
    high: float = 1.0
    step: float = 0.1
    tolerance: float = 0.0
    parent: str | None = None
    change: tuple[tuple[str, Any], ...] = ()

    @property
    def framework(self) -> str:
        """The dialect the gate runs (settings ``framework``, default roll)."""
        return str(dict(self.settings).get(SETTING_FRAMEWORK, "roll"))

    @property
    def labels(self) -> tuple[str, ...]:
        """The option labels a phone shows (empty for a number gate)."""
        return tuple(c.label for c in self.choices)


@dataclass(frozen=True)
class Lesson:
    """A lesson: its gates in order, each followed by its knob when it has one.

    Attributes:
        id: the file stem.
        title: shown on the projector.
        description: one or two sentences.
        minutes: planned class time.
        gates: the top-level gates.
        steps: what the room walks through: every gate, then its knob.
    """

    id: str
    title: str
    description: str
    minutes: int
    gates: tuple[Gate, ...]
    steps: tuple[Gate, ...] = field(default=())

    def step_index(self, gate_id: str) -> int:
        """Position of a gate (or knob) in ``steps``.

        Raises:
            KeyError: no such gate.
        """
        for i, gate in enumerate(self.steps):
            if gate.id == gate_id:
                return i
        raise KeyError(gate_id)


# ---------------------------------------------------------------------------------------------
# Field readers: each raises LessonError naming gate and field
# ---------------------------------------------------------------------------------------------


class _Where:
    """Builds the one message of a bad file: source, gate and field."""

    def __init__(self, source: str, gate: str | None = None) -> None:
        self.source = source
        self.gate = gate

    def error(self, name: str, problem: str) -> LessonError:
        where = f"gate {self.gate!r}, " if self.gate else ""
        return LessonError(f"{self.source}: {where}field {name!r}: {problem}")


def _text(w: _Where, data: Mapping, name: str, limit: int, required: bool = True) -> str:
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


def _real(w: _Where, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise w.error(name, f"must be a number, got {value!r}"[:200])
    if not math.isfinite(value) or abs(value) > MAX_ABS_NUMBER:
        raise w.error(name, f"must be a finite number within +-{MAX_ABS_NUMBER:g}")
    return float(value)


def _int(w: _Where, name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise w.error(name, f"must be a whole number {low}..{high}, got {value!r}"[:200])
    return int(value)


def _nested(
    w: _Where, name: str, value: Any, item_max: int, integer: bool
) -> tuple[tuple[Any, ...], ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_INLINE_GROUPS:
        raise w.error(name, f"must be a list of 1..{MAX_INLINE_GROUPS} lists (one per prompt)")
    out = []
    for g, group in enumerate(value):
        if not isinstance(group, list) or not 1 <= len(group) <= MAX_INLINE_SAMPLES:
            raise w.error(name, f"prompt {g + 1}: must list 1..{MAX_INLINE_SAMPLES} answers")
        if integer:
            out.append(tuple(_int(w, name, v, 1, item_max) for v in group))
        else:
            out.append(tuple(_real(w, name, v) for v in group))
    return tuple(out)


def _batch(w: _Where, value: Any) -> str:
    if not isinstance(value, str):
        raise w.error("batch", "must be text")
    if value in ("live", "inline") or value in PRESETS:
        return value
    if value.startswith("recorded:") and value.removeprefix("recorded:") in RECORDED:
        return value
    known = ", ".join([*sorted(PRESETS), "live", "inline", *(f"recorded:{n}" for n in RECORDED)])
    raise w.error("batch", f"{value[:60]!r} is not one of {known}")


def _settings(w: _Where, value: Any, label: str = "settings") -> tuple[tuple[str, Any], ...]:
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
            out.append((key, _int(w, f"{label}.G", item, 1, 64)))
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
        if key in (SETTING_FRAMEWORK, SETTING_G):
            continue
        out[ALIASES[framework].get(key) or key] = value
    return out


def _choices(w: _Where, kind: str, value: Any) -> tuple[Choice, ...]:
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
        labels = [_label(w, v) for v in value]
        return tuple(Choice(lab, v) for lab, v in zip(labels, SIGN_VALUES, strict=True))
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_CHOICES:
        raise w.error("choices", f"a choice gate needs 2..{MAX_CHOICES} choices")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(Choice(_label(w, item), float(i)))
        elif isinstance(item, Mapping):
            extra = set(item) - {"label", "value"}
            if extra or "label" not in item or "value" not in item:
                raise w.error("choices", f"choice {i + 1} must be {{ label = ..., value = ... }}")
            out.append(Choice(_label(w, item["label"]), _real(w, "choices", item["value"])))
        else:
            raise w.error("choices", f"choice {i + 1} must be a label or a {{label, value}} table")
    if len({c.value for c in out}) != len(out):
        raise w.error("choices", "two choices have the same value")
    if len({c.label for c in out}) != len(out):
        raise w.error("choices", "two choices have the same label")
    return tuple(out)


def _label(w: _Where, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise w.error("choices", "every label must be non-empty text")
    if len(value) > MAX_LABEL_CHARS:
        raise w.error("choices", f"a label is longer than {MAX_LABEL_CHARS} characters")
    return value


def _expression(w: _Where, value: Any) -> Expression:
    try:
        return compile_expression(value, _name_allowed)
    except ExprError as err:
        raise w.error("answer", str(err)) from None


def _unknown(w: _Where, data: Mapping, allowed: set[str]) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise w.error(extra[0], f"is not a field of a gate (fields: {', '.join(sorted(allowed))})")


def _inline(w: _Where, data: Mapping, batch: str) -> tuple[Any, Any]:
    rewards = data.get("rewards")
    lengths = data.get("lengths")
    if batch != "inline":
        for name, value in (("rewards", rewards), ("lengths", lengths)):
            if value is not None:
                raise w.error(name, f"only an inline batch lists its rewards (batch is {batch!r})")
        return None, None
    if rewards is None:
        raise w.error("rewards", "an inline batch needs its rewards, e.g. [[8.2, 6.5, 9.1]]")
    groups = _nested(w, "rewards", rewards, 0, integer=False)
    if lengths is None:
        return groups, None
    sizes = _nested(w, "lengths", lengths, MAX_INLINE_TOKENS, integer=True)
    if [len(g) for g in sizes] != [len(g) for g in groups]:
        raise w.error("lengths", "must have one length per reward, prompt by prompt")
    return groups, sizes


def _number_fields(w: _Where, data: Mapping, kind: str, base: Gate | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if kind == "number":
        inherit = base is not None and base.kind == "number"
        for name, key in (("min", "low"), ("max", "high"), ("step", "step")):
            if name in data:
                out[key] = _real(w, name, data[name])
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
        out["tolerance"] = _real(w, "tolerance", tol)
    else:
        for name in ("min", "max", "step"):
            if name in data:
                raise w.error(name, f"only a number gate has a slider (kind is {kind!r})")
        out["tolerance"] = _real(w, "tolerance", data.get("tolerance", 1e-6))
    if out["tolerance"] < 0:
        raise w.error("tolerance", "must be >= 0")
    return out


def _gate(w: _Where, data: Any, index: int, seen: set[str]) -> Gate:
    if not isinstance(data, Mapping):
        raise w.error("gates", f"gate {index + 1} must be a table ([[gates]])")
    gate_id = data.get("id")
    if not isinstance(gate_id, str) or not _ID.match(gate_id):
        raise _Where(w.source, f"#{index + 1}").error("id", "must be 1..40 of a-z, 0-9, _")
    if gate_id in seen:
        raise _Where(w.source, f"#{index + 1}").error("id", f"{gate_id!r} is used twice")
    seen.add(gate_id)
    w = _Where(w.source, gate_id)
    _unknown(w, data, _GATE_KEYS)
    stage = data.get("stage")
    if stage not in STAGES:
        raise w.error("stage", f"must be one of {', '.join(STAGES)}")
    batch = _batch(w, data.get("batch"))
    rewards, lengths = _inline(w, data, batch)
    seed = _int(w, "seed", data.get("seed", 0), 0, 2**31 - 1)
    if batch in PRESETS and seed != PRESETS[batch][1].seed:
        raise w.error("seed", f"preset {batch!r} is frozen with seed {PRESETS[batch][1].seed}")
    settings = _settings(w, data.get("settings"))
    kind = data.get("kind")
    if kind not in KINDS:
        raise w.error("kind", f"must be one of {', '.join(KINDS)}")
    figure = data.get("figure", DEFAULT_FIGURE[stage])
    if figure not in FIGURES:
        raise w.error("figure", f"must be one of {', '.join(FIGURES)}")
    focus = data.get("focus")
    gate = Gate(
        id=gate_id,
        stage=stage,
        batch=batch,
        rewards=rewards,
        lengths=lengths,
        seed=seed,
        settings=settings,
        question=_text(w, data, "question", MAX_TEXT_CHARS),
        kind=kind,
        choices=_choices(w, kind, data.get("choices")),
        answer=_expression(w, data.get("answer")),
        explanation=_text(w, data, "explanation", MAX_TEXT_CHARS, required=False),
        figure=figure,
        focus=None if focus is None else _int(w, "focus", focus, 0, 10_000),
        **_number_fields(w, data, kind, None),
    )
    if "knob" in data:
        _knob(_Where(w.source, f"{gate_id}.knob"), data["knob"], gate)  # checked here once
    return gate


def _knob(w: _Where, data: Any, parent: Gate) -> Gate:
    """The follow-up: the parent gate with ``change`` applied and its own question."""
    if not isinstance(data, Mapping):
        raise w.error("knob", "must be a table ([gates.knob])")
    _unknown(w, data, _KNOB_KEYS)
    change = data.get("change")
    if not isinstance(change, Mapping) or not change:
        raise w.error("change", "must be a table of what to change, e.g. { beta = 0.1 }")
    settings = dict(parent.settings)
    batch_fields: dict[str, Any] = {}
    for key, value in change.items():
        if key in KNOB_BATCH_KEYS:
            batch_fields[key] = value
        else:
            settings[key] = value
    batch = _batch(w, batch_fields.get("batch", parent.batch))
    inline_src: dict[str, Any] = {}
    if batch == "inline":
        inline_src = {
            "rewards": batch_fields.get(
                "rewards", None if parent.rewards is None else [list(g) for g in parent.rewards]
            ),
            "lengths": batch_fields.get(
                "lengths", None if parent.lengths is None else [list(g) for g in parent.lengths]
            ),
        }
    else:
        inline_src = {k: batch_fields[k] for k in ("rewards", "lengths") if k in batch_fields}
    rewards, lengths = _inline(w, inline_src, batch)
    seed = parent.seed
    if batch in PRESETS:
        seed = PRESETS[batch][1].seed
    kind = data.get("kind", parent.kind)
    if kind not in KINDS:
        raise w.error("kind", f"must be one of {', '.join(KINDS)}")
    figure = data.get("figure", parent.figure)
    if figure not in FIGURES:
        raise w.error("figure", f"must be one of {', '.join(FIGURES)}")
    choices = data.get("choices")
    if choices is None and kind == parent.kind and kind != "number":
        parsed_choices = parent.choices
    else:
        parsed_choices = _choices(w, kind, choices)
    numbers = _number_fields(w, data, kind, parent)
    focus = data.get("focus", parent.focus)
    return replace(
        parent,
        id=f"{parent.id}.knob",
        batch=batch,
        rewards=rewards,
        lengths=lengths,
        seed=seed,
        settings=_settings(w, settings, "change"),
        question=_text(w, data, "question", MAX_TEXT_CHARS),
        kind=kind,
        choices=parsed_choices,
        answer=_expression(w, data.get("answer")),
        explanation=_text(w, data, "explanation", MAX_TEXT_CHARS, required=False),
        figure=figure,
        focus=None if focus is None else _int(w, "focus", focus, 0, 10_000),
        parent=parent.id,
        change=tuple(change.items()),
        **numbers,
    )


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def parse_lesson(text: str | bytes, lesson_id: str = "lesson", source: str | None = None) -> Lesson:
    """Read a lesson from TOML text. Nothing in it is executed.

    Args:
        text: the file's content (at most MAX_FILE_BYTES bytes).
        lesson_id: the lesson's id (the file stem).
        source: the name used in messages (default: ``<lesson_id>.toml``).

    Returns:
        The Lesson, every gate and knob checked.

    Raises:
        LessonError: one message naming the gate and the field (or the file for a TOML error).
    """
    src = source or f"{lesson_id}.toml"
    top = _Where(src)
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if len(raw) > MAX_FILE_BYTES:
        raise top.error("file", f"is {len(raw)} bytes, more than {MAX_FILE_BYTES}")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise top.error("file", "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise top.error("file", f"is not valid TOML: {err}") from None
    extra = sorted(set(data) - _TOP_KEYS)
    if extra:
        raise top.error(extra[0], f"is not a lesson field ({', '.join(sorted(_TOP_KEYS))})")
    title = _text(top, data, "title", MAX_LABEL_CHARS)
    description = _text(top, data, "description", MAX_TEXT_CHARS, required=False)
    minutes = _int(top, "minutes", data.get("minutes", 20), 1, 600)
    gates_raw = data.get("gates")
    if not isinstance(gates_raw, list) or not 1 <= len(gates_raw) <= MAX_GATES:
        raise top.error("gates", f"a lesson needs 1..{MAX_GATES} [[gates]]")
    seen: set[str] = set()
    gates = tuple(_gate(top, g, i, seen) for i, g in enumerate(gates_raw))
    steps: list[Gate] = []
    for gate, g_raw in zip(gates, gates_raw, strict=True):
        steps.append(gate)
        if "knob" in g_raw:
            steps.append(_knob(_Where(src, f"{gate.id}.knob"), g_raw["knob"], gate))
    return Lesson(
        id=lesson_id,
        title=title,
        description=description,
        minutes=minutes,
        gates=gates,
        steps=tuple(steps),
    )


def load_lesson(path: str | Path) -> Lesson:
    """Read a lesson file (its size is checked before it is read).

    Raises:
        LessonError: the file is missing, too large, or bad (one message: gate and field).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise LessonError(f"{path.name}: cannot be read ({err.strerror})") from None
    if size > MAX_FILE_BYTES:
        raise LessonError(f"{path.name}: field 'file': is {size} bytes, more than {MAX_FILE_BYTES}")
    with path.open("rb") as fh:
        raw = fh.read(MAX_FILE_BYTES + 1)
    return parse_lesson(raw, lesson_id=path.stem, source=path.name)


def builtin_lessons() -> dict[str, Lesson]:
    """The lessons shipped in ``data/lessons/``, by id (file stem), sorted."""
    return {p.stem: load_lesson(p) for p in sorted(LESSON_DIR.glob("*.toml"))}


def builtin_lesson_ids() -> tuple[str, ...]:
    """The ids of the shipped lessons (no parsing)."""
    return tuple(p.stem for p in sorted(LESSON_DIR.glob("*.toml")))
