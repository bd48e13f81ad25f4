"""Figures cached by their inputs: a page run rebuilds no Plotly figure whose inputs did not change.

Building a Plotly figure validates every property it sets: a 3 x 3 grid with reference lines
takes 50-300 ms of server CPU, more than the rest of a page run. ``plot_of(key, build, *args)``
draws ``build(*args)`` as ``widgets.plot`` does, but keeps the finished figure (its dict, header
stacked, projector fonts where asked) in a process-wide cache keyed by the builder's name and the
CONTENT of its inputs (``content_key``: tensors by their bytes, records field by field), and
turns a hit back into a figure without validating it again (a few ms). Every student on the same
batch and settings shares one entry; a different input is a different key, never a stale hit.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch

from roll_viz.ui.state import KEY_PRESENT
from roll_viz.ui.widgets import chart, finished

#: cached figures per server process (each a figure's dict, tens of KB)
MAX_FIGURES = 256


def _feed(h: Any, obj: Any) -> None:
    """Feed ``obj``'s content into the hash ``h`` (type-tagged, so 1 and "1" differ)."""
    if obj is None or isinstance(obj, bool | int | float | str | bytes):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"tensor:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, np.ndarray):
        h.update(f"ndarray:{obj.dtype}:{obj.shape};".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, pd.DataFrame | pd.Series):
        h.update(f"pandas:{obj.shape};".encode())
        names = obj.columns if isinstance(obj, pd.DataFrame) else [obj.name]
        _feed(h, [str(c) for c in names])
        h.update(pd.util.hash_pandas_object(obj, index=True).values.tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"record:{type(obj).__qualname__};".encode())
        for field in dataclasses.fields(obj):
            _feed(h, field.name)
            _feed(h, getattr(obj, field.name))
    elif isinstance(obj, dict):
        h.update(b"dict;")
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif isinstance(obj, list | tuple):  # NamedTuples too: their fields in order
        h.update(f"{type(obj).__qualname__}:{len(obj)};".encode())
        for item in obj:
            _feed(h, item)
    else:
        raise TypeError(f"no content key for a {type(obj).__qualname__}")


def content_key(*objs: Any) -> str:
    """A hex digest of ``objs``' content: equal inputs, equal keys; an unknown type raises."""
    h = hashlib.blake2b(digest_size=16)
    for obj in objs:
        _feed(h, obj)
    return h.hexdigest()


@st.cache_data(show_spinner=False, max_entries=MAX_FIGURES)
def _spec(
    name: str, key: str, present: bool, _build: Callable[..., go.Figure], _args: tuple
) -> dict:
    """The finished figure's dict (cached by ``name``, ``key`` and ``present`` only)."""
    return finished(_build(*_args), present).to_dict()


def plot_of(key: str, build: Callable[..., go.Figure], *args: Any, **kwargs: Any) -> None:
    """``widgets.plot(build(*args), key)``, the figure cached by its inputs (see above).

    Args:
        key: Streamlit element key.
        build: a ``views`` figure function (pure: the same inputs draw the same figure).
        *args: its inputs, all of a type ``content_key`` reads.
        **kwargs: passed to ``st.plotly_chart``.
    """
    name = f"{build.__module__}.{build.__qualname__}"
    present = bool(st.session_state.get(KEY_PRESENT))
    spec = _spec(name, content_key(*args), present, build, args)
    chart(go.Figure(spec, _validate=False), key, **kwargs)  # validated when it was built
