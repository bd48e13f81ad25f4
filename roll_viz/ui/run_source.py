"""A run step as the data of every page: which files may be opened, the cached scan, one step.

A run comes from a folder whoever starts the server allows (``ROLL_VIZ_RUNS=DIR``; only entries
that stay inside it, never a path a visitor types: ``data.runs.jail``) or from an upload (kept in
a per-process folder with a quota, named by the content's hash, and freed when the sessions
using it end: ``data.runs.uploads``). The scan (``data.runs.open_run``: per-step summaries, bounded
memory) and each loaded step are shared by every session; nothing read is executed.

A run step becomes the data source of every page (``state.source == "run:<id>#<step>"``): its
scores are the file's, its tokens and log-probs the file's where it has them. A file without
token log-probs still drives the reward, advantage, local-vs-global and framework pages; the
token pages say what is missing. ``flow`` reads the step here and the sidebar draws its data
section here; the Your run page's glue (``your_run_page``: the picker, the uploader, the
history and sweeps) builds on this module, never the other way round.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import streamlit as st
import torch

from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.data.presets import PRESETS
from roll_viz.data.runs import MAX_FILES, RunFormatError, load_step, open_run, uploads
from roll_viz.data.runs.detect import step_folder
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
#: this server's uploads: a per-process folder with a quota, freed when their sessions end
UPLOADS = uploads.UploadStore()


def runs_folder() -> Path | None:
    """The folder the server allows runs from (``ROLL_VIZ_RUNS``, real path), or None."""
    jail = runs_jail()
    return jail.root if jail is not None else None


def runs_jail() -> RunsJail | None:
    """The allowed folder's jail (``ROLL_VIZ_RUNS``), None when unset or unusable."""
    value = os.environ.get(RUNS_ENV, "").strip()
    if not value:
        return None
    try:
        return RunsJail(Path(value).expanduser())
    except JailError:
        return None


def _release_uploads(holder: str) -> None:
    UPLOADS.release(holder)


@st.cache_resource(scope="session", on_release=_release_uploads, max_entries=1, show_spinner=False)
def upload_holder() -> str:
    """This session's token in the upload store (its uploads are released with the session)."""
    return uuid.uuid4().hex


def _jail_of(run_id: str) -> tuple[RunsJail, str]:
    kind, _, rest = run_id.partition(":")
    if kind == "dir":
        jail = runs_jail()
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
            return UPLOADS.resolve(rest, holder=upload_holder())
        return jail.resolve(rest)
    except JailError as err:
        gone = " (uploads last while a session uses them)" if "missing" in str(err) else ""
        raise ValueError(f"this run {err}{gone}") from None


def run_version(run_id: str) -> str:
    """What the run's files are now (names, inodes, sizes, modification times) as a short hash.

    The scans below are cached under it: a dump rewritten under the same name, or a folder a
    running job keeps adding step files to, is read anew on the next rerun; an unchanged run is
    not. One ``stat`` per file, nothing read (about 5 ms for a folder of 1,000 step files);
    the sidebar takes it once a rerun and the state carries it (``RunSampling.version``).

    Raises:
        ValueError: an unknown or refused run id (``resolve``).
    """
    path = resolve(run_id)
    if path.is_file():
        files = [(path.name, path)]
    else:  # a writer's hidden temporary files are not the run's
        with os.scandir(step_folder(path, _jail_of(run_id)[0])) as entries:
            files = sorted((e.name, e) for e in entries if not e.name.startswith("."))
    digest = hashlib.sha256()
    for name, file in files[: 2 * MAX_FILES]:
        try:
            info = file.stat()
        except OSError:  # gone between the listing and the stat: the next rerun sees it
            continue
        digest.update(f"{name}\0{info.st_ino}\0{info.st_mtime_ns}\0{info.st_size}\n".encode())
    return digest.hexdigest()[:16]


@st.cache_resource(show_spinner="Scanning the run...", max_entries=8)
def _open_cached(run_id: str, version: str) -> Any:  # version: the cache key (run_version)
    jail, _ = _jail_of(run_id)
    try:
        return open_run(resolve(run_id), jail=jail)
    except (RunFormatError, OSError) as err:
        raise ValueError(public_message(err, jail)) from None


def open_cached(run_id: str, version: str | None = None) -> Any:
    """The scanned run (``data.runs.Run``) as its files are now, shared by every session.

    Args:
        run_id: the run.
        version: its ``run_version`` when this rerun has taken it (else it is taken here).

    Raises:
        ValueError: refused or unreadable, with a message that shows no server path.
    """
    # the check (and this session's hold on an upload) on every use: run_version resolves
    return _open_cached(run_id, version or run_version(run_id))


@st.cache_resource(show_spinner="Loading the step...", max_entries=16)
def _step_cached(run_id: str, version: str, step: int) -> Any:
    try:
        return load_step(_open_cached(run_id, version), step)
    except (RunFormatError, OSError) as err:
        raise ValueError(public_message(err, _jail_of(run_id)[0])) from None


def step_cached(run_id: str, step: int, version: str | None = None) -> Any:
    """One step of a run as tensors (``data.runs.RunStep``) as its files are now, shared.

    ``version`` as for ``open_cached``.
    """
    return _step_cached(run_id, version or run_version(run_id), step)


def parse_source(source: str) -> tuple[str, int]:
    """("<run id>", step) of a ``run:<id>#<step>`` source."""
    body = source.removeprefix("run:")
    run_id, _, step = body.rpartition("#")
    return run_id, int(step)


def step_rollout(source: str, version: str | None = None) -> Rollout:
    """The step as a Rollout; without token data, one slot per response (and KL exactly 0)."""
    run_id, step_no = parse_source(source)
    step = step_cached(run_id, step_no, version)
    try:
        return step.to_rollout()
    except ValueError:
        return _scores_only_rollout(step)


def step_scores(source: str, version: str | None = None) -> torch.Tensor:
    """(B,) the file's response-level scores of the step."""
    run_id, step_no = parse_source(source)
    return step_cached(run_id, step_no, version).scores.to(torch.float64)


def _scores_only_rollout(step: Any) -> Rollout:
    """A Rollout for a step with no token data: each response is one slot (its whole text)."""
    b = int(step.scores.numel())
    mask = torch.ones(b, 1, dtype=torch.float64)
    zeros = torch.zeros(b, 1, dtype=torch.float64)
    missing = "tokens,logprobs,ref_logprobs,exact_kl,entropy,topk"
    return build_rollout(
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
        meta=RolloutMeta(
            missing=missing,
            model=f"imported run ({step.source_format})",
            source=step.source_format,
            step=step.step,
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
        version = run_version(run_id)  # once a rerun: the state carries it to every page
        step = step_cached(run_id, step_no, version)
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
    return source, preset, RunSampling(run_id, step_no, group_size, version=version)
