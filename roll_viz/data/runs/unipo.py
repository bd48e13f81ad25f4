"""UNIPO's canonical run format (``poloclub/unipo`` ``docs/canonical_schema.json``), JSON and JSONL.

JSON form: ``{"header": {...}, "blueprint"?: ..., "entries": [...]}``. JSONL form: the first line
is ``{"type": "header", ...}``, each later line ``{"type": "step", ...}`` (run-formats.md 3.5).

An entry (one model update): ``step``, ``is_first_step_after_rollout_phase``, ``metrics``
(``policy_objective`` and ``reward`` required), optional ``prompts[]`` =
``{prompt, responses[{id, reward, advantage?, response_text?, response_length?, tokens?}]}``.
``tokens`` requires ``ids`` and may carry ``strings``, ``log_probs``, ``ref_log_probs``,
``old_log_probs``, ``values``, ``advantages``, ``returns``, ``token_kl``, ``rewards``,
``token_objective``, ``token_loss``, ``prob`` (converted to log-probs when ``log_probs`` is
absent, as UNIPO's ``build_data.py`` does). Groups are the prompt's index in its entry. Entries
without prompts give a step with metrics only. A second entry with the same ``step`` (mini-batch
updates) keeps its metrics out and its prompts are skipped with a warning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from roll_viz.data.runs.json_document import read_json_document
from roll_viz.data.runs.json_numbers import Unreadable
from roll_viz.data.runs.parse import (
    Problems,
    RunFormatError,
    get_int,
    get_number,
    get_numbers,
    get_text,
    is_number,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "unipo"
LABEL = "UNIPO canonical JSON"
FORMAT_JSONL = "unipo-jsonl"
LABEL_JSONL = "UNIPO canonical JSONL"
SCORE_KIND = "reward (UNIPO response 'reward')"
NOTES = ("groups: the prompt's position in its step entry",)
#: UNIPO token series -> roll-viz names (the rest are not used by roll-viz)
SERIES = {
    "log_probs": "logprobs",
    "ref_log_probs": "ref_logprobs",
    "rewards": "token_rewards",
    "advantages": "token_advantages",
}


def matches_document(doc: Any) -> bool:
    """A JSON document with UNIPO's ``header`` and ``entries``."""
    return isinstance(doc, dict) and isinstance(doc.get("entries"), list) and "header" in doc


def matches_jsonl(first: Any) -> bool:
    """A JSONL file whose first line is UNIPO's header."""
    return isinstance(first, dict) and first.get("type") == "header"


def _metrics(entry: dict, file: str, line: int | None, where: str) -> dict[str, float]:
    """The entry's finite metrics (NaN/inf left out); an unreadable number skips the entry."""
    raw = entry.get("metrics")
    if not isinstance(raw, dict):
        return {}
    for key, v in raw.items():
        if isinstance(v, Unreadable):
            raise RunFormatError(file, line, f"{where}metrics.{key}", v.why)
    return {str(k): float(v) for k, v in raw.items() if is_number(v) and math.isfinite(float(v))}


def entry_rows(entry: Any, file: str, line: int | None, where: str) -> list[Row]:
    """One step entry -> rows (or a metrics-only placeholder)."""
    if not isinstance(entry, dict):
        raise RunFormatError(file, line, where or None, "expected an object (a step entry)")
    step = get_int(entry, "step", file, line)
    metrics = _metrics(entry, file, line, where)
    prompts = entry.get("prompts") or []
    if not isinstance(prompts, list):
        raise RunFormatError(file, line, f"{where}prompts", "expected a list")
    out: list[Row] = []
    for p, prompt in enumerate(prompts):
        at = f"{where}prompts[{p}]"
        if not isinstance(prompt, dict):
            raise RunFormatError(file, line, at, "expected an object")
        text = get_text(prompt, "prompt", file, line, required=False)
        responses = prompt.get("responses")
        if not isinstance(responses, list):
            raise RunFormatError(file, line, f"{at}.responses", "missing or not a list")
        for r, response in enumerate(responses):
            out.append(_response_row(response, step, text, p, file, line, f"{at}.responses[{r}]"))
    if not out:
        return [Row(step=step, prompt="", response="", score=math.nan, empty=True, metrics=metrics)]
    out[0].metrics = metrics
    return out


def _response_row(
    response: Any, step: int, prompt: str, p: int, file: str, line: int | None, at: str
) -> Row:
    if not isinstance(response, dict):
        raise RunFormatError(file, line, at, "expected an object")
    try:
        score = get_number(response, "reward", file, line)
        advantage = get_number(response, "advantage", file, line, required=False)
        text = get_text(response, "response_text", file, line, required=False)
        tokens_obj = response.get("tokens")
        tokens = token_ids = None
        series: dict[str, list[float]] = {}
        if tokens_obj is not None:
            if not isinstance(tokens_obj, dict):
                raise RunFormatError(file, line, "tokens", "expected an object")
            ids = get_numbers(tokens_obj, "ids", file, line)
            if ids is None:
                raise RunFormatError(file, line, "tokens.ids", "missing (required by UNIPO)")
            if not all(float(i).is_integer() and i >= 0 for i in ids):
                raise RunFormatError(file, line, "tokens.ids", "expected non-negative integers")
            token_ids = [int(i) for i in ids]
            strings = tokens_obj.get("strings")
            if strings is not None:
                if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
                    raise RunFormatError(file, line, "tokens.strings", "expected strings")
                tokens = list(strings)
            for key, name in SERIES.items():
                values = get_numbers(tokens_obj, key, file, line)
                if values is not None:
                    series[name] = values
            if "logprobs" not in series:
                probs = get_numbers(tokens_obj, "prob", file, line)
                if probs is not None:
                    if any(x <= 0 or x > 1 for x in probs):
                        raise RunFormatError(file, line, "tokens.prob", "must be in (0, 1]")
                    series["logprobs"] = [math.log(x) for x in probs]
            row = Row(step, prompt, text, score, f"p{p}", advantage, {}, tokens, token_ids, series)
            _check(row, file, line)
            return row
        return Row(
            step=step, prompt=prompt, response=text, score=score, group=f"p{p}", advantage=advantage
        )
    except RunFormatError as err:
        raise RunFormatError(file, line, f"{at}.{err.field}", err.message) from None


def _check(row: Row, file: str, line: int | None) -> None:
    n = len(row.token_ids)
    unipo_name = {v: k for k, v in SERIES.items()}
    unipo_name["logprobs"] = "log_probs (or prob)"
    for name, values in [("strings", row.tokens), *row.series.items()]:
        name = unipo_name.get(name, name)
        if values is not None and len(values) != n:
            raise RunFormatError(
                file, line, f"tokens.{name}", f"ragged token arrays: {len(values)}, ids has {n}"
            )


class _Dedup:
    """Skip a repeated step number (a mini-batch update entry), keeping the first."""

    def __init__(self, problems: Problems):
        self.seen: set[int] = set()
        self.problems = problems

    def keep(self, rows: list[Row], file: str, line: int | None) -> list[Row] | None:
        step = rows[0].step
        if step in self.seen:
            self.problems.add(
                RunFormatError(
                    file, line, "step", f"step {step} appears again (mini-batch update?): skipped"
                )
            )
            return None
        self.seen.add(step)
        return rows


def rows_jsonl(files: list[Path], problems: Problems, locations=None):
    """Rows of UNIPO JSONL files (header lines are skipped)."""
    for path in files:
        dedup = _Dedup(problems)

        def convert(value: Any, file: str, line: int, dedup=dedup) -> list[Row] | None:
            obj = require_object(value, file, line)
            if obj.get("type") == "header":
                return None
            if obj.get("type") not in (None, "step"):
                raise RunFormatError(file, line, "type", f"unknown line type {obj.get('type')!r}")
            return dedup.keep(entry_rows(obj, file, line, ""), file, line)

        yield from rows_from_jsonl([path], problems, convert, locations)


def rows_document(files: list[Path], problems: Problems, locations=None):
    """Rows of UNIPO JSON documents (each capped at ``MAX_JSON_BYTES``)."""
    for path in files:
        if locations is not None and str(path) not in locations:
            continue
        doc = read_json_document(path)
        if not matches_document(doc):
            raise RunFormatError(path, None, "entries", "not a UNIPO document (header, entries)")
        dedup = _Dedup(problems)
        name = str(path)
        for i, entry in enumerate(doc["entries"]):
            try:
                out = dedup.keep(entry_rows(entry, name, None, f"entries[{i}]."), name, None)
            except RunFormatError as err:
                problems.add(err)
                continue
            for row in out or []:
                row.file, row.line = name, i + 1
                yield row


def header(path: Path, jsonl: bool) -> dict:
    """The run's UNIPO header (algorithm, task, model_name, hparams, ...)."""
    if jsonl:
        with open(path, "rb") as handle:
            first = handle.readline()
        try:
            obj = json.loads(first.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError and JSONDecodeError
            return {}
        return {k: v for k, v in obj.items() if k != "type"} if isinstance(obj, dict) else {}
    doc = read_json_document(path)
    return doc.get("header", {}) if isinstance(doc, dict) else {}


def header_pairs(path: Path) -> tuple:
    """The UNIPO JSON document's header as sorted (key, value) pairs (the registry's hook)."""
    return tuple(sorted((str(k), v) for k, v in header(path, jsonl=False).items()))


def header_pairs_jsonl(path: Path) -> tuple:
    """The UNIPO JSONL header line as sorted (key, value) pairs (the registry's hook)."""
    return tuple(sorted((str(k), v) for k, v in header(path, jsonl=True).items()))
