"""Process-wide resources every page shares: the loaded model and the store of live samples.

The bottom of ``ui``: it imports no other ``ui`` module, so the data flow (``flow``), the adapted
policies (``adapters``) and the page glue (``update_page``, ``training_page``) can all use the one
model without importing each other.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import streamlit as st

from roll_viz.core.records import Rollout
from roll_viz.lm import models, rollout

#: live Rollouts kept for every session together (a click back to a setting is a cache hit)
LIVE_CACHE_ENTRIES = 16


def model_spec() -> str:
    """The server's model: ROLL_VIZ_MODEL, else the bundled default."""
    return (os.environ.get("ROLL_VIZ_MODEL") or models.DEFAULT_MODEL).strip()


def model_choices() -> list[str]:
    """Models a user may pick in the UI: the server's ROLL_VIZ_MODEL, the bundled one, tiny.

    A short allow-list, not free text: every distinct model stays loaded in the shared process,
    so letting each visitor name a folder or hub id would let one URL exhaust the server's memory.
    Any other model is chosen by whoever starts the server (ROLL_VIZ_MODEL or the CLI's --model).
    """
    return list(dict.fromkeys([model_spec(), models.DEFAULT_MODEL, "tiny"]))


_LOADED: set[str] = set()  # model specs this process has loaded (the first use is slow)


@st.cache_resource(show_spinner="Loading the policy and reference model...")
def cached_models(spec: str | None = None) -> Any:
    """The shared ModelBundle (one per process). ``spec`` None reads ROLL_VIZ_MODEL."""
    bundle = models.load_models(spec or model_spec())
    rollout.calibrate(bundle)  # one tiny sample, so the first time estimate is measured
    mark_loaded(spec)
    return bundle


def mark_loaded(spec: str | None = None) -> None:
    """Record that ``cached_models(spec)`` returned (its cache now holds the model)."""
    _LOADED.add(spec or model_spec())


def model_loaded(spec: str | None = None) -> bool:
    """Whether this process has already loaded the model ``spec`` (later uses are instant)."""
    return (spec or model_spec()) in _LOADED


class LiveStore:
    """A small thread-safe LRU of live Rollouts, shared by every session."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.items: OrderedDict = OrderedDict()

    def get(self, key: Any) -> Rollout | None:
        """The Rollout stored under ``key`` (now the most recent), or None."""
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            return None

    def put(self, key: Any, value: Rollout) -> None:
        """Store a Rollout; the least recently used one goes when the store is full."""
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


@st.cache_resource
def live_store() -> LiveStore:
    """The one LiveStore of the process."""
    return LiveStore(LIVE_CACHE_ENTRIES)
