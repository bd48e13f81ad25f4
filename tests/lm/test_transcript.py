"""The chat template's pieces as token ids, and re-encoding a transcript (``lm.transcript``).

The pieces must be the template's own text (checked against ``apply_chat_template``); content
is tokenised with special tokens as text; ``reencode`` gives back the transcript's ids exactly
when the sampled tokens are the tokenizer's own encoding, and differs where they are not (the
extension property) or where ``<think>`` blocks are stripped.
"""

import pytest

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.lm.models import apply_chat_template
from roll_viz.lm.transcript import ChatPieces, content_ids, reencode

EOS = 2  # the tiny tokenizer's <|im_end|>


@pytest.fixture(scope="module")
def tok(tiny):
    return tiny.tokenizer


@pytest.fixture(scope="module")
def pieces(tok):
    return ChatPieces.of(tok)


def test_the_pieces_are_the_templates_text(pieces):
    assert pieces.around["user"] == ("<|im_start|>user\n", "<|im_end|>\n")
    assert pieces.around["tool"] == ("<|im_start|>tool\n", "<|im_end|>\n")
    assert pieces.header == "<|im_start|>assistant\n"
    assert pieces.eos_text == "<|im_end|>"


def test_a_user_message_and_header_are_the_templates_ids(tok, pieces):
    prompt = "What is 2 + 3?"
    ids = pieces.message_ids(tok, "user", prompt) + pieces.header_ids(tok)
    assert ids == apply_chat_template(tok, prompt)


def test_special_token_text_in_content_stays_text(tok, pieces):
    ids = pieces.message_ids(tok, "tool", "x<|im_end|>y")
    assert ids.count(EOS) == 1
    assert ids[-2] == EOS
    assert content_ids(tok, "<|im_end|>") != [EOS]


def test_the_close_after_a_turn(tok, pieces):
    assert pieces.close_ids(tok, True) == tok("\n", add_special_tokens=False)["input_ids"]
    assert pieces.close_ids(tok, False) == [EOS, *tok("\n", add_special_tokens=False)["input_ids"]]


def _episode(tok, pieces, replies: list[str], sampled_ids=None) -> Episode:
    """A transcript built as ``lm.episodes`` builds one, with the tokenizer's own encodings."""
    segs = [
        Segment("system", "sys", tuple(pieces.message_ids(tok, "system", "sys")), -1),
        Segment(
            "user",
            "q?",
            tuple(pieces.message_ids(tok, "user", "q?") + pieces.header_ids(tok)),
            -1,
        ),
    ]
    for turn, text in enumerate(replies):
        ids = (sampled_ids or {}).get(turn) or [*content_ids(tok, text), EOS]
        segs.append(Segment("assistant", text, tuple(ids), turn, sampled=True))
        last = turn == len(replies) - 1
        reply = pieces.close_ids(tok, True) + pieces.message_ids(tok, "tool", "ok")
        segs.append(
            Segment("tool", "ok", tuple(reply + ([] if last else pieces.header_ids(tok))), turn)
        )
    return Episode("calc-1", "calculator", tuple(segs), 0.0)


def test_a_canonical_transcript_survives_the_round_trip(tok, pieces):
    episode = _episode(tok, pieces, ["calc: 1+1", "answer: 2"])
    assert reencode(tok, episode) == episode.token_ids
    ends_with_assistant = Episode("t", "e", episode.segments[:-1], 0.0)
    assert reencode(tok, ends_with_assistant) == ends_with_assistant.token_ids


def test_stripping_think_changes_the_history_not_the_last_turn(tok, pieces):
    replies = ["<think>add</think> calc: 1+1", "<think>done</think> answer: 2"]
    episode = _episode(tok, pieces, replies)
    assert reencode(tok, episode) == episode.token_ids
    stripped = reencode(tok, episode, strip_think=True)
    assert stripped != episode.token_ids
    text = tok.decode(list(stripped))
    assert "<think>add</think>" not in text
    assert "calc: 1+1" in text
    assert "<think>done</think>" in text  # the last assistant turn keeps its block
    expected = _episode(tok, pieces, ["calc: 1+1", replies[1]])
    assert stripped == expected.token_ids[: len(stripped)]


def test_non_canonical_sampled_ids_do_not_survive_re_encoding(tok, pieces):
    # a byte the tiny model may sample alone: half of a UTF-8 character, decoded as U+FFFD
    byte = content_ids(tok, "é")[0]
    episode = _episode(tok, pieces, ["\ufffd"], sampled_ids={0: [byte, EOS]})
    again = reencode(tok, episode)
    assert again != episode.token_ids
    assert byte in episode.token_ids
    assert byte not in again
