"""Glue of the Teacher-as-reference page: the teacher's choice, its scores, recorded or live.

The teacher is the same model with a privileged instruction (``{answer}`` becomes an arithmetic
prompt's answer) or another model from the allow-list (``resources.model_choices``) with the
same vocabulary. On a preset batch with the preset's own instruction the page reads the committed
recording (``lm.teacher.recorded_teacher``): instant, no model. Anything else is scored on
request ("Score under the teacher"), on the model that wrote the batch; the scores are kept in
``st.session_state`` next to the key of the batch and teacher they belong to, so they are never
drawn over another batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from roll_viz.core.pipeline.opd import KL_PENALTIES
from roll_viz.core.records import Rollout
from roll_viz.lm import rollout as rollout_door
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.resources import cached_models, model_choices
from roll_viz.ui.state import AppState
from roll_viz.ui.update_page import batch_key, model_problem

KEY_KIND = "opd_kind"
KEY_INSTRUCTION = "opd_instruction"
KEY_MODEL = "opd_model"
KEY_PENALTY = "opd_penalty"
KEY_COEF = "opd_coef"
KEY_MIXED = "opd_mixed"
KEY_SCORE = "opd_score"
KEY_STORED = "_opd_scores"

SAME = "same"
OTHER = "other"
KINDS = {SAME: "Same model", OTHER: "Another model"}
MAX_INSTRUCTION = 300
DEFAULT_TEMPLATE = "The correct answer is {answer}. Reply with just the number."
COEFS = (0.1, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class TeacherChoice:
    """What the page's controls decided (hashable: part of the stored scores' key).

    Attributes:
        kind: SAME or OTHER.
        template: the instruction template ("" = the plain prompt).
        model: the teacher model's spec (OTHER) or "" (SAME).
        kl_penalty: ROLL's estimator name.
        coef: ROLL ``opd_kl_coef``.
        mixed: ROLL ``use_opd`` (reward advantages minus the KL) instead of pure OPD.
    """

    kind: str
    template: str
    model: str
    kl_penalty: str
    coef: float
    mixed: bool

    @property
    def scoring_key(self) -> tuple:
        """What the teacher's log-probs depend on (not the estimator, coefficient or mode)."""
        return (self.kind, self.template, self.model)


def preset_template(state: AppState) -> str:
    """The instruction recorded for the current preset (the default of the field)."""
    return rollout_door.PRESET_TEMPLATES.get(state.preset, DEFAULT_TEMPLATE)


def controls(state: AppState, rollout: Rollout) -> TeacherChoice:
    """The teacher, its instruction, ROLL's estimator, coefficient and mode (one row each).

    An instruction longer than ``MAX_INSTRUCTION`` characters gets a message under the field
    and is cut to that length.
    """
    c1, c2 = st.columns([1, 2])
    with c1:
        kind = st.segmented_control(
            "Teacher",
            list(KINDS),
            default=SAME,
            format_func=KINDS.__getitem__,
            key=KEY_KIND,
            required=True,
            help="Same model: the student's own weights with the instruction below in the "
            "context (SDPO). Another model: an allow-listed model with the same tokenizer.",
        )
        model = ""
        if kind == OTHER:
            spec = rollout.meta.model_spec
            student = str(state.model if spec is None else spec)
            options = [m for m in model_choices() if m != student] or model_choices()
            model = st.selectbox(
                "Teacher model",
                options,
                key=KEY_MODEL,
                help="The server's allow-list. It must share the student's tokenizer: the "
                "teacher scores the student's own token ids.",
            )
    with c2:
        template = st.text_input(
            "Teacher's instruction (appended to the user turn; {answer} = the arithmetic answer)",
            value=preset_template(state),
            key=KEY_INSTRUCTION,
            help="SDPO's privileged context: the teacher is told what the student is not. Empty "
            "= the plain prompt (with 'Another model': plain distillation).",
        )
        if len(template) > MAX_INSTRUCTION:
            st.caption(
                f":red[The instruction is {len(template)} characters; at most "
                f"{MAX_INSTRUCTION} are used.]"
            )
            template = template[:MAX_INSTRUCTION]
    d1, d2, d3 = st.columns(3)
    with d1:
        penalty = st.segmented_control(
            "ROLL kl_penalty",
            list(KL_PENALTIES),
            default="kl",
            key=KEY_PENALTY,
            required=True,
            help="kl = log s - log t (ROLL's default), k3 = exp(t - s) - (t - s) - 1 clamped "
            "to 10, abs, mse = (log s - log t)^2 / 2.",
        )
    with d2:
        coef = st.select_slider("opd_kl_coef", COEFS, value=1.0, key=KEY_COEF)
    with d3:
        mixed = st.toggle(
            "Mixed with the reward (use_opd)",
            key=KEY_MIXED,
            help="Off: ROLL is_pure_opd, A = -coef x KL. On: ROLL use_opd, A = the reward's "
            "advantages (the sidebar's dialect) - coef x KL.",
        )
    return TeacherChoice(str(kind), template, str(model), str(penalty), float(coef), bool(mixed))


def _instructions(rollout: Rollout, template: str) -> list[str]:
    return [rollout_door.teacher_instruction(p, template) for p in rollout.prompts]


def recorded(state: AppState, rollout: Rollout, choice: TeacherChoice) -> Any:
    """The committed teacher scores when the batch is a preset and the teacher its recorded one."""
    if not state.source.startswith("preset:") or choice.kind != SAME:
        return None
    if choice.template != rollout_door.PRESET_TEMPLATES.get(state.preset):
        return None
    return rollout_door.recorded_teacher(state.preset, rollout)


def stored(state: AppState, choice: TeacherChoice) -> Any:
    """Live scores kept for this batch and teacher (None when there are none)."""
    entry = st.session_state.get(KEY_STORED)
    if entry and entry[0] == (batch_key(state), choice.scoring_key):
        return entry[1]
    return None


def score_live(state: AppState, rollout: Rollout, choice: TeacherChoice) -> str:
    """Score the batch under the teacher on the model that wrote it; "" or why it cannot."""
    bundle = ensure_model(state.model)
    problem = model_problem(rollout, bundle)
    if problem:
        return problem
    teacher = None
    if choice.kind == OTHER:
        if choice.model not in model_choices():
            return f"{choice.model} is not on this server's allow-list."
        teacher = cached_models(choice.model)
    meta = rollout.meta
    student_instruction = str(meta.instruction or "") if meta.policy_mode == "steered" else ""
    try:
        scores = rollout_door.score_teacher(
            bundle,
            rollout,
            _instructions(rollout, choice.template),
            teacher=teacher,
            student_instruction=student_instruction,
        )
    except ValueError as err:
        return str(err)
    st.session_state[KEY_STORED] = ((batch_key(state), choice.scoring_key), scores)
    return ""
