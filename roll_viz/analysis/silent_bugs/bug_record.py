"""The gallery's records: a silent bug, its two numbers, and the helpers every case module shares.

A case module (``bugs_*.py``) writes each bug's batch, its ``wrong_*`` formula (the buggy code,
plainly), its ``right_*`` call into roll-viz's pipeline and the ``SilentBug`` record; the package
(``__init__``) puts the modules' ``BUGS`` together in gallery order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.core.pipeline import policy_loss
from roll_viz.core.records import Batch

F64 = torch.float64


@dataclass(frozen=True)
class Outcome:
    """Both numbers of one lesson, the per-item values the figure draws and the formula.

    Attributes:
        wrong: the headline number the buggy formula gives (may be NaN: "it raises").
        right: the headline number roll-viz computes.
        labels: one label per item of the figure (samples, tokens, sequences).
        wrong_series: the buggy value per item.
        right_series: the right value per item.
        formula: the formulas with this batch's numbers, plain text (several lines).
        series_title: what the per-item values are ("" = the lesson's headline quantity).
    """

    wrong: float
    right: float
    labels: tuple[str, ...]
    wrong_series: tuple[float, ...]
    right_series: tuple[float, ...]
    formula: str
    series_title: str = ""


@dataclass(frozen=True)
class SilentBug:
    """One lesson of the gallery.

    Attributes:
        id: short stable id (the page's ``bug=`` URL value).
        title: one line.
        short: a few words for the one-click choice.
        thread: where it was reported, "owner/repo#number" as in field-2026.md.
        question: what the class predicts before the reveal.
        choices: the answers offered; the distractors are the known wrong answers.
        answer: index of the right choice.
        quantity: what the two headline numbers measure.
        batch: the tiny batch as (name, value) display rows.
        wrong_label: how the wrong side was computed (the buggy formula's name).
        right_label: how the right side was computed (the roll-viz call).
        explanation: one line: why the wrong number is wrong.
        compute: returns the Outcome (recomputed on every call).
    """

    id: str
    short: str
    title: str
    thread: str
    question: str
    choices: tuple[str, ...]
    answer: int
    quantity: str
    batch: tuple[tuple[str, str], ...]
    wrong_label: str
    right_label: str
    explanation: str
    compute: Callable[[], Outcome]


# ------------------------------------------------------------------------------------ helpers


def make_batch(
    scores: Sequence[float],
    lengths: Sequence[int],
    groups: Sequence[str],
    logprobs: Sequence[Sequence[float]] | None = None,
    ref_logprobs: Sequence[Sequence[float]] | None = None,
) -> Batch:
    """A pipeline Batch from plain lists: one row per answer, right-padded to the longest.

    Args:
        scores: (B,) response-level rewards.
        lengths: (B,) response lengths in tokens.
        groups: (B,) prompt label of each answer (rows of one label form a group).
        logprobs: optional (B, T) policy log-probs (T = the longest length).
        ref_logprobs: optional (B, T) reference log-probs.

    Returns:
        A Batch (float64).
    """
    width = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=F64)
    labels = tuple(dict.fromkeys(groups))
    ids = torch.tensor([labels.index(g) for g in groups], dtype=torch.long)
    return Batch(
        scores=torch.tensor(list(scores), dtype=F64),
        response_mask=mask,
        group_ids=ids,
        group_labels=labels,
        logprobs=None if logprobs is None else torch.tensor(logprobs, dtype=F64),
        ref_logprobs=None if ref_logprobs is None else torch.tensor(ref_logprobs, dtype=F64),
    )


def avg(xs: Sequence[float]) -> float:
    """The plain mean (the buggy formulas are written without torch)."""
    return sum(xs) / len(xs)


def sd(xs: Sequence[float], ddof: int = 1) -> float:
    """The plain standard deviation, Bessel-corrected unless ``ddof=0``."""
    m = avg(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def num(x: float, digits: int = 4) -> str:
    """A number for the plain-text formulas: 4 significant digits, NaN spelled out."""
    if math.isnan(x):
        return "NaN"
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}f}".rstrip("0").rstrip(".")


def series(values: Tensor | Sequence[float]) -> tuple[float, ...]:
    """Per-item values of a figure as plain floats."""
    if isinstance(values, Tensor):
        values = values.detach().flatten().tolist()
    return tuple(float(v) for v in values)


def step_grad(
    framework: str,
    config: dict,
    logprobs: Sequence[Sequence[float]],
    advantages: Tensor,
    mask: Tensor,
    ref_logprobs: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(loss, d loss / d logp) of roll-viz's ``policy_loss`` on the first step (ratio 1)."""
    lp = torch.tensor(logprobs, dtype=F64, requires_grad=True)
    result = policy_loss(
        framework,
        config,
        logprobs=lp,
        old_logprobs=lp.detach(),
        advantages=advantages,
        response_mask=mask,
        ref_logprobs=ref_logprobs,
    )
    (grad,) = torch.autograd.grad(result.total, lp)
    return result.total.detach(), grad
