"""The multi-turn cases of the gallery and the Episodes page's loss over a mask, by hand.

The transcript of the cases: system 3 tokens, user 4 | assistant 4 (ends in EOS) | tool 2 |
assistant 4 (ends in EOS). Every expected number below is counted or written out here (verl's
default loss is the token mean over the batch's masked tokens: d loss / d log pi_t = -A_t / N
on a masked-in token at ratio 1), never read from the module.
"""

from __future__ import annotations

import pytest
import torch

from roll_viz.analysis import episode_lab as lab
from roll_viz.analysis import silent_bugs as gallery
from roll_viz.analysis.silent_bugs import bugs_multiturn as mt
from roll_viz.core.agentic.episode import Episode, Segment

ROLES = ["system"] * 3 + ["user"] * 4 + ["assistant"] * 4 + ["tool"] * 2 + ["assistant"] * 4


def test_the_cases_are_in_the_gallery_after_the_field_fourteen():
    ids = [b.id for b in mt.BUGS]
    assert ids == ["tool-mask", "history-turns", "last-turn", "pad-eos", "mask-attention"]
    assert gallery.IDS[-len(ids) :] == tuple(ids)
    threads = " ".join(b.thread for b in mt.BUGS)
    for ref in ("trl#5144", "trl#4975", "RL#2176", "ms-swift#7838", "trl#4974"):
        assert ref in threads, ref


def test_right_mask_is_the_sampled_tokens_only():
    episode, pieces = mt.make_episode(mt.TRANSCRIPT)
    batch = lab.episode_batch([episode])
    assert len(pieces) == len(ROLES) == 17
    assert batch.trainable[0].tolist() == [1.0 if r == "assistant" else 0.0 for r in ROLES]
    assert batch.valid.sum() == 17


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


def _episode(rows):
    segs = []
    for role, turn, sampled, ids in rows:
        segs.append(Segment(role, "x", tuple(ids), turn, sampled=sampled))
    return Episode("t", "calculator", tuple(segs), outcome=1.0)


def test_mask_loss_matches_the_token_mean_by_hand_and_autograd():
    a = _episode([("user", -1, False, [1, 2]), ("assistant", 0, True, [3, 4, 5])])
    b = _episode(
        [("user", -1, False, [1]), ("assistant", 0, True, [3]), ("tool", 0, False, [6, 7])]
    )
    batch = lab.episode_batch([a, b])
    assert batch.valid.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert batch.trainable.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    adv = torch.tensor([[9.0, 9.0, 0.5, 0.5, 0.5], [9.0, -2.0, 9.0, 9.0, 9.0]], dtype=lab.F64)
    got = lab.mask_loss(batch, batch.trainable, adv, "verl")
    # token mean over 4 tokens at ratio 1: loss = -(0.5 * 3 - 2) / 4
    assert got.loss == pytest.approx(-(0.5 * 3 - 2.0) / 4)
    hand = [[0, 0, -0.5 / 4, -0.5 / 4, -0.5 / 4], [0, 2.0 / 4, 0, 0, 0]]
    assert got.grad.flatten().tolist() == pytest.approx([v for row in hand for v in row])
    assert (got.tokens, got.context_tokens, got.grad_context) == (4, 0, 0.0)
    everything = lab.mask_loss(batch, batch.valid, adv, "verl")
    assert everything.tokens == 9
    assert everything.context_tokens == 5
    # 5 context tokens of A = 9 against 3 x 0.5 + 2 on the sampled ones (the same 1/9 each)
    assert everything.context_share == pytest.approx(9 * 5 / (9 * 5 + 1.5 + 2))


def test_mask_loss_refuses_a_wrong_shape():
    batch = lab.episode_batch([_episode([("assistant", 0, True, [1, 2])])])
    with pytest.raises(ValueError, match="mask"):
        lab.mask_loss(batch, torch.ones(1, 3), torch.ones(1, 2))
