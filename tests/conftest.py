"""Suite-wide settings: hermetic by default (tiny model, no network), and the test tiers.

Markers by folder and name, so ``make test-fast`` can leave the slow tiers out while ``make test``
runs everything: ``browser`` (tests/browser/) and ``bench`` (tests that exist to print BENCHMARK
lines: a ``bench`` module or a ``benchmark`` test). ``slow`` (the real model) and ``server`` (a
local streamlit server) are set on the tests themselves.
"""

import os
from pathlib import Path

import pytest

# Tests never load the real model unless a test marked `slow` asks for it explicitly.
os.environ.setdefault("ROLL_VIZ_MODEL", "tiny")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Live samples come from the in-process model unless an engine test sets the engine itself.
os.environ.pop("ROLL_VIZ_ENGINE", None)

HERE = Path(__file__).resolve().parent
FOLDER_MARKERS = {"browser": "browser"}


def pytest_collection_modifyitems(config, items):
    """Add the tier markers (see the module docstring)."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE not in path.parents:
            continue
        folder = path.relative_to(HERE).parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(getattr(pytest.mark, FOLDER_MARKERS[folder]))
        if "bench" in path.stem or "benchmark" in item.name:
            item.add_marker(pytest.mark.bench)
