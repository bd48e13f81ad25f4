"""Small hand-built episode sets: a transcript a class can count, shared by gallery and lessons.

``calculator`` is one two-turn tool episode written token by token (the gallery's multi-turn
cases and the lesson "which tokens get gradient?" count its tokens); ``stops`` is a group of six
episodes of one task that stop after 1, 2 or 3 turns, every tool call paid a format reward of
0.5 and every outcome 1 (the lesson "which rule rewards an extra turn?"; verl #7244).
"""

from __future__ import annotations

from collections.abc import Sequence

from roll_viz.core.agentic.credit import turn_index_demo
from roll_viz.core.agentic.episode import Episode, Segment

#: (role, turn, sampled, tokens as display strings) per segment
Rows = Sequence[tuple[str, int, bool, tuple[str, ...]]]

EOS = "<eos>"
#: the calculator transcript: prompt 7 tokens | tool call 4 | tool answer 2 | answer 4
TRANSCRIPT: tuple[tuple[str, int, bool, tuple[str, ...]], ...] = (
    ("system", -1, False, ("Use", " calc", ".")),
    ("user", -1, False, ("3", "*4", "+5", "?")),
    ("assistant", 0, True, ("<call>", "calc", " 3*4", EOS)),
    ("tool", 0, False, ("12", "\n")),
    ("assistant", 1, True, ("12", "+5", "=17", EOS)),
)
#: an earlier conversation in the prompt: an assistant message the policy did not sample now
HISTORY = ("assistant", -1, False, ("Hi", ",", " ask", " me"))
HISTORY_TRANSCRIPT = (TRANSCRIPT[0], HISTORY, *TRANSCRIPT[1:])

#: the stops group: episodes per stopping turn n = 1, 2, 3; E[r_k] per turn; outcome per n
STOP_COUNTS = (2, 2, 2)
FORMAT_REWARD = 0.5
STOP_OUTCOMES = (1.0, 1.0, 1.0)


def make_episode(rows: Rows) -> tuple[Episode, list[str]]:
    """(the Episode, its tokens' display strings) of a transcript written as rows.

    Token ids are the position of the string in the transcript's vocabulary (1-based), so equal
    strings share an id (both EOS tokens are one id, as they are in a real tokenizer).
    """
    vocab: dict[str, int] = {}
    segments, pieces = [], []
    for role, turn, sampled, tokens in rows:
        ids = tuple(vocab.setdefault(t, len(vocab) + 1) for t in tokens)
        segments.append(Segment(role, "".join(tokens), ids, turn, sampled=sampled))
        pieces.extend(tokens)
    return Episode("calc-1", "calculator", tuple(segments), outcome=1.0), pieces


def eos_id(rows: Rows = TRANSCRIPT) -> int:
    """The id ``make_episode`` gives the EOS string."""
    episode, pieces = make_episode(rows)
    return episode.token_ids[pieces.index(EOS)]


def calculator() -> tuple[tuple[Episode, ...], tuple[str, ...]]:
    """The calculator episode (a group of one) and the display strings of its tokens."""
    episode, pieces = make_episode(TRANSCRIPT)
    return (episode,), tuple(pieces)


def stops() -> tuple[Episode, ...]:
    """Six episodes of one task: two stop after each of 1, 2 and 3 turns; same outcome."""
    turns = len(STOP_COUNTS)
    return turn_index_demo(STOP_COUNTS, (FORMAT_REWARD,) * turns, STOP_OUTCOMES, task="stops")
