"""A plain table of samples: CSV (header row) or JSONL with ``prompt``, ``response``, ``reward``.

Optional ``group`` (any string or integer; default: identical prompt text) and ``step`` (default
0). Other numeric fields are kept as extra columns; ``advantage`` is read as the framework's
sequence-level advantage when present. Aliases accepted: ``completion``/``output`` for
``response``, ``score`` for ``reward``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from roll_viz.data.runs.parse import (
    MAX_LINE_BYTES,
    Problems,
    RunFormatError,
    get_int,
    get_number,
    number_columns,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "plain"
LABEL = "plain table (prompt, response, reward[, group, step])"
FORMAT_CSV = "plain-csv"
LABEL_CSV = "plain CSV (prompt, response, reward[, group, step])"
SCORE_KIND = "reward (as given)"
NOTES = ("no token ids, log-probs or advantages unless given",)
_RESPONSE = ("response", "completion", "output")
_REWARD = ("reward", "score")
_KNOWN = ("prompt", "group", "step", "advantage", *_RESPONSE, *_REWARD)


def _pick(obj: dict, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in obj), None)


def matches(first: Any) -> bool:
    """An object with a prompt, a response and a reward (under any accepted alias)."""
    return (
        isinstance(first, dict)
        and "prompt" in first
        and _pick(first, _RESPONSE) is not None
        and _pick(first, _REWARD) is not None
    )


def matches_header(names: list[str]) -> bool:
    """A CSV header with prompt, response and reward columns."""
    return matches(dict.fromkeys(names, ""))


def convert(value: Any, file: str, line: int) -> Row:
    """One object (a JSONL line or a CSV row as strings) -> Row."""
    obj = require_object(value, file, line)
    response_key = _pick(obj, _RESPONSE) or "response"
    reward_key = _pick(obj, _REWARD) or "reward"
    for key in ("prompt", response_key):
        if key not in obj:
            raise RunFormatError(file, line, key, "missing")
        if not isinstance(obj[key], str):
            raise RunFormatError(file, line, key, f"expected a string, got {obj[key]!r:.40}")
    group = obj.get("group")
    if group is not None and group != "":
        if isinstance(group, bool) or not isinstance(group, str | int):
            raise RunFormatError(
                file, line, "group", f"expected a string or integer, got {group!r}"
            )
        group = str(group)
    else:
        group = None
    step = get_int(obj, "step", file, line, default=0) if obj.get("step") != "" else 0
    columns = number_columns(obj, _KNOWN, file, line)
    advantage = None
    if obj.get("advantage") not in (None, ""):
        advantage = get_number(obj, "advantage", file, line)
    return Row(
        step=step,
        prompt=obj["prompt"],
        response=obj[response_key],
        score=get_number(obj, reward_key, file, line),
        group=group,
        advantage=advantage,
        columns=columns,
    )


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of plain JSONL files."""
    return rows_from_jsonl(files, problems, convert, locations)


def rows_csv(files: list[Path], problems: Problems, locations=None):
    """Rows of plain CSV files (line = physical line of the record's start)."""
    for path in files:
        if locations is not None and str(path) not in locations:
            continue
        name = str(path)
        with open(path, encoding="utf-8", newline="", errors="strict") as handle:
            reader = csv.reader(_capped(handle, name))
            try:
                header = next(reader)
            except StopIteration:
                raise RunFormatError(name, None, None, "empty file") from None
            except (csv.Error, UnicodeDecodeError) as err:
                raise RunFormatError(name, 1, None, f"unreadable CSV header: {err}") from None
            if not matches_header(header):
                raise RunFormatError(
                    name, 1, None, "CSV header needs prompt, response and reward columns"
                )
            while True:
                line = reader.line_num + 1
                try:
                    record = next(reader)
                except StopIteration:
                    break
                except (csv.Error, UnicodeDecodeError) as err:
                    problems.add(RunFormatError(name, line, None, f"unreadable CSV: {err}"))
                    break
                if not record:
                    continue
                if len(record) != len(header):
                    problems.add(
                        RunFormatError(
                            name, line, None, f"{len(record)} fields, the header has {len(header)}"
                        )
                    )
                    continue
                obj = dict(zip(header, record, strict=True))
                try:
                    row = convert(obj, name, line)
                except RunFormatError as err:
                    problems.add(err)
                    continue
                row.file, row.line = name, line
                yield row


def _capped(handle: io.TextIOBase, name: str):
    """Lines of a text file, refusing one longer than ``MAX_LINE_BYTES`` characters."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise RunFormatError(name, number, None, f"line longer than the cap {MAX_LINE_BYTES}")
        yield line
