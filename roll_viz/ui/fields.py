"""Server-side checks of page-local fields, whatever the client sent (link, typed or websocket).

A browser's number input never sends NaN or a value beyond its bounds, but a crafted websocket
message or a pasted link can, and Streamlit does not check either on the server: the value
reached the page's code (an integer epochs field given NaN ended in a traceback, and the session
stayed broken on the next rerun). ``check_fields(specs)`` runs BEFORE the page draws those
widgets: a value out of its ``Field`` (not a number, not finite, out of range, not a whole
number, not one of the options) is put back to the field's default in ``st.session_state`` and
named in a notice worded like the sidebar's link notices (``url.url_notices``), so the page keeps
working and says what it used instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st


@dataclass(frozen=True)
class Field:
    """What one field accepts: a number range (``low``..``high``) or a list of ``options``."""

    default: Any
    low: float | None = None
    high: float | None = None
    integer: bool = False
    options: Sequence[Any] | None = None

    def allowed(self) -> str:
        """How the allowed values read in a notice ("1 to 50", "one of A, B, C")."""
        if self.options is not None:
            return "one of " + ", ".join(
                f"{o:g}" if isinstance(o, float) else str(o) for o in self.options
            )
        whole = "whole numbers " if self.integer else ""
        return f"{whole}{self.low:g} to {self.high:g}"

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is valid for this field."""
        if self.options is not None:
            return any(_same(value, o) for o in self.options)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        try:
            number = float(value)
        except OverflowError:
            return False
        if not math.isfinite(number) or not self.low <= number <= self.high:
            return False
        return not self.integer or number.is_integer()

    def parse(self, raw: str) -> Any:
        """A URL string as the field's value type (None when it is not one)."""
        if self.options is not None:
            for option in self.options:
                if str(option) == raw or _same(_number(raw), option):
                    return option
            return None
        return _number(raw)


def _number(raw: str) -> float | None:
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _same(value: Any, option: Any) -> bool:
    if isinstance(option, float) and isinstance(value, int | float) and not isinstance(value, bool):
        return math.isclose(float(value), option, rel_tol=1e-9)
    return value == option


def _shown(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text[:40]


def check_fields(specs: Mapping[str, Field], raw_url: Mapping[str, Any] | None = None) -> list[str]:
    """Put invalid values of ``specs``' keys back to their defaults; one notice per value.

    Call before the widgets with these keys are drawn in this run.

    Args:
        specs: widget key -> Field.
        raw_url: the query string as the run found it (``st.query_params.to_dict()``), for the
            link values Streamlit drops silently; None reads it now.

    Returns:
        One line per refused value: "The value k=v is not allowed (k takes ...); using d."
    """
    raw_url = st.query_params.to_dict() if raw_url is None else raw_url
    notices = []
    for key, spec in specs.items():
        value = st.session_state.get(key)
        if value is not None and not spec.accepts(value):
            st.session_state[key] = spec.default
            notices.append(
                f"The value {key}={_shown(value)} is not allowed ({key} takes "
                f"{spec.allowed()}); using {_shown(spec.default)}."
            )
            continue
        raw = raw_url.get(key)
        if raw is None or value is not None:
            continue
        text = raw[-1] if isinstance(raw, list) else str(raw)
        parsed = spec.parse(text)
        if parsed is None or not spec.accepts(parsed):
            notices.append(
                f"The link's value {key}={text[:40]} is not allowed ({key} takes "
                f"{spec.allowed()}); using {_shown(spec.default)}."
            )
    return notices
