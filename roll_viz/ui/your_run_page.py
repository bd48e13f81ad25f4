"""Imported training runs in the app: which files may be opened, the cached scan, one step.

A run comes from a folder whoever starts the server allows (``ROLL_VIZ_RUNS=DIR``; only entries
that stay inside it, never a path a visitor types: ``data.runs.jail``) or from an upload (kept in
a per-process folder with a quota, named by the content's hash, and freed when the sessions
using it end: ``data.runs.uploads``). The scan (``data.runs.open_run``: per-step summaries, bounded
memory) and each loaded step are shared by every session; nothing read is executed.

A run step becomes the data source of every page (``state.source == "run:<id>#<step>"``): its
scores are the file's, its tokens and log-probs the file's where it has them. A file without
token log-probs still drives the reward, advantage, local-vs-global and framework pages; the
token pages say what is missing.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import streamlit as st
import torch

from roll_viz.analysis import downsampling, history
from roll_viz.core.records import Rollout
from roll_viz.data.presets import PRESETS
from roll_viz.data.runs import RunFormatError, load_step, open_run, uploads
from roll_viz.data.runs.jail import JailError, RunsJail, public_message
from roll_viz.ui.state import (
    KEY_PRESET,
    KEY_RUN_SOURCE,
    KEY_RUN_URL,
    KEY_STEP_URL,
    RunSampling,
)
from roll_viz.ui.url import bound
from roll_viz.views import text

RUNS_ENV = "ROLL_VIZ_RUNS"
MAX_LISTED = 200  # entries of the allowed folder shown in the picker
MAX_UPLOAD_BYTES = uploads.MAX_UPLOAD_BYTES  # Streamlit's own upload cap (server.maxUploadSize)
UPLOAD_SUFFIXES = uploads.UPLOAD_SUFFIXES
#: what the uploader takes: any reader's file, several at once, or a zip of them
UPLOAD_TYPES = [s.lstrip(".") for s in (*UPLOAD_SUFFIXES, uploads.ZIP_SUFFIX)]
#: this server's uploads: a per-process folder with a quota, freed when their sessions end
UPLOADS = uploads.UploadStore()
KEY_UPLOAD_IDS = "_run_upload_ids"  # uploader file id -> run id (saved once per upload)


def runs_folder() -> Path | None:
    """The folder the server allows runs from (``ROLL_VIZ_RUNS``, real path), or None."""
    jail = _runs_jail()
    return jail.root if jail is not None else None


def _runs_jail() -> RunsJail | None:
    value = os.environ.get(RUNS_ENV, "").strip()
    if not value:
        return None
    try:
        return RunsJail(Path(value).expanduser())
    except JailError:
        return None


def allowed_runs() -> list[str]:
    """Names of the runs in the allowed folder (files and per-step folders inside it), sorted."""
    jail = _runs_jail()
    if jail is None:
        return []
    names = sorted(
        p.name for p in jail.root.iterdir() if not p.name.startswith(".") and jail.contains(p)
    )
    return names[:MAX_LISTED]


def _release_uploads(holder: str) -> None:
    UPLOADS.release(holder)


@st.cache_resource(scope="session", on_release=_release_uploads, max_entries=1, show_spinner=False)
def _upload_holder() -> str:
    """This session's token in the upload store (its uploads are released with the session)."""
    return uuid.uuid4().hex


def save_upload(name: str, data: bytes) -> str:
    """Keep an uploaded file under its content hash; returns its run id ("upload:<hash>/<name>").

    Raises:
        ValueError: too large, a file type no reader takes, or the server's upload quota is full.
    """
    return "upload:" + UPLOADS.save(name, data, _upload_holder())


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
    run_id = "upload:" + UPLOADS.save_files(pairs, _upload_holder())
    if known:
        seen.clear()  # one upload at a time per session
        seen[ids] = run_id
    return run_id


def _jail_of(run_id: str) -> tuple[RunsJail, str]:
    kind, _, rest = run_id.partition(":")
    if kind == "dir":
        jail = _runs_jail()
        if jail is None:
            raise JailError(f"this server allows no run folder ({RUNS_ENV} is not set)")
        return jail, rest
    if kind == "upload":
        return UPLOADS.jail, rest
    raise JailError("unknown kind of run (expected dir: or upload:)")


def resolve(run_id: str) -> Path:
    """The real path behind a run id, only strictly inside the allowed folder or the uploads.

    Every link is followed and the result must stay inside (``data.runs.jail``): the folder
    itself (``dir:``, ``dir:.``), a link out, a loop or a missing entry are refused; the message
    names neither a server path nor anything the refused file holds.

    Raises:
        ValueError: an unknown id, or one that is refused.
    """
    jail, rest = _jail_of(run_id)
    try:
        if jail is UPLOADS.jail:
            return UPLOADS.resolve(rest, holder=_upload_holder())
        return jail.resolve(rest)
    except JailError as err:
        gone = " (uploads last while a session uses them)" if "missing" in str(err) else ""
        raise ValueError(f"this run {err}{gone}") from None


@st.cache_resource(show_spinner="Scanning the run...", max_entries=8)
def _open_cached(run_id: str) -> Any:
    jail, _ = _jail_of(run_id)
    try:
        return open_run(resolve(run_id), jail=jail)
    except (RunFormatError, OSError) as err:
        raise ValueError(public_message(err, jail)) from None


def open_cached(run_id: str) -> Any:
    """The scanned run (``data.runs.Run``), shared by every session.

    Raises:
        ValueError: refused or unreadable, with a message that shows no server path.
    """
    resolve(run_id)  # the check (and this session's hold on an upload) on every use
    return _open_cached(run_id)


@st.cache_resource(show_spinner="Loading the step...", max_entries=16)
def step_cached(run_id: str, step: int) -> Any:
    """One step of a run as tensors (``data.runs.RunStep``), shared by every session."""
    run = open_cached(run_id)
    try:
        return load_step(run, step)
    except (RunFormatError, OSError) as err:
        raise ValueError(public_message(err, _jail_of(run_id)[0])) from None


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
def pods_sweep_cached(run_id: str, step: int, m: int, _rewards: Any) -> Any:
    """The PODS sweep of a step's max-variance rewards, once per (file, step, m)."""
    return downsampling.sweep(_rewards, sweep_ms(int(_rewards.shape[-1])))


@st.cache_data(show_spinner="Reading the history...", max_entries=8)
def history_cached(run_id: str) -> Any:
    """``analysis.history.history_table`` of a run, computed once per file (not per rerun)."""
    return history.history_table(open_cached(run_id))


@st.cache_data(show_spinner=False, max_entries=32)
def distributions_cached(run_id: str, what: str) -> Any:
    """``analysis.history.distributions`` of a run, once per (file, quantity)."""
    return history.distributions(open_cached(run_id), what)


@st.cache_data(show_spinner=False, max_entries=8)
def metrics_cached(run_id: str) -> Any:
    """``analysis.history.metrics_table`` of a run, once per file."""
    return history.metrics_table(open_cached(run_id))


def parse_source(source: str) -> tuple[str, int]:
    """("<run id>", step) of a ``run:<id>#<step>`` source."""
    body = source.removeprefix("run:")
    run_id, _, step = body.rpartition("#")
    return run_id, int(step)


def step_rollout(source: str) -> Rollout:
    """The step as a Rollout; without token data, one slot per response (and KL exactly 0)."""
    run_id, step_no = parse_source(source)
    step = step_cached(run_id, step_no)
    try:
        return step.to_rollout()
    except ValueError:
        return _scores_only_rollout(step)


def step_scores(source: str) -> torch.Tensor:
    """(B,) the file's response-level scores of the step."""
    run_id, step_no = parse_source(source)
    return step_cached(run_id, step_no).scores.to(torch.float64)


def _scores_only_rollout(step: Any) -> Rollout:
    """A Rollout for a step with no token data: each response is one slot (its whole text)."""
    b = int(step.scores.numel())
    mask = torch.ones(b, 1, dtype=torch.float64)
    zeros = torch.zeros(b, 1, dtype=torch.float64)
    missing = "tokens,logprobs,ref_logprobs,exact_kl,entropy,topk"
    return Rollout(
        prompts=tuple(step.prompts),
        group_ids=step.group_ids,
        responses=tuple(step.responses),
        token_ids=torch.zeros(b, 1, dtype=torch.long),
        tokens=tuple((text[:60] or "(empty)",) for text in step.responses),
        response_mask=mask,
        logprobs=zeros,
        ref_logprobs=zeros,
        exact_kl=zeros,
        entropy=zeros,
        topk_ids=torch.zeros(b, 1, 0, dtype=torch.long),
        topk_logprobs=torch.zeros(b, 1, 0, dtype=torch.float64),
        topk_ref_logprobs=torch.zeros(b, 1, 0, dtype=torch.float64),
        finish_reasons=tuple("unknown" for _ in range(b)),
        greedy_responses=(),
        features=None,
        vocab={0: ""},
        meta=(
            ("missing", missing),
            ("model", f"imported run ({step.source_format})"),
            ("source", step.source_format),
            ("step", step.step),
        ),
    )


# ---------------------------------------------------------------------------------------------
# The run step as the data of every page (the sidebar's data section)
# ---------------------------------------------------------------------------------------------
def stop_run() -> None:
    """Callback: back to the presets (the run step leaves the URL)."""
    st.session_state[KEY_RUN_URL] = ""
    st.session_state[KEY_STEP_URL] = ""


def use_run_step(run_id: str, step: int) -> None:
    """Callback: make one step of an imported run the data of every page (and of the URL)."""
    st.session_state[KEY_RUN_URL] = run_id
    st.session_state[KEY_STEP_URL] = str(step)


def _run_link() -> str | None:
    """The run step named in the URL (``dump=<run id>&dump_step=<step>``) as a source, or None.

    Two bound fields carry it: widgets drawn by the router belong to every page, so Streamlit
    keeps them (and their query parameters) on every page switch, as it keeps the other
    controls. The sidebar names the run in words, so the fields themselves are hidden (CSS).
    """
    hidden = {"label_visibility": "collapsed", "max_chars": 300}
    run_id = bound(st.sidebar.text_input, "Run", value="", key=KEY_RUN_URL, **hidden)
    step = bound(st.sidebar.text_input, "Run step", value="", key=KEY_STEP_URL, **hidden)
    if not run_id or not step:
        return None
    return f"run:{run_id}#{step}"


def run_data(messages: list[str]) -> tuple[str, str, Any] | None:
    """The sidebar's data section when a run step is the data (chosen on Your run or in the URL).

    Returns:
        (source, preset, RunSampling), or None when no run step is chosen (or it cannot be
        opened: then ``messages`` says why).
    """
    source = _run_link()
    if source is None:
        st.session_state.pop(KEY_RUN_SOURCE, None)
        return None
    try:
        run_id, step_no = parse_source(source)
        step = step_cached(run_id, step_no)
    except (ValueError, KeyError, OSError) as err:
        messages.append(f"The run in the link cannot be opened ({err}); using the presets.")
        st.session_state.pop(KEY_RUN_SOURCE, None)
        st.sidebar.button("Forget the link's run", key="stop_run", on_click=stop_run)
        return None
    st.session_state[KEY_RUN_SOURCE] = source
    sb = st.sidebar
    sb.info(
        text.md_escape(
            f"Data: your run {run_id.split('/')[-1].removeprefix('dir:')}, step {step_no} "
            f"({text.count(len(step.prompts), 'prompt')}, {int(step.scores.numel())} samples; "
            f"scores: {step.score_kind} from the file)."
        ),
        icon=":material/folder_open:",
    )
    sb.button("Back to the presets", key="stop_run", on_click=stop_run)
    group_size = int(torch.bincount(step.group_ids).max()) if step.scores.numel() else 1
    preset = st.session_state.get(KEY_PRESET) or next(iter(PRESETS))
    return source, preset, RunSampling(run_id=run_id, step=step_no, group_size=group_size)
