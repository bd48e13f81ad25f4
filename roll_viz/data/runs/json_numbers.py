"""JSON numbers a float cannot hold: parsed as an ``Unreadable`` in their place, never raised.

The one place where the run readers and the calculator (``roll_viz.cli.calculator``) turn JSON
digits into numbers. Three kinds of number cannot be read (issue #33, each reproduced):

- more digits than Python converts (``int("9" * 5000)`` raises ValueError past
  ``sys.get_int_max_str_digits()``, 4300): one such number refused a whole upload;
- an integer beyond the float range (400 nines): the readers said so, but an extra column
  dropped it silently and the table showed NaN;
- a decimal beyond the float range (``1e400``, 400 nines then ``.0``): ``float`` gives inf,
  which an extra column kept as if the file had said Infinity.

Each becomes an ``Unreadable`` where it stood, so the field getter that wants a number there
names the row and the field (a reader skips that row, the calculator exits 2) and nothing else
of the text is lost; a number nobody reads (a verl ``gts`` answer of 5,000 digits) costs
nothing. ``NaN``/``Infinity`` literals parse as floats: the getters decide where they are
allowed. orjson reads every line first; it refuses all three kinds, so only the lines it refuses
reach ``json`` and its hooks.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

_FLOAT_MAX = int(sys.float_info.max)
_FLOAT_DIGITS = len(str(_FLOAT_MAX))  # 309: an integer with more digits is beyond the range


class Unreadable:
    """A JSON number no float can hold; ``why`` says which kind (never quotes the digits)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"<unreadable number: {self.why}>"


def _parse_int(text: str) -> int | Unreadable:
    digits = len(text) - text.startswith("-")
    if digits > _FLOAT_DIGITS:  # checked before int(): 5,000 digits would raise
        return Unreadable(f"integer too large for a float ({digits} digits)")
    value = int(text)
    if not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        return Unreadable(f"integer too large for a float ({digits} digits)")
    return value


def _parse_float(text: str) -> float | Unreadable:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # digits, not the Infinity literal
        return Unreadable("number beyond the float range (magnitude over 1.8e308)")
    return value


def float_text(text: str) -> float | Unreadable:
    """A number typed as text (a CSV cell), as Python's ``float`` reads it.

    Digits past the float range are an ``Unreadable``; the words "inf"/"nan" stay floats (the
    getter decides). Raises ValueError for any other word.
    """
    value = float(text)
    if value in (float("inf"), float("-inf")) and "inf" not in text.lower():
        return _parse_float(text)
    return value


def loads(raw: bytes | str) -> Any:
    """Parse JSON with orjson (fast path), falling back to ``json`` for what orjson refuses.

    ``json`` takes NaN / Infinity, integers beyond 64 bits and lone surrogates, which orjson
    refuses; a number a float cannot hold becomes an ``Unreadable``. Its errors
    (``json.JSONDecodeError``, ``UnicodeDecodeError``, ``RecursionError``) are the ones raised.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return loads_text(text)


def loads_text(text: str) -> Any:
    """``json.loads`` of ``text`` with the number hooks (no orjson try)."""
    return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)


def is_number(x: Any) -> bool:
    """A JSON number a float can hold (bools are not numbers; a 400-digit integer is not)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return -_FLOAT_MAX <= x <= _FLOAT_MAX
    return isinstance(x, float)


def first_unreadable(value: Any, path: str = "") -> tuple[str, Unreadable] | None:
    """The first ``Unreadable`` in a parsed value as ``(path, it)``, e.g. ``batch.scores[0]``.

    Iterative (a deep document cannot exhaust the stack). Depth first: the first unreadable
    directly inside a container is found before those in the containers it holds.
    """
    if not isinstance(value, Unreadable | dict | list):
        return None
    if isinstance(value, Unreadable):
        return path, value
    stack = [(path, value)]
    while stack:  # only containers and unreadables get a path string (lists can be 4M long)
        where, item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        found = []
        for key, child in pairs:
            if isinstance(child, Unreadable | dict | list):
                if isinstance(item, dict):
                    at = f"{where}.{key}" if where else str(key)
                else:
                    at = f"{where}[{key}]"
                if isinstance(child, Unreadable):
                    return at, child
                found.append((at, child))
        stack.extend(reversed(found))
    return None
