"""The board reader's fast line path: simdjson parses a JSON line, number lists leave as arrays.

``json``/``orjson`` make a Python object of every element of a line: a 4096-token board row is
~32,000 floats and strings, made and freed again, most of them in lists the scan never uses
(``log_probs2``, ``values`` when it copies ``token_rewards``, the 0/1 mask). Here simdjson
(pysimdjson) validates the whole line and keeps it as its own tape; a top-level list is a
``FastList`` that becomes a float64 array in one C pass (``as_buffer``), a mask is counted on
its int64 buffer, and a list nobody asks for is never converted.

The path only vouches for plain lines. ``SlowLine`` (or any ``RunFormatError`` while
converting) sends the line back to the plain reader (orjson/``json`` + the same converter),
which gives the records and messages: the fast path never decides that a line is bad. Plain
means: no NUL byte, a ``{`` first, at most ``MAX_FAST_LINE`` bytes, simdjson accepts it (it
refuses NaN/Infinity, numbers out of the double range, integers beyond 64 bits, lone
surrogates, bad UTF-8 and control characters), no key twice (simdjson would keep the first,
``json`` keeps the last), no object as a top-level value, no array directly inside an array
(``as_buffer`` would flatten it: a ``[`` after ``[`` or ``,`` sends the line back, even
inside a string), at most ``MAX_BRACES`` ``{`` (bounds the depth), and per list: elements that
are all numbers (a bool, null or string refuses the buffer), all finite.
"""

from __future__ import annotations

import numpy as np
import simdjson

#: Longest line the fast path parses (simdjson's buffers grow to the longest line it has seen,
#: and live for one file's read); longer lines take the plain path.
MAX_FAST_LINE = 8 * 1024 * 1024
#: ``{`` bytes a fast line may hold (with no array directly inside another, this bounds the
#: nesting depth far below every parser's limit, so they all accept the same lines).
MAX_BRACES = 64
#: ``[`` bytes looked at, one by one, for an array inside an array; more sends the line back.
MAX_BRACKETS = 1024

_SPACE = b" \t\r\n"


class SlowLine(Exception):
    """The fast path cannot vouch for this line: the plain reader reads it."""


class FastList:
    """A top-level JSON array of the line simdjson parsed (nothing converted until asked).

    Valid only while its line is being converted (the parser's next line replaces it).
    """

    __slots__ = ("_array",)

    def __init__(self, array: simdjson.Array):
        self._array = array

    def __len__(self) -> int:
        return len(self._array)

    def as_list(self) -> list:
        """The elements as Python objects (what ``json`` would give for this plain line)."""
        return self._array.as_list()

    def _buffer(self, of_type: str, dtype: type, cap: int) -> np.ndarray:
        """The list as one flat array of ``dtype`` (simdjson's ``as_buffer``); else ``SlowLine``.

        Refused: over ``cap`` elements, an element ``as_buffer`` cannot take, or a nested list
        (flattened, so the sizes differ).
        """
        n = len(self._array)
        if n > cap:
            raise SlowLine
        try:
            buffer = self._array.as_buffer(of_type=of_type)
        except (TypeError, ValueError):
            raise SlowLine from None
        out = np.frombuffer(buffer, dtype=dtype)
        if out.size != n:
            raise SlowLine
        return out

    def numbers(self, cap: int) -> np.ndarray:
        """(n,) float64 of a list of finite numbers, at most ``cap`` long; else ``SlowLine``.

        simdjson has already parsed each number (correctly rounded, an integer converted like
        ``float(int)``); ``as_buffer`` copies them out and refuses a bool, null, string or
        object element.
        """
        out = self._buffer("d", np.float64, cap)  # writable: the buffer is a copy
        if not np.isfinite(out).all():
            raise SlowLine
        return out

    def mask_ones(self, cap: int) -> int:
        """Leading 1s of a list of integers 0/1 with the 1s first (at most ``cap`` long).

        Raises:
            SlowLine: floats, other values, a 1 after a 0 (the plain path decides).
        """
        mask = self._buffer("i", np.int64, cap)
        if mask.size and (mask.min() < 0 or mask.max() > 1):
            raise SlowLine
        ones = int(mask.sum())
        if not mask[:ones].all() or mask[ones:].any():
            raise SlowLine
        return ones


class FastLines:
    """One simdjson parser for the lines of one read (not shared between threads)."""

    def __init__(self) -> None:
        self._parser = simdjson.Parser()

    def object(self, raw: bytes) -> dict:
        """A plain JSON object line as a dict: scalars as Python values, lists as ``FastList``.

        Raises:
            SlowLine: anything the fast path does not vouch for (see the module docstring).
        """
        if (
            len(raw) > MAX_FAST_LINE
            or raw[:1] != b"{"
            or b"\x00" in raw
            or (raw.find(b"{", 1) > 0 and raw.count(b"{") > MAX_BRACES)
            or _array_in_array(raw)
        ):
            raise SlowLine
        try:
            doc = self._parser.parse(raw)
        except Exception:  # any refusal: the plain path says what is wrong
            self._parser = simdjson.Parser()  # a fresh one: nothing may still point into it
            raise SlowLine from None
        if not isinstance(doc, simdjson.Object):
            raise SlowLine
        keys = list(doc.keys())
        out = {}
        for key in keys:
            value = doc[key]
            if isinstance(value, simdjson.Array):
                value = FastList(value)
            elif isinstance(value, simdjson.Object):
                raise SlowLine
            out[key] = value
        if len(out) != len(keys):  # a key twice: simdjson keeps the first, json the last
            raise SlowLine
        return out


def _array_in_array(raw: bytes) -> bool:
    """Whether a ``[`` follows ``[`` or ``,`` (whitespace between), or there are too many."""
    at = raw.find(b"[")
    for _ in range(MAX_BRACKETS):
        if at < 0:
            return False
        back = at - 1
        while back >= 0 and raw[back] in _SPACE:
            back -= 1
        if back >= 0 and raw[back] in b"[,":
            return True
        at = raw.find(b"[", at + 1)
    return at >= 0
