"""AppTest of the Teacher-as-reference page: recorded teacher on a preset, live on the tiny model.

A preset with its own recorded instruction is instant (no model); ROLL's estimator, coefficient
and mode act on the shown numbers; another instruction asks for a live scoring, which runs on the
tiny live model (ROLL_VIZ_MODEL=tiny) and is refused, with the reason, on a batch another model
wrote.
"""

from __future__ import annotations

import pytest
import torch

from roll_viz.analysis.teacher_signal import teacher_signal
from roll_viz.core.records import batch_from_rollout
from roll_viz.data.presets import load_preset
from roll_viz.lm.teacher import recorded_teacher
from roll_viz.rewards import score_rollout
from roll_viz.ui import teacher_page as tp
from roll_viz.views import text
from tests.ui.apptest import open_page

LIVE = {"preset": "quantum", "live": "true", "G": "2", "T": "8"}


def answers(at):
    return next(d.value for d in at.dataframe if "A teacher" in d.value.columns and
                "reverse KL" in d.value.columns)  # fmt: skip


def expected(name: str, **kwargs):
    _, spec, rollout = load_preset(name)
    batch = batch_from_rollout(rollout, score_rollout(rollout, spec))
    rec = recorded_teacher(name, rollout)
    return teacher_signal(
        batch.logprobs, rec.teacher_logprobs, batch.response_mask, torch.zeros_like(batch.logprobs),
        batch.scores, batch.group_ids, tokens=rollout.tokens, prompts=rollout.prompts,
        exact_kl=rec.exact_kl, **kwargs,
    )  # fmt: skip


def test_preset_teacher_is_instant():
    """arithmetic + its recorded instruction: chips, bars and the table, equal to the analysis."""
    at = open_page("teacher", preset="arithmetic")
    assert not [b for b in at.button if b.key == tp.KEY_SCORE]
    assert len(at.get("plotly_chart")) == 1
    chips = [h for h in at.get("html") if 'class="rv-chips"' in h.proto.body]
    keys = [h for h in at.get("html") if "teacher advantage (red" in h.proto.body]
    assert len(keys) == 1  # the colours have a key above the answers
    assert len(chips) == 8
    shown = answers(at)
    want = expected("arithmetic").answers
    assert shown["A teacher"].tolist() == pytest.approx(want["A teacher"].tolist())
    assert any("recorded with the preset" in c.value for c in at.caption)
    # samples named as on the chips and bars (p0/s0 ...), not by batch index
    _, _, rollout = load_preset("arithmetic")
    assert shown["sample"].tolist() == text.sample_labels(rollout)


def test_k3_pushes_every_token_down_and_mixed_adds_the_reward():
    at = open_page("teacher", preset="arithmetic")
    at.segmented_control(key=tp.KEY_PENALTY).set_value("k3").run()
    pure = answers(at)
    assert (pure["A teacher"] <= 0).all()
    want = expected("arithmetic", kl_penalty="k3").answers
    assert pure["A teacher"].tolist() == pytest.approx(want["A teacher"].tolist())
    at.toggle(key=tp.KEY_MIXED).set_value(True).run()
    mixed = answers(at)
    assert (mixed["A teacher"] - mixed["A reward"]).tolist() == pytest.approx(
        pure["A teacher"].tolist()
    )
    assert (mixed["A reward"] != 0).any()


def test_another_instruction_on_a_preset_needs_its_model():
    """The preset was written by smollm2; the tiny live model refuses, saying why."""
    at = open_page("teacher", preset="arithmetic")
    at.text_input(key=tp.KEY_INSTRUCTION).set_value("Think step by step.").run()
    assert any("has not scored this batch" in i.value for i in at.info)
    at.button(key=tp.KEY_SCORE).click().run()
    assert not at.exception
    assert any("sampled with model" in w.value for w in at.warning)


def test_live_batch_is_scored_on_the_tiny_model():
    at = open_page("teacher", **LIVE)
    at.text_input(key=tp.KEY_INSTRUCTION).set_value("The answer is {answer}.").run()
    at.button(key=tp.KEY_SCORE).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("scored live on the model" in c.value for c in at.caption)
    shown = answers(at)
    assert len(shown) == 2
    assert (shown["reverse KL"].abs() > 0).any()


def test_too_long_instruction_is_cut_with_a_message():
    at = open_page("teacher", preset="arithmetic")
    at.text_input(key=tp.KEY_INSTRUCTION).set_value("x" * (tp.MAX_INSTRUCTION + 5)).run()
    assert not at.exception
    assert any("at most" in c.value for c in at.caption)
