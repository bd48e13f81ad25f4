"""Teacher scoring on the tiny model: the teacher-forced passes of the reference, another context.

The oracle is the sampler's own scoring: a teacher with no instruction over a steered batch IS
the reference, so its log-probs and exact KL equal the rollout's ``ref_logprobs`` and
``exact_kl``; the student's recomputed log-probs equal the rollout's ``logprobs``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from roll_viz.core.records import select_rows
from roll_viz.data.presets import load_preset
from roll_viz.lm import teacher as teacher_mod
from roll_viz.lm.teacher import recorded_teacher, recording, score_teacher, teacher_instruction
from tests.lm.helpers import tiny_model

ATOL = 2e-4


def valid(x, rollout):
    return x[rollout.response_mask > 0]


def test_teacher_instruction_fills_the_answer():
    template = "The correct answer is {answer}."
    assert teacher_instruction("What is 2 + 3?", template) == "The correct answer is 5."
    assert teacher_instruction("What is 7 / 2?", template) == "The correct answer is 7/2."
    assert teacher_instruction("Hello there", template) == "The correct answer is unknown."
    assert teacher_instruction("Hello there", "Be brief.") == "Be brief."


def test_plain_teacher_over_a_steered_batch_is_its_reference(tiny, steered):
    """Student = the steered context, teacher = the plain prompt: the sampler's ref scores."""
    instruction = dict(steered.meta)["instruction"]
    scores = score_teacher(
        tiny, steered, [""] * len(steered.prompts), student_instruction=instruction
    )
    assert torch.allclose(
        valid(scores.student_logprobs, steered), valid(steered.logprobs, steered), atol=ATOL
    )
    assert torch.allclose(
        valid(scores.teacher_logprobs, steered), valid(steered.ref_logprobs, steered), atol=ATOL
    )
    assert torch.allclose(
        valid(scores.exact_kl, steered), valid(steered.exact_kl, steered), atol=ATOL
    )
    assert float(scores.exact_kl[steered.response_mask == 0].abs().sum()) == 0.0
    assert float(valid(scores.exact_kl, steered).sum()) > 0


def test_same_context_gives_zero_kl(tiny, identical):
    scores = score_teacher(tiny, identical, [""] * len(identical.prompts))
    assert float(scores.exact_kl.abs().max()) < 1e-5
    assert torch.allclose(scores.teacher_logprobs, scores.student_logprobs, atol=1e-5)


def test_privileged_instruction_moves_the_teacher(tiny, identical):
    """The answer in the teacher's context: a non-zero KL to it on the student's tokens."""
    instructions = [teacher_instruction(p, "The answer is {answer}.") for p in identical.prompts]
    scores = score_teacher(tiny, identical, instructions)
    assert scores.instructions == tuple(instructions)
    kl = valid(scores.exact_kl, identical)
    assert float(kl.min()) >= 0
    assert float(kl.sum()) > 1e-3
    assert not torch.allclose(scores.teacher_logprobs, scores.student_logprobs, atol=1e-4)


def test_another_model_as_teacher(tiny, identical):
    """A second bundle (same tiny weights, same vocabulary) runs the two-model path: KL 0."""
    other = tiny_model()
    scores = score_teacher(tiny, identical, [""] * len(identical.prompts), teacher=other)
    assert float(scores.exact_kl.abs().max()) < 1e-5


def test_one_instruction_per_prompt(tiny, identical):
    with pytest.raises(ValueError, match="instructions"):
        score_teacher(tiny, identical, [""])


def test_recording_round_trip_and_subsampled_rows(tiny, identical, tmp_path):
    """The recorded scores come back for the full batch and for a subset of its rows."""
    instructions = [teacher_instruction(p, "The answer is {answer}.") for p in identical.prompts]
    scores = score_teacher(tiny, identical, instructions)
    path = tmp_path / "teacher.json"
    path.write_text(json.dumps({"demo": recording(identical, scores, "t")}), encoding="utf-8")
    back = recorded_teacher("demo", identical, path)
    assert back is not None
    assert torch.allclose(back.teacher_logprobs, scores.teacher_logprobs, atol=1e-4)
    assert torch.allclose(back.exact_kl, scores.exact_kl, atol=1e-4)
    rows = torch.tensor([0, 2, 4])
    sub = select_rows(identical, rows)
    part = recorded_teacher("demo", sub, path)
    assert part is not None
    assert torch.allclose(
        part.teacher_logprobs, back.teacher_logprobs[rows][:, : sub.token_ids.shape[1]]
    )
    assert recorded_teacher("absent", identical, path) is None


def test_committed_recording_matches_the_presets():
    """Every preset has its recorded teacher, row for row (no model needed)."""
    for name in teacher_mod.PRESET_TEMPLATES:
        _, _, rollout = load_preset(name)
        rec = recorded_teacher(name, rollout)
        assert rec is not None, name
        mask = rollout.response_mask > 0
        assert float(rec.exact_kl[mask].min()) >= 0
        assert float(rec.teacher_logprobs[mask].max()) <= 0


def test_a_teacher_with_another_vocabulary_is_refused(tiny, identical):
    """The teacher scores the student's token ids: a different vocabulary size is an error."""
    weight = torch.zeros(tiny.model.get_output_embeddings().weight.shape[0] + 1, 2)
    head = SimpleNamespace(weight=weight)
    other = SimpleNamespace(name="other", model=SimpleNamespace(get_output_embeddings=lambda: head))
    with pytest.raises(ValueError, match="same tokenizer"):
        score_teacher(tiny, identical, [""] * len(identical.prompts), teacher=other)
