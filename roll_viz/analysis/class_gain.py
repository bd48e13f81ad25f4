"""The teaching loop's measured learning: a class's accuracy per question, before and after.

Smith et al. (Science 323:122, 2009) measured peer discussion's gain on a new isomorphic
question answered alone: 52 % right alone, 68 % after discussion, 73 % on the new question.
A lesson's ``followup`` step is that new question (a fresh batch, answered alone); this module
turns a room's answers into the three numbers per question, for the lesson's summary screen and
its CSV. Deslauriers et al. (PNAS 116(39), 2019): active classes learn more but feel they learn
less, so the class sees its own numbers.

Pure: answers come in as ``{step: {round: Counter(answer -> count)}}`` and each step's
``is_right``; nothing here reads a store or draws.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from roll_viz.data.lessons import Lesson


@dataclass(frozen=True)
class Gain:
    """One question's accuracy through the loop (None where nobody answered that round).

    Attributes:
        gate: the gate's id.
        question: its question (plain text, untrusted: show literally).
        first: share right in the first vote (predicted alone).
        discussed: share right after discussion (the re-vote).
        followup: share right on the follow-up, answered alone on a fresh batch.
        answered: how many answered (first vote, re-vote, follow-up).
    """

    gate: str
    question: str
    first: float | None
    discussed: float | None
    followup: float | None
    answered: tuple[int, int, int]


def share_right(counts: Counter, is_right: Callable[[float], bool]) -> float | None:
    """The share of answers that are right (None without answers)."""
    total = sum(counts.values())
    if not total:
        return None
    return sum(n for value, n in counts.items() if is_right(value)) / total


def class_gain(
    lesson: Lesson,
    answers: Mapping[int, Mapping[int, Counter]],
    is_right: Mapping[int, Callable[[float], bool]],
) -> tuple[Gain, ...]:
    """Each gate that has a follow-up: first vote, after discussion, and the follow-up.

    Args:
        lesson: the lesson (its steps' roles say which step is whose follow-up).
        answers: step index -> round -> answer value -> count.
        is_right: step index -> whether an answer is right on that step's batch (a follow-up's
            is the fresh batch the class answered).

    Returns:
        One Gain per gate with a follow-up, in lesson order.
    """
    index = {step.id: i for i, step in enumerate(lesson.steps)}
    out = []
    for i, step in enumerate(lesson.steps):
        if step.role != "followup" or step.parent is None:
            continue
        g = index[step.parent]
        rounds = answers.get(g, {})
        first, again = rounds.get(1, Counter()), rounds.get(2, Counter())
        alone = answers.get(i, {}).get(1, Counter())
        out.append(
            Gain(
                gate=step.parent,
                question=lesson.steps[g].question,
                first=share_right(first, is_right[g]),
                discussed=share_right(again, is_right[g]),
                followup=share_right(alone, is_right[i]),
                answered=(sum(first.values()), sum(again.values()), sum(alone.values())),
            )
        )
    return tuple(out)
