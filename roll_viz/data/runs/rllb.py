"""RL Logging Board JSONL (what ROLL's ``save_logging_board_dir`` writes; run-formats.md 3.2b, 3.6).

One JSON object per sample: ``step`` (required), ``prompt``, ``response``, ``response_tokens``,
``logprobs``, ``ref_logprobs``, ``log_probs2``, ``old_log_probs2_entropy``, ``new_response_mask``,
``values``, ``token_rewards``, ``reward``. Conventions an importer must know:

- token lists have the **leading** masked positions removed but keep trailing padding; the
  valid positions are the first ``sum(new_response_mask)`` (or ``len(response_tokens)`` when the
  mask is absent). ``values`` and ``token_rewards`` are full response width; both are aligned at
  the first response token, so the same first-n positions are taken from every list;
- ``values`` is a copy of ``token_rewards`` in ROLL's writer (it writes ``token_level_rewards``
  twice), not a critic: equal to ``token_rewards`` it is ignored; when it differs (a tool that
  logs a real critic, e.g. OpenRLHF PR #658) it is read as critic values;
- ``reward`` is the **normalised** response-level reward (after ROLL's group/batch norm), not
  the raw score;
- the board's own "kl" is ``exp(logp - ref) - 1 - (logp - ref)``: the k3 shape with the ratio's
  sign flipped against the usual k3 ``exp(ref - logp) - (ref - logp) - 1``. roll-viz computes
  KL from the two log-prob series with its own estimators; ``board_kl`` reproduces the board's;
- there is no group id: samples are grouped by identical ``prompt`` text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from roll_viz.data.runs.fast_lines import FastList
from roll_viz.data.runs.parse import (
    MAX_TOKENS_PER_ROW,
    Problems,
    RunFormatError,
    get_int,
    get_number,
    get_numbers,
    get_strings,
    get_text,
    no_bools_in_line,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "rllb"
LABEL = "RL Logging Board JSONL (ROLL save_logging_board_dir)"
SCORE_KIND = "normalized reward (ROLL board 'reward', after group/batch norm)"
NOTES = (
    "groups: identical prompt text (the board has no group id)",
    "'values' equal to 'token_rewards' is ROLL's copy (not a critic): ignored; "
    "different 'values' are read as critic values",
    "the board's 'kl' is exp(logp-ref)-1-(logp-ref), k3 with the ratio's sign flipped; "
    "roll-viz computes KL from logprobs and ref_logprobs with the usual signs",
    "reward is the normalised response-level reward, not the raw score",
)
KEYS = ("step", "prompt", "response", "response_tokens", "logprobs", "ref_logprobs", "reward")
_MARKERS = ("response_tokens", "logprobs", "token_rewards", "ref_logprobs", "new_response_mask")


def matches(first: Any) -> bool:
    """A first line that looks like a board row (step plus token series, no column lists)."""
    if not isinstance(first, dict) or "step" not in first:
        return False
    if not any(key in first for key in _MARKERS):
        return False
    return not isinstance(first.get("reward"), list)


def board_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """The RL Logging Board's per-token "kl": exp(d) - 1 - d with d = logp - ref.

    Args:
        logprobs: (B, T) policy log-probs.
        ref_logprobs: (B, T) reference log-probs.

    Returns:
        (B, T) the board's value (the usual k3 is exp(-d) - 1 + d).
    """
    d = logprobs - ref_logprobs
    return torch.exp(d) - 1 - d


def mask_length(obj: dict, key: str, file: str, line: int) -> int | None:
    """Valid positions of a 0/1 mask list whose 1s come first (None when absent).

    On the fast path (``fast_lines``) simdjson's int64 buffer of the list is counted. On a
    line without JSON booleans the list is only counted (``count(1)``, ``count(0)`` and
    the first 0, each a C pass on small ints), with no conversion; any other list goes through
    ``get_numbers`` and its checks, so the messages are the same on every path.

    Raises:
        RunFormatError: not a list of numbers, a value other than 0/1, or a 1 after a 0.
    """
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, FastList):  # a line of the fast path (SlowLine if not a plain mask)
        return value.mask_ones(MAX_TOKENS_PER_ROW)
    if isinstance(value, list) and len(value) <= MAX_TOKENS_PER_ROW and no_bools_in_line():
        ones, zeros = value.count(1), value.count(0)
        if ones + zeros == len(value) and (not zeros or value.index(0) == ones):
            return ones
    mask = get_numbers(obj, key, file, line)  # refuses what is not a list of numbers
    bad = mask[(mask != 0.0) & (mask != 1.0)]
    if bad.size:
        raise RunFormatError(file, line, key, f"must be 0/1, got {bad[0]:g}")
    n = int(mask.sum())
    if mask[n:].any() or not mask[:n].all():
        raise RunFormatError(file, line, key, "valid positions must come first (1s then 0s)")
    return n


def convert(value: Any, file: str, line: int) -> Row:
    """One board line -> Row (valid positions only)."""
    obj = require_object(value, file, line)
    step = get_int(obj, "step", file, line)
    if "reward" not in obj and "token_rewards" in obj:
        trs = get_numbers(obj, "token_rewards", file, line)
        score = float(trs.sum()) if trs is not None else 0.0
    else:
        score = get_number(obj, "reward", file, line)
    tokens = get_strings(obj, "response_tokens", file, line)
    n = mask_length(obj, "new_response_mask", file, line)
    if n is None and tokens is not None:
        n = len(tokens)
    elif n is None:
        lp = get_numbers(obj, "logprobs", file, line)
        n = len(lp) if lp is not None else None
    series = {}
    if n is not None:
        for key, name in (
            ("logprobs", "logprobs"),
            ("ref_logprobs", "ref_logprobs"),
            ("token_rewards", "token_rewards"),
            ("old_log_probs2_entropy", "entropy"),
        ):
            values = get_numbers(obj, key, file, line)
            if values is None:
                continue
            if len(values) < n:
                raise RunFormatError(
                    file,
                    line,
                    key,
                    f"ragged token arrays: {len(values)} positions, expected at least {n} "
                    "(valid tokens)",
                )
            series[name] = values[:n]
        values = get_numbers(obj, "values", file, line)
        if values is not None:
            if len(values) < n:
                raise RunFormatError(
                    file,
                    line,
                    "values",
                    f"ragged token arrays: {len(values)} positions, "
                    f"expected at least {n} (valid tokens)",
                )
            same = "token_rewards" in series and (values[:n] == series["token_rewards"]).all()
            if not same:
                series["values"] = values[:n]
        if tokens is not None and len(tokens) < n:
            raise RunFormatError(
                file,
                line,
                "response_tokens",
                f"ragged token arrays: {len(tokens)} tokens, expected {n} (valid positions)",
            )
        if tokens is not None:
            tokens = tokens[:n]
    return Row(
        step=step,
        prompt=get_text(obj, "prompt", file, line, required=False),
        response=get_text(obj, "response", file, line, required=False),
        score=score,
        tokens=tokens,
        series=series,
    )


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of board files (see ``base.rows_from_jsonl``; on its fast path first)."""
    return rows_from_jsonl(files, problems, convert, locations, fast=True)
