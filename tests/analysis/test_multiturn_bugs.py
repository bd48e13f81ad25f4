"""The multi-turn cases of the gallery, by hand.

The transcript of the cases: system 3 tokens, user 4 | assistant 4 (ends in EOS) | tool 2 |
assistant 4 (ends in EOS). Every expected number below is counted or written out here (verl's
default loss is the token mean over the batch's masked tokens: d loss / d log pi_t = -A_t / N
on a masked-in token at ratio 1), never read from the module.
"""

from __future__ import annotations

import pytest

from roll_viz.analysis import episode_sets as sets
from roll_viz.analysis import silent_bugs as gallery
from roll_viz.analysis.silent_bugs import bugs_multiturn as mt
from roll_viz.core.agentic import masks

ROLES = ["system"] * 3 + ["user"] * 4 + ["assistant"] * 4 + ["tool"] * 2 + ["assistant"] * 4


def test_the_cases_are_in_the_gallery_after_the_field_fourteen():
    ids = [b.id for b in mt.BUGS]
    assert ids == [
        "tool-mask",
        "history-turns",
        "last-turn",
        "pad-eos",
        "mask-attention",
        "turn-index-bias",
    ]
    assert gallery.IDS[-len(ids) :] == tuple(ids)
    threads = " ".join(b.thread for b in mt.BUGS)
    for ref in ("trl#5144", "trl#4975", "RL#2176", "ms-swift#7838", "trl#4974", "verl#7244"):
        assert ref in threads, ref


def test_right_mask_is_the_sampled_tokens_only():
    episode, pieces = sets.make_episode(sets.TRANSCRIPT)
    batch = masks.batch_episodes([episode])
    assert len(pieces) == len(ROLES) == 17
    assert masks.rule_mask(batch, "correct")[0].tolist() == [r == "assistant" for r in ROLES]
    assert int(batch.valid.sum()) == 17


def test_tool_mask_share_and_weights():
    out = gallery.bug("tool-mask").compute()
    # Liger path: 10 completion tokens (4 + 2 + 4), each gets A / 10; 2 of them are the tool's
    assert out.wrong == pytest.approx(2 / 10)
    assert out.right == 0.0
    hand_wrong = [0.0] * 7 + [1 / 10] * 10
    hand_right = [0.0] * 7 + [1 / 8] * 4 + [0.0] * 2 + [1 / 8] * 4
    assert list(out.wrong_series) == pytest.approx(hand_wrong)
    assert list(out.right_series) == pytest.approx(hand_right)


def test_history_turns_count_the_unsampled_tokens():
    out = gallery.bug("history-turns").compute()
    assert (out.wrong, out.right) == (4.0, 0.0)
    # 12 tokens trained by role: the 4 history tokens (positions 3..6) get 1/12 each
    assert list(out.wrong_series[3:7]) == pytest.approx([1 / 12] * 4)
    assert sum(out.right_series) == pytest.approx(1.0)  # 8 sampled x 1/8


def test_last_turn_only_gives_the_tool_call_nothing():
    out = gallery.bug("last-turn").compute()
    assert out.wrong == 0.0
    assert out.right == pytest.approx(4 / 8)
    assert list(out.wrong_series[13:]) == pytest.approx([1 / 4] * 4)


def test_pad_eos_masks_both_turn_ends():
    out = gallery.bug("pad-eos").compute()
    assert out.wrong == 0.0
    assert out.right == pytest.approx(2 / 8)
    eos = [10, 16]
    assert [out.wrong_series[i] for i in eos] == [0.0, 0.0]
    assert out.wrong_series[7] == pytest.approx(1 / 6)  # 6 non-EOS sampled tokens


def test_mask_as_attention_hides_the_tool_answer():
    out = gallery.bug("mask-attention").compute()
    # '=17' is token 15 (0-based): causally 16 tokens, minus the tool's 2
    assert (out.wrong, out.right) == (14.0, 16.0)
    assert list(out.right_series) == [float(i + 1) for i in range(17)]


def test_turn_index_baselines_cancel_the_extra_turn():
    out = gallery.bug("turn-index-bias").compute()
    # stops 1, 1, 2, 3; returns 0.5 n + 1 = 1.5, 1.5, 2, 2.5; mean 1.875
    returns = [1.5, 1.5, 2.0, 2.5]
    mean = sum(returns) / 4
    assert list(out.right_series) == pytest.approx([g - mean for g in returns])
    assert out.right == pytest.approx(((2.5 - mean) - (1.5 - mean)) / 2)  # 0.5 per turn
    # b_k = 0.5 at every index reached: every turn's reward cancels, the outcome too
    assert list(out.wrong_series) == [0.0] * 4
    assert out.wrong == 0.0
