"""A training run as a file: download a finished or paused run, reopen it later on the page.

The file is the run file of ``roll_viz.lm.runfile`` (JSONL, schema ``roll-viz.train/1``), the
same as ``python -m roll_viz train --out`` writes. A run on the server lives at most as long as
its student (``ui.reconnect``: a reload within the grace finds it; a server restart loses it);
its file keeps it. Reopening parses the upload once (per uploaded file, not per rerun), in
memory, up to ``MAX_RUN_FILE_MB``; a file that is not a run file gets one message naming the
line, never a traceback.
"""

from __future__ import annotations

import streamlit as st

from roll_viz.lm.runfile import TrainRun
from roll_viz.lm.train import TrainRunner
from roll_viz.ui import training_steps
from roll_viz.ui import training_view as tv
from roll_viz.views import text

#: the largest run file the page opens (a 50-step run with samples every 5 steps is ~0.3 MB)
MAX_RUN_FILE_MB = 20
KEY_PARSED = "_tr_run_file_parsed"


def download_button(runner: TrainRunner, slot: str) -> None:
    """Download a run that is not training right now (done, paused, stopped or failed)."""
    if runner.status == "running":
        return
    run = runner.run()
    st.download_button(
        f"Download run {slot} as a run file (.jsonl)",
        run.to_jsonl(),
        file_name=f"roll_viz_run_{slot}_{run.settings.steps}steps.jsonl",
        mime="application/jsonl",
        key=f"tr_download_{slot}",
        icon=":material/download:",
        help="Keeps the run beyond this server: open it again on this page (Recorded runs, "
        "'Open a run file'), or on Your run.",
    )


def parse_run_file(data: bytes) -> TrainRun | str:
    """The run in an uploaded file, or why it cannot be opened (one line)."""
    if len(data) > MAX_RUN_FILE_MB * 1_000_000:
        size = len(data) / 1e6
        return f"The file has {size:.1f} MB; a run file opens up to {MAX_RUN_FILE_MB} MB."
    try:
        run = TrainRun.from_jsonl(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "The file is not UTF-8 text: not a run file."
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        return f"Not a run file of this app: {text.md_escape(str(err))[:200]}"
    if not run.steps:
        return "The run file has no steps."
    return run


def open_run_file() -> TrainRun | None:
    """The uploader of a run file; the parsed run (parsed once per uploaded file) or None."""
    uploaded = st.file_uploader(
        "Open a run file (.jsonl) downloaded from Train live or written by `python -m roll_viz "
        "train --out`",
        type=["jsonl"],
        key="tr_open_file",
        help=f"At most {MAX_RUN_FILE_MB} MB; read in memory, never stored on the server.",
    )
    if uploaded is None:
        st.session_state.pop(KEY_PARSED, None)
        return None
    file_id = getattr(uploaded, "file_id", uploaded.name)
    cached = st.session_state.get(KEY_PARSED)
    if cached is None or cached[0] != file_id:
        cached = (file_id, parse_run_file(uploaded.getvalue()))
        st.session_state[KEY_PARSED] = cached
    result = cached[1]
    if isinstance(result, str):
        st.error(result, icon=":material/error:")
        return None
    return result


def run_file_panel() -> None:
    """Reopen a run from its file: its curves, settings and step scrubber."""
    run = open_run_file()
    if run is None:
        return
    label = text.md_escape(run.label or run.settings.label or "run")
    st.caption(
        f":material/folder_open: **From a run file**: {label}, {len(run.steps)} of "
        f"{run.settings.steps} steps on {text.md_escape(run.model or run.settings.model)}, "
        f"status {text.md_escape(run.status)}. {text.md_escape(run.settings.describe())}"
    )
    tv.curves([run], key="tr_file_curves")
    training_steps.scrubber(run, key="file")
    with st.expander("Settings of this run"):
        training_steps.settings_panel([run])
