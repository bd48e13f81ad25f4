"""Each chain page's key number under the recipes of record (``core.pipeline.eras``).

``era_diff.diff_eras`` runs the recipes ("GRPO as published (2024)", prime-rl, Tinker,
DeepSeek-V3.2, ScaleRL / Olmo 3, or those picked) on one batch. A page that shows that batch asks
a narrower question: what does *its own* number become under each recipe?
``page_numbers(diff, page)`` answers with a small table (one row per quantity, one column per
recipe, and a line saying what the quantity is), ``page_answers(diff, page)`` with the per-answer
columns that page looks at, and ``framework_losses(batch, prompts, eras=...)`` with the loss of
each recipe in every dialect (the Frameworks page's number).

All numbers are read off ``EraRun`` (no second computation): advantages on the kept rows' valid
tokens, the loss and its terms, the token count in the loss, the groups dropped before batching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import torch

from roll_viz.analysis.era_diff import EraDiff, EraRun, diff_eras
from roll_viz.core.pipeline import dialects
from roll_viz.core.records import Batch

F64 = torch.float64


def _valid(er: EraRun, mask: torch.Tensor) -> torch.Tensor:
    """(N,) the era's advantages on the valid tokens of the rows it keeps."""
    keep = (mask > 0) & er.kept[:, None]
    return er.advantages.to(F64)[keep]


def _max_abs(er: EraRun, mask: torch.Tensor) -> float:
    a = _valid(er, mask)
    return float(a.abs().max()) if a.numel() else 0.0


def _mean_abs(er: EraRun, mask: torch.Tensor) -> float:
    a = _valid(er, mask)
    return float(a.abs().mean()) if a.numel() else 0.0


def _spread(er: EraRun, mask: torch.Tensor) -> float:
    a = _valid(er, mask)
    return float(a.std(correction=0)) if a.numel() else 0.0


#: quantity -> (what it means, how to read it off an EraRun and the batch's (B, T) mask)
QUANTITIES: dict[str, tuple[str, Callable[[EraRun, torch.Tensor], object]]] = {
    "answers in the loss": (
        "rows left after the zero-variance filter",
        lambda er, m: int(er.kept.sum()),
    ),
    "tokens in the loss": (
        "valid tokens of those rows",
        lambda er, m: int(m[er.kept].sum()),
    ),
    "groups filtered": (
        "prompts whose answers all scored the same, dropped before batching",
        lambda er, m: ", ".join(er.filtered) or "none",
    ),
    "std level": (
        "where the divisor of A = (r - mean) / std comes from (none: r - mean)",
        lambda er, m: er.era.std_level,
    ),
    "max |A|": ("largest advantage on a token in the loss", _max_abs),
    "mean |A|": ("mean |advantage| over the tokens in the loss", _mean_abs),
    "A spread": ("std of the advantages over the tokens in the loss", _spread),
    "KL term": ("beta x the aggregated KL estimate (0: no KL)", lambda er, m: er.kl_term),
    "policy term": ("the aggregated policy-gradient term", lambda er, m: er.policy_term),
    "loss": ("the policy-update loss at the first update", lambda er, m: er.loss),
    "denominator": ("the aggregation and its divisor", lambda er, m: er.denominator),
    "clip (low, high)": (
        "the ratio clip range",
        lambda er, m: f"{er.clip[0]:g}, {er.clip[1]:g}",
    ),
    "sum |gradient|": (
        "sum over tokens of |d loss / d log pi_t|",
        lambda er, m: float(er.grad.abs().sum()),
    ),
}

#: page key -> the quantities that are that page's number
PAGE_QUANTITIES: dict[str, tuple[str, ...]] = {
    "samples": ("answers in the loss", "tokens in the loss", "groups filtered"),
    "rewards": ("std level", "groups filtered", "mean |A|", "max |A|"),
    "kl": ("KL term", "loss", "denominator"),
    "advantages": ("std level", "max |A|", "mean |A|", "A spread", "groups filtered"),
    "local_global": ("std level", "max |A|", "A spread", "groups filtered"),
    "normalisation": (
        "std level",
        "groups filtered",
        "answers in the loss",
        "mean |A|",
        "A spread",
    ),
    "sensitivity": ("A spread", "loss", "sum |gradient|"),
    "update": (
        "loss",
        "policy term",
        "KL term",
        "denominator",
        "clip (low, high)",
        "sum |gradient|",
    ),
    "frameworks": ("loss", "policy term", "KL term", "denominator"),
}

#: page key -> per-answer columns of ``EraDiff.samples`` (without the era tag)
PAGE_ANSWERS: dict[str, tuple[str, ...]] = {
    "samples": ("filtered",),
    "rewards": ("A",),
    "kl": ("KL share",),
    "advantages": ("A",),
    "local_global": ("A",),
    "normalisation": ("A", "filtered"),
    "sensitivity": ("A",),
    "update": ("loss share", "gradient"),
    "frameworks": ("A", "loss share"),
}


def page_numbers(diff: EraDiff, page: str, mask: torch.Tensor) -> pd.DataFrame:
    """The page's key numbers under each recipe in ``diff``.

    Args:
        diff: ``diff_eras`` on the page's batch.
        page: a key of ``PAGE_QUANTITIES``.
        mask: (B, T) the batch's response mask.

    Returns:
        One row per quantity: "quantity", one column per recipe label, "what it is".

    Raises:
        KeyError: a page without era numbers.
    """
    mask = torch.as_tensor(mask, dtype=F64)
    rows = []
    for name in PAGE_QUANTITIES[page]:
        meaning, read = QUANTITIES[name]
        row: dict[str, object] = {"quantity": name}
        for er in diff.runs.values():
            value = read(er, mask)
            row[er.era.label] = f"{value:.4g}" if isinstance(value, float) else str(value)
        row["what it is"] = meaning
        rows.append(row)
    return pd.DataFrame(rows)


def page_answers(diff: EraDiff, page: str) -> pd.DataFrame:
    """The per-answer columns the page looks at, for each recipe side by side.

    Returns:
        sample, prompt, score, then "<column> [<recipe tag>]" for each column and recipe.
    """
    cols = ["sample", "prompt", "score"]
    for column in PAGE_ANSWERS[page]:
        cols += [f"{column} [{er.era.short}]" for er in diff.runs.values()]
    return diff.samples[[c for c in cols if c in diff.samples]]


def framework_losses(
    batch: Batch,
    prompts: Sequence[str] | None = None,
    frameworks: Sequence[str] | None = None,
    eras: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Each recipe's loss, KL term and answers in the loss in every dialect on the same batch.

    Args:
        batch: as ``diff_eras`` takes it.
        prompts: (P,) display names of the groups.
        frameworks: the dialects, one row each (default: every registered one).
        eras: recipe keys (default every record).

    Returns:
        One row per dialect: "dialect", then "loss [tag]", "KL term [tag]", "answers [tag]" per
        recipe, and "error" where a dialect could not run a recipe (the message).
    """
    rows = []
    for fw in frameworks or tuple(dialects.DIALECTS):
        row: dict[str, object] = {"dialect": fw}
        try:
            diff = diff_eras(batch, fw, prompts, eras=eras)
        except ValueError as err:
            row["error"] = str(err)
            rows.append(row)
            continue
        for er in diff.runs.values():
            row[f"loss [{er.era.short}]"] = er.loss
            row[f"KL term [{er.era.short}]"] = er.kl_term
            row[f"answers [{er.era.short}]"] = int(er.kept.sum())
        rows.append(row)
    return pd.DataFrame(rows)
