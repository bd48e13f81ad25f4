"""roll-viz's own training runs: the JSONL of ``roll_viz.lm.runfile`` (schema below).

Schema ``roll-viz.train/1`` (documented in ``roll_viz/lm/train.py``): line 1 is
``{"type": "header", "schema": "roll-viz.train/1", "settings": {...}, "model": ..., ...}``; then
one ``{"type": "step", "step": k, "metrics": {...}, "samples"?: {...}}`` per step; optionally a
last ``{"type": "end", ...}``. ``samples`` (only some steps) holds ``prompts`` [P],
``group_ids`` [B], ``responses`` [B], ``rewards`` [B] (raw), ``finish`` [B], and per-token lists
[B][n_b] (4 decimals): ``tokens``, ``token_ids``, ``logprobs``, ``ref_logprobs``, ``exact_kl``,
``entropy``, ``advantages`` (what the update used). A step without samples is a metrics-only
step. Metrics are plain numbers; nested dicts (``update``, ``seconds``) are flattened as
``update/<key>``, lists are left out.

The schema string is written out here (not imported) so this reader never loads the training
code; a test checks it equals ``roll_viz.lm.runfile.SCHEMA``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from roll_viz.data.runs.json_numbers import Unreadable
from roll_viz.data.runs.parse import (
    Problems,
    RunFormatError,
    get_numbers,
    get_strings,
    is_number,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "rollviz"
LABEL = "roll-viz training run JSONL (roll_viz.lm.train)"
SCHEMA_PREFIX = "roll-viz.train/"
SCHEMA = "roll-viz.train/1"
SCORE_KIND = "raw reward (the run's reward function)"
NOTES = (
    "token advantages are the ones the update used; sequence advantages are recomputed",
    "token values are rounded to 4 decimals in the file",
)
_SERIES = {
    "logprobs": "logprobs",
    "ref_logprobs": "ref_logprobs",
    "entropy": "entropy",
    "exact_kl": "exact_kl",
    "advantages": "token_advantages",
}


def matches(first: Any) -> bool:
    """A header line with a roll-viz training schema."""
    return (
        isinstance(first, dict)
        and first.get("type") == "header"
        and str(first.get("schema", "")).startswith(SCHEMA_PREFIX)
    )


def flat_metrics(metrics: Any, file: str = "", line: int | None = None) -> dict[str, float]:
    """Numbers of a step's metrics; one level of nested dicts flattened as ``outer/inner``.

    NaN/inf and non-numbers are left out; a number a float cannot hold is a RunFormatError
    naming it (the step's line is skipped).
    """
    out: dict[str, float] = {}
    if not isinstance(metrics, dict):
        return out
    for key, value in metrics.items():
        pairs = value.items() if isinstance(value, dict) else [(None, value)]
        for inner, v in pairs:
            name = str(key) if inner is None else f"{key}/{inner}"
            if isinstance(v, Unreadable):
                raise RunFormatError(file, line, f"metrics.{name.replace('/', '.')}", v.why)
            if is_number(v) and math.isfinite(float(v)):
                out[name] = float(v)
    return out


def _unreadable(value: Any, file: str, line: int, field: str) -> None:
    """Raise naming ``field`` when ``value`` is a number a float cannot hold."""
    if isinstance(value, Unreadable):
        raise RunFormatError(file, line, field, value.why)


def _column(samples: dict, key: str, n: int, file: str, line: int) -> list:
    value = samples.get(key)
    if not isinstance(value, list) or len(value) != n:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise RunFormatError(file, line, f"samples.{key}", f"expected {n} entries, got {got}")
    return value


def convert(value: Any, file: str, line: int) -> list[Row] | None:
    """One run-file line -> rows (header/end lines give none)."""
    obj = require_object(value, file, line)
    kind = obj.get("type")
    if kind == "header":
        if obj.get("schema") != SCHEMA:
            raise RunFormatError(file, line, "schema", f"{obj.get('schema')!r}, not {SCHEMA}")
        return None
    if kind == "end":
        return None
    if kind != "step":
        raise RunFormatError(file, line, "type", f"unknown line type {kind!r}")
    step = obj.get("step")
    _unreadable(step, file, line, "step")
    if not (is_number(step) and float(step).is_integer()):
        raise RunFormatError(file, line, "step", f"expected an integer, got {step!r:.40}")
    step = int(step)
    metrics = flat_metrics(obj.get("metrics"), file, line)
    samples = obj.get("samples")
    if samples is None:
        return [Row(step=step, prompt="", response="", score=math.nan, empty=True, metrics=metrics)]
    if not isinstance(samples, dict):
        raise RunFormatError(file, line, "samples", "expected an object")
    prompts = samples.get("prompts")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise RunFormatError(file, line, "samples.prompts", "expected a list of strings")
    gids = samples.get("group_ids")
    if not isinstance(gids, list):
        raise RunFormatError(file, line, "samples.group_ids", "expected a list of integers")
    n = len(gids)
    responses = _column(samples, "responses", n, file, line)
    rewards = _column(samples, "rewards", n, file, line)
    rows = []
    for b in range(n):
        g = gids[b]
        _unreadable(g, file, line, f"samples.group_ids[{b}]")
        _unreadable(rewards[b], file, line, f"samples.rewards[{b}]")
        if not (is_number(g) and float(g).is_integer() and 0 <= g < len(prompts)):
            raise RunFormatError(file, line, f"samples.group_ids[{b}]", f"bad prompt index {g!r}")
        if not (is_number(rewards[b]) and math.isfinite(float(rewards[b]))):
            raise RunFormatError(file, line, f"samples.rewards[{b}]", "expected a finite number")
        if not isinstance(responses[b], str):
            raise RunFormatError(file, line, f"samples.responses[{b}]", "expected a string")
        per = {
            key: samples[key][b]
            for key in samples
            if isinstance(samples[key], list) and len(samples[key]) == n
        }
        tokens = get_strings(per, "tokens", file, line)
        ids = get_numbers(per, "token_ids", file, line)
        series = {}
        for key, name in _SERIES.items():
            values = get_numbers(per, key, file, line)
            if values is not None:
                series[name] = values
        row = Row(
            step=step,
            prompt=prompts[int(g)],
            response=responses[b],
            score=float(rewards[b]),
            group=f"p{int(g)}",
            tokens=tokens,
            token_ids=None if ids is None else [int(i) for i in ids],
            series=series,
        )
        lengths = {len(v) for v in [tokens, ids, *series.values()] if v is not None}
        if len(lengths) > 1:
            raise RunFormatError(
                file, line, f"samples[{b}]", f"ragged token arrays: lengths {sorted(lengths)}"
            )
        rows.append(row)
    if rows:
        rows[0].metrics = metrics
    return rows or [
        Row(step=step, prompt="", response="", score=math.nan, empty=True, metrics=metrics)
    ]


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of roll-viz run files (see ``base.rows_from_jsonl``)."""
    return rows_from_jsonl(files, problems, convert, locations)


def header(path: Path) -> tuple:
    """(key, value) pairs of the run's header: model, label, settings (sorted)."""
    with open(path, "rb") as handle:
        first = handle.readline()
    try:
        obj = json.loads(first.decode("utf-8"))
    except ValueError:
        return ()
    if not isinstance(obj, dict):
        return ()
    return tuple(sorted((str(k), v) for k, v in obj.items() if k != "type"))
