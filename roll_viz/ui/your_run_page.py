"""Streamlit glue of the Your run page: the run picker, the uploader, the history and sweeps.

Which files may be opened, the cached scan and one step (the data of every page once a run step
is chosen) live in ``run_source``, which ``flow`` and the sidebar read; this module builds on it
and is imported by the pages only (``pages/your_run.py``, ``pages/sensitivity.py``). The names
the pages use from ``run_source`` are offered here too.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from roll_viz.analysis import downsampling, history
from roll_viz.data.runs import uploads
from roll_viz.ui import run_source
from roll_viz.ui.run_source import RUNS_ENV as RUNS_ENV
from roll_viz.ui.run_source import open_cached as open_cached
from roll_viz.ui.run_source import resolve as resolve
from roll_viz.ui.run_source import run_version as run_version
from roll_viz.ui.run_source import runs_folder as runs_folder
from roll_viz.ui.run_source import step_cached as step_cached

MAX_LISTED = 200  # entries of the allowed folder shown in the picker
MAX_UPLOAD_BYTES = uploads.MAX_UPLOAD_BYTES  # Streamlit's own upload cap (server.maxUploadSize)
UPLOAD_SUFFIXES = uploads.UPLOAD_SUFFIXES
#: what the uploader takes: any reader's file, several at once, or a zip of them
UPLOAD_TYPES = [s.lstrip(".") for s in (*UPLOAD_SUFFIXES, uploads.ZIP_SUFFIX)]
KEY_UPLOAD_IDS = "_run_upload_ids"  # uploader file id -> run id (saved once per upload)


def allowed_runs() -> list[str]:
    """Names of the runs in the allowed folder (files and per-step folders inside it), sorted."""
    jail = run_source.runs_jail()
    if jail is None:
        return []
    names = sorted(
        p.name for p in jail.root.iterdir() if not p.name.startswith(".") and jail.contains(p)
    )
    return names[:MAX_LISTED]


def uploader() -> list[Any]:
    """The page's uploader: one dump, several files of one run, or a zip (a list, maybe empty).

    verl (``rollout_data_dir``) and TRL (``completions_*.parquet``) write one file per step:
    uploading them together (or zipped) gives one run with its whole history.
    """
    uploaded = st.file_uploader(
        f"Upload a dump: one file, all the files of one run, or a .zip of them "
        f"({', '.join(UPLOAD_SUFFIXES)}, .zip; at most {MAX_UPLOAD_BYTES // 2**20} MB a file)",
        type=UPLOAD_TYPES,
        accept_multiple_files=True,
        key="run_upload",
    )
    return list(uploaded or [])


def save_uploaded(uploaded: Any) -> str:
    """Save what the uploader holds, once per upload (not on every rerun); returns the run id.

    Args:
        uploaded: one ``st.file_uploader`` file, or a list of them (several files of one run,
            or a zip): several files or a zip become one run folder (``UploadStore.save_files``).

    The uploader hands the same files to every rerun; hashing and writing up to 200 MB each
    time would make every interaction of the page cost that much.

    Raises:
        ValueError: too large, a file type no reader takes, a bad zip, or the quota is full.
    """
    files = list(uploaded) if isinstance(uploaded, list | tuple) else [uploaded]
    seen = st.session_state.setdefault(KEY_UPLOAD_IDS, {})
    ids = tuple(getattr(f, "file_id", None) for f in files)
    known = None not in ids
    if known and ids in seen:
        return seen[ids]
    pairs = [(f.name, f.getvalue()) for f in files]
    run_id = "upload:" + run_source.UPLOADS.save_files(pairs, run_source.upload_holder())
    if known:
        seen.clear()  # one upload at a time per session
        seen[ids] = run_id
    return run_id


#: m values the PODS sweep tries at most (evenly spread over 2..n): a group of 8,000 rollouts
#: used to run 7,999 subset searches on every interaction (61 s a rerun)
MAX_SWEEP_POINTS = 24


def sweep_ms(n: int, points: int = MAX_SWEEP_POINTS) -> list[int]:
    """At most ``points`` subset sizes m in 2..n, evenly spread, both ends included."""
    if n < 2:
        return []
    if n - 1 <= points:
        return list(range(2, n + 1))
    step = (n - 2) / (points - 1)
    return sorted({2 + round(i * step) for i in range(points)})


def capped_grid(values: tuple[float, ...], points: int = MAX_SWEEP_POINTS) -> tuple[float, ...]:
    """A sweep grid thinned to at most ``points`` values, both ends kept.

    A run step's G grid ran 2..n: 7,999 pipeline runs for a group of 8,000.
    """
    if len(values) <= points:
        return values
    step = (len(values) - 1) / (points - 1)
    return tuple(values[i] for i in sorted({round(k * step) for k in range(points)}))


@st.cache_data(show_spinner="Sweeping m...", max_entries=16)
def pods_sweep_cached(run_id: str, version: str, step: int, m: int, _rewards: Any) -> Any:
    """The PODS sweep of a step's max-variance rewards, once per (file as it is, step, m)."""
    return downsampling.sweep(_rewards, sweep_ms(int(_rewards.shape[-1])))


@st.cache_data(show_spinner="Reading the history...", max_entries=8)
def history_cached(run_id: str, version: str) -> Any:
    """``analysis.history.history_table`` of a run, once per file as it is (not per rerun)."""
    return history.history_table(open_cached(run_id, version))


@st.cache_data(show_spinner=False, max_entries=32)
def distributions_cached(run_id: str, version: str, what: str) -> Any:
    """``analysis.history.distributions`` of a run, once per (file as it is, quantity)."""
    return history.distributions(open_cached(run_id, version), what)


@st.cache_data(show_spinner=False, max_entries=8)
def metrics_cached(run_id: str, version: str) -> Any:
    """``analysis.history.metrics_table`` of a run, once per file as it is."""
    return history.metrics_table(open_cached(run_id, version))
