"""Scoring the student's answers under a teacher: the reference of on-policy distillation.

The teacher is either the same model with a privileged instruction appended to the user turn
(the answer, a hint: SDPO's self-distillation) or another loaded model with the same vocabulary.
``score_teacher`` runs the teacher-forced passes of ``lm.scoring`` over the rollout's own tokens,
once under the student's context and once under the teacher's, and returns per token the
teacher's log-prob of the sampled token, the student's recomputed one and the exact
KL(student || teacher) over the full vocabulary (the quantity ROLL's "kl" estimator samples).

``teacher_instruction`` fills ``{answer}`` in a template with the verifiable answer of an
arithmetic prompt (``rewards.arithmetic_answer``). ``recorded_teacher`` reads the small committed
recording of a preset's teacher scores (``teacher_presets.json``, written by ``record_presets``),
so a preset batch shows the teacher's signal with no model loaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.records import Rollout
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import exact_kl, logprobs_from_logits, response_hidden
from roll_viz.rewards import arithmetic_answer

RECORDED = Path(__file__).with_name("teacher_presets.json")
RECORD_DECIMALS = 4

#: a preset's teacher instruction (appended to the user turn, as a steered policy's is)
PRESET_TEMPLATES: dict[str, str] = {
    "arithmetic": "The correct answer is {answer}. Reply with just the number.",
    "quantum": "Answer in one plain sentence of about twenty words.",
    "sentiment": "Be warm and use many positive words.",
    "pirate": "Answer like an excited pirate: say arr, ahoy and matey.",
}


def teacher_instruction(prompt: str, template: str) -> str:
    """The teacher's privileged instruction for one prompt.

    ``{answer}`` becomes the prompt's verifiable arithmetic answer (an integer when it is one),
    or "unknown" when the prompt has none.
    """
    if "{answer}" not in template:
        return template
    value = arithmetic_answer(prompt)
    if value is None:
        answer = "unknown"
    elif value.denominator == 1:
        answer = str(value.numerator)
    else:
        answer = f"{value.numerator}/{value.denominator}"
    return template.replace("{answer}", answer)


@dataclass(frozen=True)
class TeacherScores:
    """The rollout's tokens under the teacher, next to the student's own scores.

    Attributes:
        teacher_logprobs: (B, T) log t(y_t) of each sampled token, 0 on padding.
        student_logprobs: (B, T) log s(y_t) recomputed under the student's context.
        exact_kl: (B, T) KL(student || teacher) over the full vocabulary at each position.
        instructions: (P,) the teacher's instruction per prompt.
    """

    teacher_logprobs: Tensor
    student_logprobs: Tensor
    exact_kl: Tensor
    instructions: tuple[str, ...]


def _vocab_size(bundle: ModelBundle) -> int:
    return int(bundle.model.get_output_embeddings().weight.shape[0])


def score_teacher(
    student: ModelBundle,
    rollout: Rollout,
    instructions: Sequence[str],
    *,
    teacher: ModelBundle | None = None,
    student_instruction: str = "",
    temperature: float | None = None,
    block_rows: int = 256,
) -> TeacherScores:
    """Score the rollout's tokens under the student and under the teacher.

    Takes each bundle's lock for its forward pass (no gradient).

    Args:
        student: the model that sampled (its base weights, no adapter).
        rollout: the batch; row b answers ``prompts[group_ids[b]]``.
        instructions: (P,) the teacher's instruction per prompt ("" = the plain prompt).
        teacher: another model with the same vocabulary (None: the student itself).
        student_instruction: the student's own hidden instruction (a steered policy's).
        temperature: logits are divided by it under both (default: the rollout's
            ``logprob_temperature``, else 1).
        block_rows: positions per LM-head block (bounds the (rows, V) temporaries).

    Returns:
        TeacherScores (float32, CPU).

    Raises:
        ValueError: one instruction per prompt is needed, or the teacher's vocabulary differs.
    """
    if len(instructions) != len(rollout.prompts):
        raise ValueError(f"{len(instructions)} instructions for {len(rollout.prompts)} prompts")
    teacher = student if teacher is None else teacher
    if teacher is not student and _vocab_size(teacher) != _vocab_size(student):
        raise ValueError(
            f"the teacher {teacher.name} has a vocabulary of {_vocab_size(teacher)} tokens, the "
            f"student {student.name} {_vocab_size(student)}: on-policy distillation scores the "
            "student's own token ids, so both need the same tokenizer"
        )
    temp = float(temperature or rollout.meta.logprob_temperature or 1.0)
    mask = rollout.response_mask > 0
    gids = rollout.group_ids.tolist()
    prompts = rollout.prompts

    def hidden(bundle: ModelBundle, extra: Sequence[str]) -> Tensor:
        with bundle.lock, torch.inference_mode():
            contexts = [bundle.chat_ids(prompts[g], extra[g]) for g in gids]
            h = response_hidden(bundle, contexts, rollout.token_ids, mask)
            return h[mask.to(h.device)].float().cpu()

    h_student = hidden(student, [student_instruction] * len(prompts))
    h_teacher = hidden(teacher, list(instructions))
    targets = rollout.token_ids[mask]
    parts: list[tuple[Tensor, Tensor, Tensor]] = []
    for start in range(0, targets.shape[0], block_rows):
        stop = min(start + block_rows, targets.shape[0])
        with torch.inference_mode():
            with student.lock:
                head = student.model.get_output_embeddings()
                logp = logprobs_from_logits(head(h_student[start:stop].to(student.device)), temp)
            with teacher.lock:
                head = teacher.model.get_output_embeddings()
                logq = logprobs_from_logits(head(h_teacher[start:stop].to(teacher.device)), temp)
            logp, logq = logp.cpu(), logq.cpu()
            tgt = targets[start:stop, None]
            parts.append(
                (
                    logq.gather(-1, tgt).squeeze(-1),
                    logp.gather(-1, tgt).squeeze(-1),
                    exact_kl(logp, logq),
                )
            )
    shape = rollout.token_ids.shape

    def spread(i: int) -> Tensor:
        out = torch.zeros(shape, dtype=torch.float32)
        if parts:
            out[mask] = torch.cat([p[i] for p in parts]).float()
        return out

    return TeacherScores(spread(0), spread(1), spread(2), tuple(instructions))


# ---------------------------------------------------------------------------------------------
# The committed recording of the presets' teacher scores


def _row_key(ids: Sequence[int]) -> str:
    return ",".join(str(int(i)) for i in ids)


def recording(rollout: Rollout, scores: TeacherScores, template: str) -> dict[str, Any]:
    """A JSON-able record of one preset's teacher scores, keyed by each row's token ids."""
    rows = {}
    for b in range(rollout.token_ids.shape[0]):
        n = int(rollout.response_mask[b].sum())
        rows[_row_key(rollout.token_ids[b, :n].tolist())] = {
            "teacher_logprobs": [
                round(float(x), RECORD_DECIMALS) for x in scores.teacher_logprobs[b, :n]
            ],
            "exact_kl": [round(float(x), RECORD_DECIMALS) for x in scores.exact_kl[b, :n]],
        }
    return {
        "template": template,
        "instructions": list(scores.instructions),
        "model_spec": rollout.meta.model_spec or "",
        "rows": rows,
    }


def recorded_teacher(name: str, rollout: Rollout, path: Path = RECORDED) -> TeacherScores | None:
    """The committed teacher scores of preset ``name`` for the rows of ``rollout`` (None if absent).

    Rows are matched by their token ids, so a subsampled preset (smaller G) finds its rows.
    The student's log-probs are the rollout's own.
    """
    if not path.exists():
        return None
    record = json.loads(path.read_text(encoding="utf-8")).get(name)
    if record is None:
        return None
    shape = rollout.token_ids.shape
    teacher = torch.zeros(shape, dtype=torch.float32)
    kl = torch.zeros(shape, dtype=torch.float32)
    for b in range(shape[0]):
        n = int(rollout.response_mask[b].sum())
        row = record["rows"].get(_row_key(rollout.token_ids[b, :n].tolist()))
        if row is None:
            return None
        teacher[b, :n] = torch.tensor(row["teacher_logprobs"], dtype=torch.float32)
        kl[b, :n] = torch.tensor(row["exact_kl"], dtype=torch.float32)
    student = rollout.logprobs.float() * (rollout.response_mask > 0)
    return TeacherScores(teacher, student, kl, tuple(record["instructions"]))


def record_presets(bundle: ModelBundle, presets: dict[str, Rollout], path: Path = RECORDED) -> Path:
    """Score each preset's rollout under its ``PRESET_TEMPLATES`` teacher and write the file.

    Args:
        bundle: the model the presets were sampled with.
        presets: preset name -> its full rollout.
        path: where the JSON goes.

    Returns:
        The path written.
    """
    out = {}
    for name, rollout in sorted(presets.items()):
        template = PRESET_TEMPLATES[name]
        steered = rollout.meta.policy_mode == "steered"
        student_instruction = (rollout.meta.instruction or "") if steered else ""
        instructions = [teacher_instruction(p, template) for p in rollout.prompts]
        scores = score_teacher(
            bundle, rollout, instructions, student_instruction=str(student_instruction)
        )
        out[name] = recording(rollout, scores, template)
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    return path
