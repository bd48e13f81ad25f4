"""The editable reward table of the Local vs global page: its starting rows and a strict parser."""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import (
    EXAMPLE_PROMPT,
    EXAMPLE_REWARDS,
    LOW_VARIANCE_PROMPT,
    LOW_VARIANCE_REWARDS,
)
from roll_viz.core.pipeline import dialects


def default_reward_table() -> pd.DataFrame:
    """The editable reward table's starting rows: the seed example plus a low-variance prompt.

    Returns:
        DataFrame with columns ``prompt`` (str) and ``reward`` (float), 6 rows.
    """
    rows = [(EXAMPLE_PROMPT, f"{r:g}") for r in EXAMPLE_REWARDS]
    rows += [(LOW_VARIANCE_PROMPT, f"{r:g}") for r in LOW_VARIANCE_REWARDS]
    return pd.DataFrame(rows, columns=["prompt", "reward"])


# ---------------------------------------------------------------------------------------------
# Editable reward table -> scores and groups
# ---------------------------------------------------------------------------------------------

#: What each dialect does with a prompt that has a single sample (T3 in docs/reference-values.md).
SINGLETON_BEHAVIOUR: dict[str, str] = {
    name: dialect.SINGLETON_BEHAVIOUR for name, dialect in dialects.DIALECTS.items()
}


class RewardTableError(ValueError):
    """A cell of the editable reward table cannot be read; the message names the row."""


@dataclass(frozen=True)
class RewardTable:
    """The editable reward table, parsed.

    Attributes:
        scores: (B,) float64 rewards, in table order (blank rows dropped).
        group_ids: (B,) long prompt index of each row, by first appearance (0..P-1).
        prompts: (P,) prompt text of each group.
        rows: (B,) 1-based row number in the editor of each kept row (for messages).
        singletons: prompts that have only one sample.
        messages: plain-language warnings for the page (singleton groups, constant groups).
    """

    scores: Tensor
    group_ids: Tensor
    prompts: tuple[str, ...]
    rows: tuple[int, ...]
    singletons: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()


def _is_blank(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


#: Bounds of the editable table (it is user input that sets an amount of work).
MAX_TABLE_ROWS = 200
MAX_TABLE_PROMPT_CHARS = 100
MAX_ENCODED_CHARS = 6000  # a link's table (about 200 short rows)
MAX_DECODED_BYTES = 64_000


def encode_table(table: pd.DataFrame) -> str:
    """The (prompt, reward) rows as a compact URL-safe string (JSON, zlib, base64url).

    The reward cells travel as typed (text), so a shared link reproduces exactly what was
    typed, including cells the parser refuses.
    """
    rows = [
        ["" if _is_blank(p) else str(p), "" if _is_blank(r) else str(r)]
        for p, r in zip(table["prompt"], table["reward"], strict=True)
    ][:MAX_TABLE_ROWS]
    packed = zlib.compress(json.dumps(rows, separators=(",", ":")).encode("utf-8"), 9)
    return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def decode_table(encoded: str) -> pd.DataFrame:
    """The table a link carries (``encode_table``'s inverse). Plain JSON: nothing is executed.

    Raises:
        RewardTableError: the text is not a table this app wrote, or is too large.
    """
    if len(encoded) > MAX_ENCODED_CHARS:
        raise RewardTableError(f"the table in the link is longer than {MAX_ENCODED_CHARS} chars")
    try:
        packed = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        raw = zlib.decompressobj().decompress(packed, MAX_DECODED_BYTES)
        rows = json.loads(raw.decode("utf-8"))
    except (ValueError, zlib.error, UnicodeDecodeError):
        raise RewardTableError("the table in the link cannot be read") from None
    if not isinstance(rows, list) or not all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(c, str) for c in r) for r in rows
    ):
        raise RewardTableError("the table in the link is not a list of (prompt, reward) rows")
    if len(rows) > MAX_TABLE_ROWS:
        raise RewardTableError(f"the table in the link has more than {MAX_TABLE_ROWS} rows")
    return pd.DataFrame(rows, columns=["prompt", "reward"])


def read_number(cell: object) -> tuple[float, str]:
    """A reward cell read as Python reads a number: ``float(text)`` exactly, nothing guessed.

    ``1e308``, ``1e-3``, ``-2.5``, ``2.5e1`` and ``1_000`` read as Python reads them; a decimal
    comma (``1,5``), words, NaN and infinities are refused with a reason, never turned into
    another number.

    Args:
        cell: the cell as the editor returns it (text, a number or None).

    Returns:
        (value, "") when the cell is a finite number, else (nan, why it could not be read).
    """
    if _is_blank(cell):
        return math.nan, "the reward is empty (type a number such as 8.2)"
    typed = str(cell).strip()
    if isinstance(cell, bool):
        return math.nan, f"the reward {typed!r} is not a number (type e.g. 8.2)"
    if "," in typed:
        return math.nan, f"the reward {typed[:40]!r} uses a comma: write a decimal point (1.5)"
    try:
        value = float(cell) if isinstance(cell, int | float) else float(typed)
    except (TypeError, ValueError, OverflowError):
        return math.nan, f"the reward {typed[:40]!r} is not a number (type e.g. 8.2)"
    if not math.isfinite(value):
        return math.nan, f"the reward {typed[:40]!r} is not a finite number"
    return value, ""


def parse_reward_table(table: pd.DataFrame) -> RewardTable:
    """Read an editable (prompt, reward) table into scores and group ids.

    Rows whose prompt and reward are both blank are dropped (the editor's empty new rows).
    Rows of one prompt need not be contiguous; groups are numbered by first appearance.

    Args:
        table: DataFrame with columns ``prompt`` and ``reward``, one row per sampled answer.

    Returns:
        The parsed table; ``messages`` explains singleton and zero-variance groups.

    Raises:
        RewardTableError: a missing column, more than MAX_TABLE_ROWS rows, an empty prompt or
            reward on a filled row, a reward that is not a finite number (as ``read_number``
            reads it), or no rows at all. The message names every row it could not read.
    """
    missing = [c for c in ("prompt", "reward") if c not in table.columns]
    if missing:
        raise RewardTableError(f"the table needs the column(s) {', '.join(missing)}")
    if len(table) > MAX_TABLE_ROWS:
        raise RewardTableError(
            f"the table has {len(table)} rows; at most {MAX_TABLE_ROWS} are read (delete some)"
        )
    scores: list[float] = []
    prompts: list[str] = []
    rows: list[int] = []
    problems: list[str] = []
    for i, (prompt, reward) in enumerate(zip(table["prompt"], table["reward"], strict=True)):
        row = i + 1
        if _is_blank(prompt) and _is_blank(reward):
            continue
        if _is_blank(prompt):
            problems.append(f"row {row}: the prompt is empty (type any name for the prompt)")
            continue
        if len(str(prompt)) > MAX_TABLE_PROMPT_CHARS:
            problems.append(f"row {row}: the prompt is longer than {MAX_TABLE_PROMPT_CHARS} chars")
            continue
        value, problem = read_number(reward)
        if problem:
            problems.append(f"row {row}: {problem}")
            continue
        scores.append(value)
        prompts.append(str(prompt).strip())
        rows.append(row)
    if problems:
        raise RewardTableError("; ".join(problems))
    if not scores:
        raise RewardTableError("the table is empty: add at least two rows for one prompt")
    labels = tuple(dict.fromkeys(prompts))
    index = {p: k for k, p in enumerate(labels)}
    group_ids = torch.tensor([index[p] for p in prompts], dtype=torch.long)
    score_t = torch.tensor(scores, dtype=torch.float64)
    counts = torch.bincount(group_ids, minlength=len(labels))
    singletons = tuple(p for p, n in zip(labels, counts.tolist(), strict=True) if n == 1)
    messages: list[str] = []
    if singletons:
        names = ", ".join(repr(p) for p in singletons)
        how = " ".join(f"{fw}: {SINGLETON_BEHAVIOUR[fw]}" for fw in SINGLETON_BEHAVIOUR)
        messages.append(
            f"{names} has only one sample, so its group std is undefined and the local "
            f"advantage is left blank (NaN). What the dialects do: {how}"
        )
    for k, p in enumerate(labels):
        member = score_t[group_ids == k]
        if member.numel() > 1 and bool((member == member[0]).all()):
            messages.append(
                f"every reward of {p!r} is equal, so its local advantages are exactly 0: the "
                "prompt gives no learning signal under group normalization."
            )
    return RewardTable(
        scores=score_t,
        group_ids=group_ids,
        prompts=labels,
        rows=tuple(rows),
        singletons=singletons,
        messages=tuple(messages),
    )


# ---------------------------------------------------------------------------------------------
# Local (per-prompt group) vs global (whole batch) normalization
# ---------------------------------------------------------------------------------------------

#: ROLL configs (its own key names) for the two normalizations, on response-level rewards.
LOCAL_CONFIG: dict[str, object] = {
    "adv_estimator": "reinforce",
    "norm_mean_type": "group",
    "norm_std_type": "group",
    "gamma": 1.0,
    "add_token_level_kl": False,
}
GLOBAL_CONFIG: dict[str, object] = {
    **LOCAL_CONFIG,
    "norm_mean_type": "batch",
    "norm_std_type": "batch",
}
