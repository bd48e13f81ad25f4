"""A lesson's steps and their answers: what a phone may answer, the pipeline's answer, the CSV.

The teacher's page (``lesson_page``), the loop's summary (``lesson_loop``) and the tests ask here.
A step's answer is computed on its batch: the committed preset or inline numbers (cached), the
class's live batch, or, for a follow-up the model samples (``Gate.resample``), a fresh batch drawn
in class. That follow-up's seed is drawn the first time the class reaches it (``secrets``, never
a global RNG) and kept in the room (``STORE.set_note``), so a refresh of the teacher's browser,
or another process of a lecture hall, finds the same batch; it is sampled through the app's one
door (``flow.sample_live``, cached by its settings).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from dataclasses import replace
from typing import Any

import streamlit as st

from roll_viz.analysis.lesson_answers import GateBatch, GateResult, compute_gate, rollout_batch
from roll_viz.data.lessons import (
    LESSON_DIR,
    MAX_FILE_BYTES,
    Gate,
    Lesson,
    LessonError,
    load_lesson,
    parse_lesson,
)
from roll_viz.data.presets import PRESETS
from roll_viz.ui import flow, resources
from roll_viz.ui.rooms import STORE
from roll_viz.ui.votes import AnswerSpec, csv_text

SEED_MAX = 2**31 - 1


def answer_spec(gate: Gate) -> AnswerSpec:
    """What a phone may answer to a gate: an option index, or a number on the slider."""
    if gate.kind == "number":
        return AnswerSpec(low=gate.low, high=gate.high)
    return AnswerSpec(options=len(gate.choices))


@st.cache_resource
def builtin(lesson_id: str) -> Lesson:
    """A built-in lesson (parsed once per process)."""
    return load_lesson(LESSON_DIR / f"{lesson_id}.toml")


def read_upload(data: bytes, name: str) -> Lesson:
    """A lesson from an uploaded file (size checked first). Raises LessonError."""
    if len(data) > MAX_FILE_BYTES:
        raise LessonError(f"{name}: field 'file': is {len(data)} bytes, more than {MAX_FILE_BYTES}")
    stem = name.rsplit(".", 1)[0][:40] or "lesson"
    digest = hashlib.sha256(data).hexdigest()[:10]
    return parse_lesson(data, lesson_id=f"{stem}-{digest}", source=name)


@st.cache_data(show_spinner=False, max_entries=512)
def _cached_step(lesson_key: str, index: int, _lesson: Lesson) -> GateResult:
    gate = _lesson.steps[index]
    base = None
    if gate.parent:
        parent = _lesson.step_index(gate.parent)
        base = _cached_step(lesson_key, parent, _lesson).env
    return compute_gate(gate, None, base)


def _live_batch(state: Any, gate: Gate) -> GateBatch:
    """The class's live batch for a live gate: the sidebar's live sampling with the gate's seed."""
    if state is None or not getattr(state, "live", False):
        raise LessonError(
            f"gate {gate.id!r}, field 'batch': this gate uses the class's live batch; switch the "
            "sidebar's data source to the live model first"
        )
    seeded = replace(state, sampling=replace(state.sampling, seed=gate.seed))
    rollout = flow.cached_rollout(seeded)
    batch = flow.current_batch(seeded)
    return GateBatch(batch, tuple(rollout.prompts), tuple(rollout.responses))


def step_result(
    lesson: Lesson, index: int, state: Any = None, seed: int | None = None
) -> GateResult:
    """The pipeline's answer to one step (cached; live gates recompute from the cached batch).

    Args:
        lesson: the lesson.
        index: the step.
        state: the page's AppState (live gates and sampled follow-ups sample with its model).
        seed: a sampled follow-up's seed, drawn in class (None: its committed preset).

    Raises:
        LessonError: the gate cannot be computed (one message: gate and field).
    """
    gate = lesson.steps[index]
    if gate.resample and seed is not None:
        live = fresh_batch(state, gate, seed)
    elif gate.batch != "live":
        return _cached_step(lesson.id, index, lesson)
    else:
        live = _live_batch(state, gate)
    base = None
    if gate.parent:
        parent_gate = lesson.steps[lesson.step_index(gate.parent)]
        base = compute_gate(parent_gate, live).env
    return compute_gate(gate, live, base)


def check_lesson(lesson: Lesson, state: Any = None) -> str | None:
    """The one error message of a lesson that cannot run (None when every step computes)."""
    for i, gate in enumerate(lesson.steps):
        if gate.batch == "live" and not getattr(state, "live", False):
            continue  # computed when the class reaches it, on the live batch of that moment
        try:
            step_result(lesson, i, state)
        except LessonError as err:
            return str(err)
    return None


def answer_label(gate: Gate, value: float | None) -> str:
    """A vote as the class saw it: the option's label, or the number."""
    if value is None:
        return ""
    if gate.kind == "number":
        return f"{value:g}"
    i = int(value)
    return gate.choices[i].label if 0 <= i < len(gate.choices) else str(i)


def export_csv(code: str, key: str, lesson: Lesson, state: Any = None) -> str:
    """Every answer of the room as CSV (cells neutralised against spreadsheet formulas).

    The room's anonymous record for evaluating a lesson: one row per answer (a pseudonym per
    phone, never a token or a name), the step's role in the loop and, for a follow-up the model
    sampled in class, the seed it was drawn with. Kept as long as the room (``votes``'
    ``ROOM_MAX_AGE_S`` at most), gone when the teacher ends it.
    """
    header = ["room", "lesson", "step", "gate", "role", "seed", "round", "student", "answer"]
    header += ["right", "seconds"]
    rows = []
    results: dict[int, GateResult | None] = {}
    notes = STORE.notes(code, key)
    for step, rnd, student, value, seconds in STORE.export_rows(code, key):
        gate = lesson.steps[step]
        seed = notes.get(seed_note(step))
        if step not in results:  # one pipeline answer per step, however many rows
            try:
                results[step] = step_result(lesson, step, state, seed)
            except LessonError:
                results[step] = None
        result = results[step]
        right = "" if result is None else ("yes" if result.is_right(value) else "no")
        rows.append(
            [
                code,
                lesson.id,
                step + 1,
                gate.id,
                gate.role,
                "" if seed is None else seed,
                rnd,
                student,
                answer_label(gate, value),
                right,
                seconds,
            ]
        )
    return csv_text(header, rows)


def results_in_class(lesson: Lesson, state: Any, code: str, key: str) -> dict[int, GateResult]:
    """Every step's answer that computes (a sampled follow-up on the batch drawn in class)."""
    notes = STORE.notes(code, key)
    out = {}
    for i, step in enumerate(lesson.steps):
        if step.role == "summary":
            continue
        with contextlib.suppress(LessonError):
            out[i] = step_result(lesson, i, state, notes.get(seed_note(i)))
    return out


def step_seed(code: str, key: str, lesson: Lesson, step: int) -> int | None:
    """A sampled follow-up's seed (drawn when the class reaches it); None for other steps."""
    if not lesson.steps[step].resample:
        return None
    return followup_seed(code, key, step)


def seed_note(step: int) -> str:
    """The room note that keeps a follow-up's seed."""
    return f"seed.{step}"


def followup_seed(code: str, key: str, step: int) -> int:
    """The seed of a sampled follow-up: drawn the first time the class reaches it, then kept."""
    notes = STORE.notes(code, key)
    name = seed_note(step)
    if name not in notes:
        STORE.set_note(code, key, name, secrets.randbelow(SEED_MAX))
        notes = STORE.notes(code, key)
    return notes[name]


def fresh_batch(state: Any, gate: Gate, seed: int) -> GateBatch:
    """The follow-up's batch, sampled again by the model with ``seed``.

    The gate's preset (or, for a live gate, the class's live prompts), scored by the same reward.
    """
    if gate.batch in PRESETS:
        _, sampling, spec = PRESETS[gate.batch]
    else:  # a live gate: the class's own prompts and reward
        sampling, spec = state.sampling, state.reward
    model = resources.model_spec() if state is None else state.model
    decode = "float" if state is None else state.decode
    # sample_live draws its own progress, and only when it really samples (cached by settings)
    rollout = flow.sample_live(model, replace(sampling, seed=seed), decode)
    return rollout_batch(rollout, spec)
