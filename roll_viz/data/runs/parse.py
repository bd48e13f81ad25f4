"""Reading run files safely: caps, errors, safe field getters, JSONL/JSON streaming.

Every reader (one module per format) parses its files with these. Nothing read from a file is
executed: JSON is parsed with orjson/``json`` (board lines by simdjson first: ``fast_lines``),
CSV with ``csv``, parquet with pyarrow; no pickle, no eval. Every problem is a
``RunFormatError`` naming the file, the line and the field; per-line problems are collected in
``Problems`` (capped) and those lines skipped. Every cap is a module constant here, and every
cap that bites leaves a message in the run's notes.
"""

from __future__ import annotations

import contextlib
import json
import math
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from roll_viz.data.runs.fast_lines import FastLines, FastList, SlowLine
from roll_viz.data.runs.json_numbers import Unreadable, float_text, is_number, loads_text
from roll_viz.data.runs.run_records import Row

# ---------------------------------------------------------------------------------------------
# Caps (bounded memory and time; every cap that bites leaves a message in the run's notes)

#: Longest line read from a JSONL/CSV file (a longer line is skipped with a warning).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Largest whole-file JSON document (UNIPO JSON form) parsed in one piece (JSONL streams).
MAX_JSON_BYTES = 64 * 1024 * 1024
#: A JSON document is parsed only when its estimated parsed size (72 bytes per ``{ [ , :``)
#: stays within this multiple of its bytes: parsing costs at most ~this x the file (an 8 MB
#: document of empty entries, 48x, is refused at once instead of taking 300 MB and minutes).
JSON_MEMORY_MULTIPLE = 20
#: Bad rows read before the first good one after which a file is refused (a file of garbage).
MAX_BAD_PREFIX = 100_000
#: Rows (samples) read from one run; the scan stops there with a note.
MAX_ROWS = 2_000_000
#: Files read from one folder.
MAX_FILES = 10_000
#: Token positions of one response (a longer response is skipped with a warning).
MAX_TOKENS_PER_ROW = 65_536
#: Token positions kept when one step is loaded with its token arrays; whole prompts are kept
#: in file order until the next would pass the cap (the rest of the step keeps its summary).
MAX_STEP_TOKENS = 4_194_304
#: Per-line problems kept in a run's warnings (the rest are only counted).
MAX_WARNINGS = 200
#: Bytes looked at to tell text from binary.
SNIFF_BYTES = 8192


class RunFormatError(ValueError):
    """A problem in a run file, naming the file, the 1-based line (or None) and the field.

    Attributes:
        file: path of the file as given.
        line: 1-based line number (JSONL/CSV line, parquet row + 1), or None for the whole file.
        field: the key or column at fault, or None.
        message: what is wrong.
    """

    def __init__(self, file: str | Path, line: int | None, field: str | None, message: str):
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self.file, line, field, message)  # the text is made on demand

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        """``file:line: field: message`` on one line (parts that are unknown are left out)."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        head = f"{where}: {self.field}: " if self.field else f"{where}: "
        return head + " ".join(self.message.split())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (file, line, field, message)."""
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


class DocumentTooLarge(RunFormatError):
    """A JSON document over ``MAX_JSON_BYTES`` or ``JSON_MEMORY_MULTIPLE`` (never parsed)."""


@dataclass
class Problems:
    """Per-line problems collected while reading (capped at ``MAX_WARNINGS``)."""

    items: list[RunFormatError] = field(default_factory=list)
    dropped: int = 0
    rows_ok: int = 0  # good rows so far (the scan counts them)

    def add(self, err: RunFormatError) -> None:
        """Keep ``err`` (or count it once the cap is reached).

        Raises:
            RunFormatError: ``MAX_BAD_PREFIX`` bad rows before any good one (the file is
                refused without reading the rest).
        """
        if len(self.items) < MAX_WARNINGS:
            self.items.append(err)
        else:
            self.dropped += 1
        if self.rows_ok == 0 and len(self.items) + self.dropped >= MAX_BAD_PREFIX:
            first = self.items[0]
            raise RunFormatError(
                first.file,
                first.line,
                first.field,
                f"no valid sample in the first {MAX_BAD_PREFIX} rows; first problem: "
                f"{first.message}",
            )


# ---------------------------------------------------------------------------------------------
# Validation helpers (each raises RunFormatError naming file, line, field)


MAX_STEP = 2**53  # a step number beyond this is not a step (and not exact as a float)


def step_number(value: Any, file: str, line: int | None, key: str = "step") -> int:
    """A step value as an int: a whole number in +-``MAX_STEP`` (NaN, text refused).

    A one-element list (a list-typed parquet column) is its element; longer lists are refused.

    Raises:
        RunFormatError: naming ``key`` (the row is skipped by the readers).
    """
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, Unreadable):
        raise RunFormatError(file, line, key, value.why)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise RunFormatError(
            file, line, key, f"expected an integer step, got {type(value).__name__}"
        )
    try:
        whole = float(value).is_integer()
    except OverflowError:
        whole = False
    if not whole or abs(int(value)) > MAX_STEP:
        raise RunFormatError(
            file, line, key, f"expected an integer step within +-2^53, got {value!r:.40}"
        )
    return int(value)


def get_number(
    obj: dict, key: str, file: str, line: int, required: bool = True, finite: bool = True
) -> float | None:
    """``obj[key]`` as a float; None when absent and not required (too large: a row problem)."""
    if key not in obj or obj[key] is None:
        if required:
            raise RunFormatError(file, line, key, "missing (expected a number)")
        return None
    value = obj[key]
    if isinstance(value, str):
        try:
            value = float_text(value)
        except ValueError:
            raise RunFormatError(file, line, key, f"expected a number, got {value!r:.60}") from None
    if isinstance(value, Unreadable):
        raise RunFormatError(file, line, key, value.why)
    if isinstance(value, int) and not isinstance(value, bool) and not is_number(value):
        raise RunFormatError(file, line, key, "integer too large for a float")
    if not is_number(value):
        raise RunFormatError(
            file, line, key, f"expected a number, got {type(value).__name__} {value!r:.60}"
        )
    try:
        value = float(value)
    except OverflowError:
        raise RunFormatError(file, line, key, "integer too large for a float") from None
    if finite and not math.isfinite(value):
        raise RunFormatError(file, line, key, f"non-finite number {value!r}")
    return value


def get_int(obj: dict, key: str, file: str, line: int, default: int | None = None) -> int:
    """``obj[key]`` as an integer (a float with no fraction is accepted)."""
    if key not in obj or obj[key] is None:
        if default is None:
            raise RunFormatError(file, line, key, "missing (expected an integer)")
        return default
    value = obj[key]
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20:
        value = int(value)
    if is_number(value) or isinstance(value, Unreadable):
        return step_number(value, file, line, key)
    raise RunFormatError(file, line, key, f"expected an integer, got {value!r:.60}")


def get_text(obj: dict, key: str, file: str, line: int, required: bool = True) -> str:
    """``obj[key]`` as a string ('' when absent and not required)."""
    if key not in obj or obj[key] is None:
        if required:
            raise RunFormatError(file, line, key, "missing (expected a string)")
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise RunFormatError(file, line, key, f"expected a string, got {type(value).__name__}")
    return value


_NUMBER_TYPES = {int, float}


def _bounded_list(obj: dict, key: str, file: str, line: int, what: str) -> list | None:
    """``obj[key]`` when it is a list of at most ``MAX_TOKENS_PER_ROW`` items; None if absent."""
    if key not in obj or obj[key] is None:
        return None
    value = obj[key]
    if isinstance(value, FastList):  # a line of the fast path: over the cap, the plain path
        if len(value) > MAX_TOKENS_PER_ROW:
            raise SlowLine
        value = value.as_list()
    if not isinstance(value, list):
        raise RunFormatError(
            file, line, key, f"expected a list of {what}, got {type(value).__name__}"
        )
    if len(value) > MAX_TOKENS_PER_ROW:
        raise RunFormatError(
            file, line, key, f"{len(value)} positions, more than the cap {MAX_TOKENS_PER_ROW}"
        )
    return value


_LINE = threading.local()  # ``no_bools``: the JSON line being converted has no true/false


@contextlib.contextmanager
def _line_without_bools(raw_has_bools: bool) -> Iterator[None]:
    """While converting one JSON line: whether ``get_numbers`` may skip its bool check."""
    _LINE.no_bools = not raw_has_bools
    try:
        yield
    finally:
        _LINE.no_bools = False


#: ``_has_bools`` looks at this many places of a letter before one plain search of the line.
_LETTER_LOOKS = 64


def no_bools_in_line() -> bool:
    """Whether the JSON line being converted holds no ``true``/``false`` (no bool anywhere)."""
    return getattr(_LINE, "no_bools", False)


def _has_bools(raw: bytes) -> bool:
    """Whether a JSON line may hold a boolean (the bytes ``true`` or ``false`` appear in it).

    A plain ``b"true" in raw`` runs at about 1 byte a nanosecond on number lists (their digits
    defeat the search's skip table); ``u`` and ``f`` are rare in a dump and found with memchr,
    so each of their first ``_LETTER_LOOKS`` places is checked for the word around it, and only
    a line with more of them is searched plainly from there.
    """
    for letter, word, back in ((b"u", b"true", 2), (b"f", b"false", 0)):
        at = raw.find(letter)
        for _ in range(_LETTER_LOOKS):
            if at < 0:
                break
            if raw.startswith(word, max(at - back, 0)):
                return True
            at = raw.find(letter, at + 1)
        else:
            if at >= 0 and word in raw[max(at - back, 0) :]:
                return True
    return False


def get_numbers(obj: dict, key: str, file: str, line: int) -> np.ndarray | None:
    """``obj[key]`` as a (n,) float64 array of finite numbers, or None when absent.

    On a line of the fast path (``fast_lines``) the list is simdjson's: ``FastList.numbers``.
    Fastest path (a JSON line without the bytes ``true``/``false``, so no element can be a
    bool): one C pass, ``struct.pack_into`` of the list into the array as doubles (2.4x
    ``array('d', ...)``; the same ``PyFloat_AsDouble`` of each element, which refuses strings,
    None, lists, objects and integers too large for a float); then numpy's finite check.
    Otherwise the element types are checked with ``map(type, ...)`` (C speed) and the values
    converted by numpy. The slow per-element loop only runs to name a bad element, so the
    messages are the same on every path.
    """
    if isinstance(obj.get(key), FastList):  # a line of the fast path (SlowLine if not plain)
        return obj[key].numbers(MAX_TOKENS_PER_ROW)
    value = _bounded_list(obj, key, file, line, "numbers")
    if value is None:
        return None
    if getattr(_LINE, "no_bools", False):
        out = np.empty(len(value), dtype=np.float64)
        try:
            struct.pack_into(f"{len(value)}d", out, 0, *value)
        except (struct.error, TypeError, OverflowError):
            out = None
        if out is not None and np.isfinite(out).all():
            return out
    elif set(map(type, value)) <= _NUMBER_TYPES:
        try:
            out = np.asarray(value, dtype=np.float64)
        except OverflowError:
            out = None
        if out is not None and out.ndim == 1 and np.isfinite(out).all():
            return out
    for i, x in enumerate(value):
        if isinstance(x, Unreadable):
            raise RunFormatError(file, line, f"{key}[{i}]", x.why)
        if isinstance(x, int) and not isinstance(x, bool) and not is_number(x):
            raise RunFormatError(file, line, f"{key}[{i}]", "integer too large for a float")
        if not is_number(x):
            raise RunFormatError(file, line, f"{key}[{i}]", f"expected a number, got {x!r:.40}")
        try:
            float(x)
        except OverflowError:
            raise RunFormatError(
                file, line, f"{key}[{i}]", "integer too large for a float"
            ) from None
        if not math.isfinite(float(x)):
            raise RunFormatError(file, line, f"{key}[{i}]", f"non-finite number {x!r}")
    raise RunFormatError(file, line, key, "expected a list of numbers")  # pragma: no cover


def get_strings(obj: dict, key: str, file: str, line: int) -> list[str] | None:
    """``obj[key]`` as a list of strings, or None when absent."""
    value = _bounded_list(obj, key, file, line, "strings")
    if value is None:
        return None
    try:
        "".join(value)  # one C pass that refuses any element not a string (a set of types: 7x)
    except TypeError:
        pass
    else:
        return value
    for i, x in enumerate(value):
        if not isinstance(x, str):
            raise RunFormatError(file, line, f"{key}[{i}]", f"expected a string, got {x!r:.40}")
    return value


def number_columns(obj: dict, skip: tuple[str, ...], file: str, line: int | None) -> dict:
    """The numeric values of ``obj`` outside ``skip`` as floats (a reader's extra columns).

    Values that are not numbers (text, lists) and NaN are left out (the column shows NaN, as
    the file says); a number a float cannot hold is a row problem naming its key, never a
    silent NaN or inf.
    """
    out = {}
    for key, v in obj.items():
        if key in skip:
            continue
        if isinstance(v, Unreadable):
            raise RunFormatError(file, line, key, v.why)
        if is_number(v) and float(v) == float(v):
            out[key] = float(v)
    return out


# ---------------------------------------------------------------------------------------------
# Streaming


MAX_NUL_RUNS = 4  # separate stretches of NUL bytes in the first SNIFF_BYTES a text file may have


def iter_jsonl(
    path: Path,
    problems: Problems,
    locations: list[tuple[int, int]] | None = None,
) -> Iterator[tuple[int, int, Any]]:
    """Parsed JSON lines of a file as ``(line, offset, value)``; bad lines go to ``problems``.

    Args:
        path: a JSONL file.
        problems: collects malformed, over-long or non-UTF-8 lines (the rest still loads).
        locations: ``(line, offset)`` pairs to read instead of the whole file (from a scan).
    """
    for line_no, offset, value, _ in _iter_lines(path, problems, locations):
        yield line_no, offset, value


#: Read buffer of the JSONL readers (dump lines are often 100-300 KB: fewer, larger reads).
READ_BUFFER = 1 << 20


def _iter_lines(
    path: Path, problems: Problems, locations: list[tuple[int, int]] | None
) -> Iterator[tuple[int, int, Any, bool]]:
    """``iter_jsonl`` plus, per line, whether its bytes may hold a JSON boolean."""
    name = str(path)
    for line_no, offset, raw in _iter_raw(path, problems, locations):
        value = _parse_line(raw, name, line_no, problems)
        if value is not None:
            yield line_no, offset, value, _has_bools(raw)


def _iter_raw(
    path: Path, problems: Problems, locations: list[tuple[int, int]] | None
) -> Iterator[tuple[int, int, bytes]]:
    """The lines of a JSONL file as ``(line, offset, bytes)``.

    Over-long lines are problems, blank ones skipped; the lines at ``locations`` are read as
    they are.
    """
    name = str(path)
    with open(path, "rb", buffering=READ_BUFFER) as handle:
        if locations is not None:
            for line_no, offset in locations:
                handle.seek(offset)
                yield line_no, offset, handle.readline(MAX_LINE_BYTES + 1)
            return
        line_no = 0
        offset = handle.tell()
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            start, offset = offset, offset + len(raw)
            line_no += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problems.add(
                    RunFormatError(
                        name, line_no, None, f"line longer than the cap {MAX_LINE_BYTES} bytes"
                    )
                )
                while raw and not raw.endswith(b"\n"):
                    raw = handle.readline(1 << 20)
                    offset += len(raw)
                continue
            if raw.isspace():  # a blank line (no copy of a long line, unlike strip)
                continue
            yield line_no, start, raw


def _parse_line(raw: bytes, name: str, line_no: int, problems: Problems) -> Any:
    if b"\x00" not in raw:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # NaN, a big integer, bad UTF-8 or bad JSON: the slow path says which
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        problems.add(RunFormatError(name, line_no, None, f"not UTF-8 text (byte {err.start})"))
        return None
    try:
        return loads_text(text)
    except json.JSONDecodeError as err:
        problems.add(
            RunFormatError(
                name, line_no, None, f"invalid JSON at character {err.pos + 1}: {err.msg}"
            )
        )
    except RecursionError:
        problems.add(RunFormatError(name, line_no, None, "JSON nested too deeply"))
    except ValueError as err:  # none known (numbers parse as Unreadable): this line only
        problems.add(RunFormatError(name, line_no, None, f"unreadable JSON: {err}"))
    return None


# ---------------------------------------------------------------------------------------------
# Shared reader loop


def rows_from_jsonl(
    files: list[Path],
    problems: Problems,
    convert,
    locations: dict[str, list[tuple[int, int]]] | None = None,
    fast: bool = False,
) -> Iterator[Row]:
    """Rows of JSONL files: ``convert(value, file, line)`` -> a Row, a list of Rows or None.

    A RunFormatError raised by ``convert`` is recorded in ``problems`` and the line skipped.

    Args:
        files: JSONL files in read order.
        problems: collects per-line problems.
        convert: turns one parsed line into rows.
        locations: per file, the ``(line, offset)`` pairs to read (None = every line).
        fast: each line on the fast path first (``fast_lines``: ``convert`` gets lists as
            ``FastList``); a line it does not vouch for (``SlowLine``, or a RunFormatError
            there) is read again the plain way, which gives its records and messages.
    """
    for path in files:
        name = str(path)
        wanted = None
        if locations is not None:
            wanted = locations.get(name)
            if not wanted:
                continue
        lines = FastLines() if fast else None  # one parser per file read, freed after it
        for line, offset, raw in _iter_raw(path, problems, wanted):
            out = _SLOW if lines is None else _convert_fast(lines, raw, convert, name, line)
            if out is _SLOW:
                value = _parse_line(raw, name, line, problems)
                if value is None:
                    continue
                try:
                    with _line_without_bools(_has_bools(raw)):
                        out = convert(value, name, line)
                except RunFormatError as err:
                    problems.add(err)
                    continue
            if out is None:
                continue
            for row in out if isinstance(out, list) else [out]:
                row.file, row.line, row.offset = name, line, offset
                yield row


_SLOW = object()  # ``_convert_fast``: read this line the plain way


def _convert_fast(lines: FastLines, raw: bytes, convert, name: str, line: int) -> Any:
    """``convert`` of a line on the fast path, or ``_SLOW`` (nothing of the line kept)."""
    try:
        return convert(lines.object(raw), name, line)
    except (SlowLine, RunFormatError):
        return _SLOW


def require_object(value: Any, file: str, line: int) -> dict:
    """A JSON line must be an object."""
    if not isinstance(value, dict):
        raise RunFormatError(
            file, line, None, f"expected a JSON object, got {type(value).__name__}"
        )
    return value
