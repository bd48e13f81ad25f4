"""ROLL ``rollout_dump_dir``: ``rollout_dump_data.step_<N>.jsonl``, one column-oriented object.

Each file holds one line (run-formats.md 3.2a): an object whose keys (a subset of
``COLUMMNS_CONFIG``: ``global_step``, ``id``, ``prompt``, ``messages``, ``ground_truth``, ``tag``,
``domain``, ``responses``, ``scores``, ``sampling_params``, ...) each map to a list over samples.
The reader transposes it into rows. Written right after generation: ``scores`` are the raw
scores (before normalisation), there are no advantages, token ids or log-probs. Groups are the
prompt ``id`` when present, else identical ``prompt`` text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from roll_viz.data.runs.parse import (
    Problems,
    RunFormatError,
    get_int,
    get_number,
    get_text,
    number_columns,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "roll-dump"
LABEL = "ROLL rollout_dump_dir (column-oriented JSON per step)"
SCORE_KIND = "raw score (ROLL batch['scores'], before normalisation)"
NOTES = (
    "written right after generation: no advantages, token ids or log-probs",
    "groups: the prompt 'id' column when present, else identical prompt text",
)
_NUMERIC_SKIP = ("global_step", "scores")


def matches(first: Any) -> bool:
    """A column-oriented object with responses and scores lists."""
    return (
        isinstance(first, dict)
        and isinstance(first.get("responses"), list)
        and isinstance(first.get("scores"), list)
    )


def _step_from_name(file: str) -> int | None:
    found = re.search(r"step_(\d+)", Path(file).name)
    return int(found.group(1)) if found else None


def convert(value: Any, file: str, line: int, problems: Problems | None = None) -> list[Row]:
    """One column-oriented object -> one Row per sample (a short column is an error).

    A line is a whole step (usually the whole file), so a bad sample goes to ``problems`` and
    only that sample is skipped (raised when ``problems`` is None).
    """
    obj = require_object(value, file, line)
    for key in ("responses", "scores"):
        if not isinstance(obj.get(key), list):
            raise RunFormatError(file, line, key, "missing or not a list")
    n = len(obj["responses"])
    for key, column in obj.items():
        if isinstance(column, list) and len(column) != n:
            raise RunFormatError(
                file, line, key, f"column has {len(column)} entries, 'responses' has {n}"
            )
    default = _step_from_name(file)
    out = []
    for i in range(n):
        record = {key: column[i] for key, column in obj.items() if isinstance(column, list)}
        where = f"[{i}]"
        try:
            step = get_int(record, "global_step", file, line, default=default)
            prompt = record.get("prompt")
            if prompt is None and isinstance(record.get("messages"), str):
                prompt = record["messages"]
            if prompt is not None and not isinstance(prompt, str):
                raise RunFormatError(file, line, "prompt", "expected a string")
            group = record.get("id")
            group = None if group is None else str(group)
            columns = number_columns(record, _NUMERIC_SKIP, file, line)
            row = Row(
                step=step,
                prompt=prompt or "",
                response=get_text(record, "responses", file, line),
                score=get_number(record, "scores", file, line),
                group=group,
                columns=columns,
            )
        except RunFormatError as err:
            err = RunFormatError(file, line, f"{err.field}{where}", err.message)
            if problems is None:
                raise err from None
            problems.add(err)
            continue
        out.append(row)
    return out


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of ROLL dump files (see ``base.rows_from_jsonl``)."""

    def convert_line(value: Any, file: str, line: int) -> list[Row]:
        return convert(value, file, line, problems)

    return rows_from_jsonl(files, problems, convert_line, locations)
