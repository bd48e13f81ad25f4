"""A gate's own steps in a lesson file: its knob, "what did you see?", its follow-up, the summary.

Each reader takes the gate it belongs to and the table under it (``[gates.knob]``,
``[gates.seen]``, ``[gates.followup]``) and returns the step as a ``Gate`` with its ``role``;
``PART_READERS`` gives them in the order a gate's steps are walked. The fields, bounds and the
teaching loop they serve are described in ``lessons``' docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from roll_viz.data.lesson_fields import (
    FIGURES,
    KINDS,
    KNOB_BATCH_KEYS,
    MAX_TEXT_CHARS,
    Choice,
    Where,
    answer_field,
    batch_field,
    choices_field,
    inline_fields,
    int_field,
    number_fields,
    reject_unknown,
    settings_field,
    text_field,
)
from roll_viz.data.presets import PRESETS

#: a ``lessons.Gate`` (the record lives in ``lessons``, which reads its steps through this module;
#: named here by its role to keep the import one way)
Gate = Any

#: the fields of a ``[[gates]]`` table (``lessons`` checks a gate against them)
GATE_KEYS = frozenset(
    (
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
        "seen",
        "followup",
    )
)
#: what a knob may set: a gate's question fields and ``change`` (never id, stage, settings, seed)
KNOB_KEYS = (GATE_KEYS - {"id", "stage", "knob", "seen", "followup", "settings", "seed"}) | {
    "change"
}
SEEN_KEYS = frozenset(("question", "choices", "answer", "explanation"))
FOLLOWUP_KEYS = frozenset(("batch", "rewards", "lengths", "question", "choices", "explanation"))

#: a follow-up drawn in class: "sample" (the model samples again, a new seed) or "inline"
FOLLOWUP_BATCHES = ("sample", "inline")


def seen_step(w: Where, data: Any, parent: Gate) -> Gate:
    """The "what did you see?" step: one tap after the reveal, on the gate's own batch."""
    if not isinstance(data, Mapping):
        raise w.error("seen", "must be a table ([gates.seen])")
    reject_unknown(w, data, set(SEEN_KEYS))
    answer = data.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise w.error("answer", "must be the index of the right reading (from 0)")
    choices = choices_field(w, "choice", data.get("choices"))
    if not 0 <= answer < len(choices):
        raise w.error("answer", f"must be 0..{len(choices) - 1} (an index of choices)")
    return replace(
        parent,
        id=f"{parent.id}.seen",
        question=text_field(w, data, "question", MAX_TEXT_CHARS),
        kind="choice",
        choices=tuple(Choice(c.label, float(i)) for i, c in enumerate(choices)),
        answer=answer_field(w, str(answer)),
        # step 7, the teacher explains: the gate's explanation unless the seen step has its own
        explanation=text_field(w, data, "explanation", MAX_TEXT_CHARS, required=False)
        or parent.explanation,
        figure="none",
        focus=None,
        parent=parent.id,
        role="seen",
    )


def followup_step(w: Where, data: Any, parent: Gate) -> Gate:
    """The isomorphic follow-up: the gate's question on a fresh batch, answered alone."""
    if not isinstance(data, Mapping):
        raise w.error("followup", "must be a table ([gates.followup])")
    reject_unknown(w, data, set(FOLLOWUP_KEYS))
    how = data.get("batch", "sample")
    if how not in FOLLOWUP_BATCHES:
        raise w.error("batch", f"must be one of {', '.join(FOLLOWUP_BATCHES)}")
    if how == "sample" and parent.batch not in PRESETS and parent.batch != "live":
        raise w.error(
            "batch",
            "a sampled follow-up needs a gate the model samples (a preset or live batch); give "
            "this one an inline batch and its own question",
        )
    rewards, lengths = inline_fields(w, data, "inline" if how == "inline" else parent.batch)
    if how == "inline" and "question" not in data:
        raise w.error("question", "an inline follow-up has its own numbers, so its own question")
    question = data.get("question", parent.question)
    choices = parent.choices
    if "choices" in data:  # new numbers may need new labels (same kind, same answer rule)
        choices = choices_field(w, parent.kind, data["choices"])
    return replace(
        parent,
        id=f"{parent.id}.followup",
        choices=choices,
        batch="inline" if how == "inline" else parent.batch,
        rewards=rewards if how == "inline" else parent.rewards,
        lengths=lengths if how == "inline" else parent.lengths,
        question=text_field(w, {"question": question}, "question", MAX_TEXT_CHARS),
        explanation=text_field(w, data, "explanation", MAX_TEXT_CHARS, required=False)
        or parent.explanation,
        parent=parent.id,
        role="followup",
        resample=how == "sample",
    )


def summary_step(gates: tuple[Gate, ...]) -> Gate:
    """The lesson's last step when a gate has a follow-up: the class's accuracy, no vote."""
    first = gates[0]
    return replace(
        first,
        id="summary",
        question="What the class learned: each question's first vote, after discussion, and "
        "the follow-up answered alone",
        kind="choice",
        choices=(Choice("-", 0.0),),
        answer=answer_field(Where("summary"), "0"),
        explanation="",
        figure="none",
        focus=None,
        parent=None,
        role="summary",
    )


def knob_step(w: Where, data: Any, parent: Gate) -> Gate:
    """The follow-up: the parent gate with ``change`` applied and its own question."""
    if not isinstance(data, Mapping):
        raise w.error("knob", "must be a table ([gates.knob])")
    reject_unknown(w, data, KNOB_KEYS)
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
    batch = batch_field(w, batch_fields.get("batch", parent.batch))
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
    rewards, lengths = inline_fields(w, inline_src, batch)
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
        parsed_choices = choices_field(w, kind, choices)
    numbers = number_fields(w, data, kind, parent)
    focus = data.get("focus", parent.focus)
    return replace(
        parent,
        id=f"{parent.id}.knob",
        batch=batch,
        rewards=rewards,
        lengths=lengths,
        seed=seed,
        settings=settings_field(w, settings, "change"),
        question=text_field(w, data, "question", MAX_TEXT_CHARS),
        kind=kind,
        choices=parsed_choices,
        answer=answer_field(w, data.get("answer")),
        explanation=text_field(w, data, "explanation", MAX_TEXT_CHARS, required=False),
        figure=figure,
        focus=None if focus is None else int_field(w, "focus", focus, 0, 10_000),
        parent=parent.id,
        change=tuple(change.items()),
        role="knob",
        **numbers,
    )


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


#: a gate's steps after it, in the order the room walks them
PART_READERS = {"seen": seen_step, "followup": followup_step, "knob": knob_step}
