"""Lesson files: a sequence of prediction gates along the chain, as small TOML a teacher can edit.

A lesson asks the class to predict before the app reveals. Each gate freezes a batch, asks one
question whose distractors are known misconceptions, and names an answer *expression* that
``roll_viz.analysis.lesson_answers`` evaluates on the pipeline's output for that batch: the
revealed number is computed, never typed. Built-in lessons live in ``data/lessons/*.toml``.

Format (every field of a gate; ``[gates.knob]`` is the optional "change one knob and predict
again" step, which inherits everything it does not set; ``[gates.seen]`` and
``[gates.followup]`` are the teaching loop's "what did you see?" and "the same question on a
fresh batch, answered alone": see "The teaching loop" below)::

    title = "..."                 # the lesson (required), plus optional description, minutes
    [[gates]]
    id = "push_down"              # [a-z0-9_], unique in the lesson
    stage = "advantage"           # one of STAGES
    batch = "inline"              # a preset name (PRESETS), "live", "inline", "recorded:<run>"
                                  # or "episodes:<set>" (EPISODE_SETS: multi-turn transcripts)
    rewards = [[8.2, 6.5, 9.1]]   # inline only: one list of rewards per prompt
    lengths = [[3, 2, 4]]         # inline only, optional: tokens per answer (default 1)
    seed = 0                      # the sampling seed (a preset's or recorded run's own seed)
    settings = { estimator = "grpo", beta = 0.0, G = 4 }   # generic names or dialect keys
                                  # (an episodes batch: mask = a masks.MASK_RULES name,
                                  # credit = a credit.CREDIT_RULES name)
    question = "..."
    kind = "choice"               # choice | sign | number | fix
    choices = ["Answer 1", ...]   # choice: labels (value = index from 0) or {label, value};
                                  # fix: { label = "beta = 1", run = "hack_beta1" } (see below)
    answer = "argmin(advantage)"  # an expression (see lesson_expr and NAMES)
    explanation = "..."           # shown at the reveal
    figure = "advantages"         # one of FIGURES (default: the stage's)
    focus = 1                     # optional: the sample (from 0) the formula shows
    min = -3.0, max = 0.0, step = 0.1, tolerance = 0.15   # number gates
    [gates.knob]
    change = { beta = 0.1 }       # settings keys, or batch / rewards / lengths
    question = "...", kind = "sign", answer = "advantage[2] - base_advantage[2]", ...
    [gates.seen]                  # after the reveal: one tap, the common misreadings as choices
    question = "What did the reveal show?"
    choices = ["the right reading", "a misreading", ...]
    answer = 0                    # the index of the right reading
    [gates.followup]              # the same concept on a fresh batch, answered alone
    batch = "sample"              # "sample": the model samples the gate's preset (or the class's
                                  # live prompts) again with a seed drawn in class; or "inline"
    rewards = [[3.0, 5.5, 4.0]]   # inline only, with its own question (its numbers differ)
    question = "..."              # optional for "sample" (default: the gate's own question)
    choices = [...]               # optional: new labels for new numbers (same kind and answer)

The teaching loop (Smith et al. 2009; Miller et al. 2013): predict alone and vote (round 1),
discuss, re-vote (round 2), the reveal pointing at one number, "what did you see?" (the
``seen`` step), the teacher explains (no step advances by itself), the isomorphic follow-up on
a fresh batch answered alone (the ``followup`` step, one round), and, when any gate has a
follow-up, a last ``summary`` step with the class's accuracy per gate: first vote, after
discussion, and on the follow-up. A gate's steps are: the gate, its seen, its follow-up, its knob.

A fix gate ("fix this run", productive failure: Sinha & Kapur 2021): ``kind = "fix"``,
``stage = "training"``, a recorded collapsing run as its batch (``"recorded:hack_beta0"``),
shown with the question; each choice is a knob change with the recorded run that shows its
outcome (``{ label = ..., run = ... }``, a name of ``data.recorded_runs.RECORDED``: a change
without a recording cannot be offered, so no outcome is made up). Its ``answer`` is evaluated
on each choice's run, with the collapsing run's numbers as ``base_<name>``; a choice whose
value is not 0 fixes the run (several may; at least one must). The reveal shows the class's
top choices' runs side by side against the collapsing run, then the explanation. A fix gate
may have a ``seen`` step; no knob or follow-up (its outcomes are recordings, not a new batch).

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

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_viz.data.lesson_fields import (
    EPISODE_SETS,
    EPISODE_SETTINGS,
    EPISODES_PREFIX,
    FIGURES,
    KINDS,
    KNOB_BATCH_KEYS,
    MAX_CHOICES,
    MAX_INLINE_GROUPS,
    MAX_INLINE_SAMPLES,
    MAX_INLINE_TOKENS,
    MAX_LABEL_CHARS,
    MAX_TEXT_CHARS,
    NAMES,
    SETTING_CREDIT,
    SETTING_FRAMEWORK,
    SETTING_G,
    SETTING_MASK,
    SIGN_LABELS,
    SIGN_VALUES,
    Choice,
    Expression,
    LessonError,
    Where,
    answer_field,
    batch_field,
    check_fix_gate,
    choices_field,
    dialect_config,
    fix_choices_field,
    inline_fields,
    int_field,
    number_fields,
    reject_unknown,
    settings_field,
    text_field,
)
from roll_viz.data.lesson_parts import GATE_KEYS, PART_READERS, summary_step
from roll_viz.data.presets import PRESETS

__all__ = [
    "DEFAULT_FIGURE",
    "EPISODES_PREFIX",
    "EPISODE_SETS",
    "FIGURES",
    "KINDS",
    "KNOB_BATCH_KEYS",
    "LESSON_DIR",
    "MAX_CHOICES",
    "MAX_FILE_BYTES",
    "MAX_GATES",
    "MAX_INLINE_GROUPS",
    "MAX_INLINE_SAMPLES",
    "MAX_INLINE_TOKENS",
    "MAX_LABEL_CHARS",
    "MAX_TEXT_CHARS",
    "NAMES",
    "SETTING_CREDIT",
    "SETTING_FRAMEWORK",
    "SETTING_G",
    "SETTING_MASK",
    "SIGN_LABELS",
    "SIGN_VALUES",
    "STAGES",
    "Choice",
    "Gate",
    "Lesson",
    "LessonError",
    "builtin_lesson_ids",
    "builtin_lessons",
    "dialect_config",
    "load_lesson",
    "parse_lesson",
]

LESSON_DIR = Path(__file__).with_name("lessons")

MAX_FILE_BYTES = 64_000
MAX_GATES = 30

STAGES = (
    "reward",
    "normalisation",
    "kl",
    "advantage",
    "local_global",
    "update",
    "training",
    "episodes",
)
#: the built-in lessons in the order the page lists them (the first is the default); any other
#: file in ``data/lessons/`` follows, sorted
LESSON_ORDER = ("seed_chain", "teaching_loop", "fix_this_run")
DEFAULT_FIGURE = {
    "reward": "rewards",
    "normalisation": "rewards",
    "kl": "kl",
    "advantage": "advantages",
    "local_global": "local_global",
    "update": "update",
    "training": "training",
    "episodes": "episodes",
}
_ID = re.compile(r"^[a-z0-9_]{1,40}$")
_TOP_KEYS = {"title", "description", "minutes", "gates"}
#: the roles of a lesson's steps (``Gate.role``)
ROLES = ("gate", "seen", "followup", "knob", "summary")
#: steps a lesson walks at most (a room's bound: ``ui.votes`` reads it)
MAX_STEPS = 64


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
        parent: the gate a knob, seen or follow-up step belongs to (None for a gate).
        change: what the knob changed, as (key, value) pairs.
        role: "gate", "seen" (what did you see?), "followup" (the same question on a fresh
            batch), "knob" or "summary" (the class's accuracy, no vote) (ROLES).
        resample: a follow-up whose batch the model samples in class with a new seed.
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
    role: str = "gate"
    resample: bool = False

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
        text: the TOML text it was read from (a lecture hall's rooms carry it between processes).
    """

    id: str
    title: str
    description: str
    minutes: int
    gates: tuple[Gate, ...]
    steps: tuple[Gate, ...] = field(default=())
    text: str = field(default="", repr=False)

    def step_index(self, gate_id: str) -> int:
        """Position of a gate (or knob) in ``steps``.

        Raises:
            KeyError: no such gate.
        """
        for i, gate in enumerate(self.steps):
            if gate.id == gate_id:
                return i
        raise KeyError(gate_id)


def _gate(w: Where, data: Any, index: int, seen: set[str]) -> Gate:
    if not isinstance(data, Mapping):
        raise w.error("gates", f"gate {index + 1} must be a table ([[gates]])")
    gate_id = data.get("id")
    if not isinstance(gate_id, str) or not _ID.match(gate_id):
        raise Where(w.source, f"#{index + 1}").error("id", "must be 1..40 of a-z, 0-9, _")
    if gate_id in seen:
        raise Where(w.source, f"#{index + 1}").error("id", f"{gate_id!r} is used twice")
    seen.add(gate_id)
    w = Where(w.source, gate_id)
    reject_unknown(w, data, GATE_KEYS)
    stage = data.get("stage")
    if stage not in STAGES:
        raise w.error("stage", f"must be one of {', '.join(STAGES)}")
    batch = batch_field(w, data.get("batch"))
    rewards, lengths = inline_fields(w, data, batch)
    seed = int_field(w, "seed", data.get("seed", 0), 0, 2**31 - 1)
    if batch in PRESETS and seed != PRESETS[batch][1].seed:
        raise w.error("seed", f"preset {batch!r} is frozen with seed {PRESETS[batch][1].seed}")
    settings = settings_field(w, data.get("settings"))
    episodes = batch.startswith(EPISODES_PREFIX)
    if episodes != (stage == "episodes"):
        raise w.error("stage", "an episodes batch goes with stage 'episodes', and only it")
    if not episodes and any(k in EPISODE_SETTINGS for k, _ in settings):
        raise w.error("settings", "mask and credit are settings of an episodes batch")
    if settings and batch.startswith("recorded:"):
        raise w.error("settings", "a recorded run answers from its metrics: it takes no settings")
    kind = data.get("kind")
    if kind not in KINDS:
        raise w.error("kind", f"must be one of {', '.join(KINDS)}")
    figure = data.get("figure", DEFAULT_FIGURE[stage])
    if figure not in FIGURES:
        raise w.error("figure", f"must be one of {', '.join(FIGURES)}")
    focus = data.get("focus")
    if kind == "fix":
        check_fix_gate(w, data, stage, batch, figure)
    gate = Gate(
        id=gate_id,
        stage=stage,
        batch=batch,
        rewards=rewards,
        lengths=lengths,
        seed=seed,
        settings=settings,
        question=text_field(w, data, "question", MAX_TEXT_CHARS),
        kind=kind,
        choices=fix_choices_field(w, data.get("choices"))
        if kind == "fix"
        else choices_field(w, kind, data.get("choices")),
        answer=answer_field(w, data.get("answer")),
        explanation=text_field(w, data, "explanation", MAX_TEXT_CHARS, required=False),
        figure=figure,
        focus=None if focus is None else int_field(w, "focus", focus, 0, 10_000),
        **number_fields(w, data, kind, None),
    )
    for part, reader in PART_READERS.items():
        if part in data:
            reader(Where(w.source, f"{gate_id}.{part}"), data[part], gate)  # checked here once
    return gate


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
    top = Where(src)
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
    title = text_field(top, data, "title", MAX_LABEL_CHARS)
    description = text_field(top, data, "description", MAX_TEXT_CHARS, required=False)
    minutes = int_field(top, "minutes", data.get("minutes", 20), 1, 600)
    gates_raw = data.get("gates")
    if not isinstance(gates_raw, list) or not 1 <= len(gates_raw) <= MAX_GATES:
        raise top.error("gates", f"a lesson needs 1..{MAX_GATES} [[gates]]")
    seen: set[str] = set()
    gates = tuple(_gate(top, g, i, seen) for i, g in enumerate(gates_raw))
    steps: list[Gate] = []
    for gate, g_raw in zip(gates, gates_raw, strict=True):
        steps.append(gate)
        for part, reader in PART_READERS.items():  # a gate's steps: seen, followup, knob
            if part in g_raw:
                steps.append(reader(Where(src, f"{gate.id}.{part}"), g_raw[part], gate))
    if any(s.role == "followup" for s in steps):
        steps.append(summary_step(gates))
    if len(steps) > MAX_STEPS:
        raise top.error("gates", f"walks {len(steps)} steps, more than {MAX_STEPS}")
    return Lesson(
        id=lesson_id,
        title=title,
        description=description,
        minutes=minutes,
        gates=gates,
        steps=tuple(steps),
        text=raw.decode("utf-8"),
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
    """The lessons shipped in ``data/lessons/``, by id (file stem), in ``builtin_lesson_ids``."""
    return {i: load_lesson(LESSON_DIR / f"{i}.toml") for i in builtin_lesson_ids()}


def builtin_lesson_ids() -> tuple[str, ...]:
    """The ids of the shipped lessons (no parsing): LESSON_ORDER first, then the rest sorted."""
    stems = sorted(p.stem for p in LESSON_DIR.glob("*.toml"))
    rank = {lesson_id: i for i, lesson_id in enumerate(LESSON_ORDER)}
    return tuple(sorted(stems, key=lambda s: (rank.get(s, len(rank)), s)))
