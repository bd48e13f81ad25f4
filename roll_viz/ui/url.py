"""The URL binding of the shared controls, and a notice for every link value they refuse.

Every shared control is a widget bound to a query parameter of its own key
(``bind="query-params"``): only non-default values appear in the URL, and a link reproduces
the state. Streamlit drops a link's invalid value silently; ``url_notices`` names it, with what
is allowed and what is used instead.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

#: per script thread: what each bound URL key allows (filled while the sidebar is drawn)
_RUN = threading.local()


def start(link: Mapping[str, Any] | None = None) -> None:
    """Forget the previous run's bound keys (call before drawing the bound widgets).

    Args:
        link: the query parameters as this run found them (``link_value`` reads them after the
            bound widgets have dropped the values equal to their defaults).
    """
    _RUN.allowed = {}
    _RUN.link = dict(link or {})


def link_value(key: str) -> str | None:
    """The value this run's link gave ``key``, even one a bound widget has since dropped.

    A bound widget removes its parameter from the URL when the value is its default, so a
    page drawn after the sidebar no longer sees ``?beta=0.2`` in ``st.query_params`` when 0.2 is
    the dialect's default; the link still said it.
    """
    value = getattr(_RUN, "link", {}).get(key)
    if isinstance(value, list):
        value = value[-1] if value else None
    return None if value is None else str(value)


def _allowed_text(widget: Callable, args: tuple, kwargs: dict) -> str:
    """How a bound widget's allowed values read in a notice ("1 to 16", "one of a, b")."""
    name = getattr(widget, "__name__", "")
    if name in {"slider", "number_input"} and len(args) >= 3:
        return f"{args[1]:g} to {args[2]:g}"
    if name in {"selectbox", "radio"} and len(args) >= 2:
        options = [str(o) for o in args[1]]
        shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
        return f"one of {shown}"
    if name == "toggle":
        return "true or false"
    return "a valid value"


def bound(widget: Callable, *args: Any, key: str, **kwargs: Any) -> Any:
    """A widget bound to the URL query parameter ``key``, kept across page switches.

    Args:
        widget: a Streamlit widget function (``st.sidebar.slider``, ...).
        *args: its positional arguments (label, then options or range).
        key: widget key, also the query parameter's name.
        **kwargs: its keyword arguments.
    """
    allowed = getattr(_RUN, "allowed", None)
    if allowed is not None:
        allowed[key] = _allowed_text(widget, args, kwargs)
    return widget(*args, key=key, bind="query-params", persist_state="session", **kwargs)


def _same_value(raw: str, value: Any) -> bool:
    """Whether a URL string means the widget's current value (then dropping it was no loss)."""
    if isinstance(value, bool):
        return raw.strip().lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return math.isclose(float(raw), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return raw == str(value)


def url_notices(raw: Mapping[str, Any]) -> list[str]:
    """One line per URL value the bound widgets refused (out of range, NaN, unknown option).

    Streamlit drops an invalid bound value silently; a student who pasted a link must learn
    which value was ignored, what is allowed and what is used instead.
    """
    notices = []
    kept = st.query_params
    for key, allowed in getattr(_RUN, "allowed", {}).items():
        if key not in raw or key in kept:
            continue
        value = raw[key]
        raw_text = value[-1] if isinstance(value, list) else str(value)
        current = st.session_state.get(key)
        if current is None or _same_value(raw_text, current):
            continue
        notices.append(
            f"The link's value {key}={raw_text[:40]} is not allowed ({key} takes {allowed}); "
            f"using {current}."
        )
    return notices
