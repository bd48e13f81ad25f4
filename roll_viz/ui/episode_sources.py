"""Where the Episodes page's episodes come from: recorded, sampled live, or an ATIF file.

Three sources give one record (``EpisodeSet``): the recorded episodes of the bundled model
(``data.recorded_episodes``, committed, instant, no model; their tokens' text from
``data.episode_pieces``), live episodes sampled through the rollout door (bounded: the door's
``EpisodeRequest`` refuses more; one press is one request, behind the model's lock, kept in the
shared live store), and an ATIF file (``data.runs.atif``: an upload here, or Your run's file).
Every choice is bound to the URL; a reader's message names the file as the visitor knows it,
never a server path.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import streamlit as st

from roll_viz.core.agentic.episode import Episode
from roll_viz.data import episode_pieces
from roll_viz.data import recorded_episodes as recorded
from roll_viz.data.runs import atif
from roll_viz.data.runs.parse import RunFormatError
from roll_viz.lm import models as models_mod
from roll_viz.lm import rollout as door
from roll_viz.ui import rollout_engine
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.present import top_slot
from roll_viz.ui.resources import cached_models, live_store, model_loaded
from roll_viz.ui.state import AppState
from roll_viz.ui.url import bound
from roll_viz.views import text


@dataclass(frozen=True)
class EpisodeSet:
    """Episodes of one source, ready for the views.

    Attributes:
        episodes: the episodes (the G of one task contiguous).
        pieces: per episode, one display string per position of its transcript.
        source: where they came from, one sentence (shown under the picker).
        eos_id: the end-of-turn id (the pad == EOS mistake), or None.
        unit: "token", or "segment" (a file without token ids: one position per segment).
        reencode: the tokenizer's encode (text -> ids) for ``tool_mask_misaligned``, or None.
        rerender: an episode's transcript re-rendered from text by a template that strips
            ``<think>`` (the extension check), or None (no tokenizer at hand).
        model: the model spec the update step loads (section 4), or None: no step (a file).
        drawn_by: the name of the model that drew the token ids (the step needs that model).
        temperature: the temperature of the episodes' recorded log-probs (the step's logits
            are divided by it).
    """

    episodes: tuple[Episode, ...]
    pieces: tuple[tuple[str, ...], ...]
    source: str
    eos_id: int | None = None
    unit: str = "token"
    reencode: Callable[[str], Sequence[int]] | None = None
    rerender: Callable[[Episode], Sequence[int]] | None = None
    model: str | None = None
    drawn_by: str = ""
    temperature: float = 1.0


SOURCES = {
    "recorded": "Recorded episodes of the bundled model (instant)",
    "live": "Sample live on the model",
    "file": "An ATIF file (agent trajectories)",
}
KEY_SOURCE = "ep_src"
KEY_SET = "ep_set"
KEY_TASKS = "ep_tasks"
KEY_G = "ep_g"
KEY_TURNS = "ep_turns"
KEY_TOKENS = "ep_tokens"
KEY_SEED = "ep_seed"
KEY_TEMP = "ep_temp"
KEY_REQUEST = "_ep_request"  # the last live request this session sampled (a small record)
KEY_UPLOAD = "ep_upload"
DEFAULT_TASKS = ("calc-1", "lookup-2")
TEMPERATURES = (0.0, 0.3, 0.5, 0.7, 1.0, 1.3)
#: an ATIF upload larger than this is refused (the reader has its own caps on what it parses)
MAX_ATIF_BYTES = 20 * 2**20

SOURCE_FIELDS: dict[str, Field] = {
    KEY_SOURCE: Field("recorded", options=tuple(SOURCES)),
    KEY_SET: Field(
        next(iter(recorded.RECORDED_EPISODES)), options=tuple(recorded.RECORDED_EPISODES)
    ),
    KEY_G: Field(4, 1, door.MAX_EPISODE_GROUP, integer=True),
    KEY_TURNS: Field(3, 1, door.MAX_TURNS, integer=True),
    KEY_TOKENS: Field(24, 8, door.MAX_TURN_TOKENS, integer=True),
    KEY_SEED: Field(0, 0, 2**31 - 1, integer=True),
    KEY_TEMP: Field(0.7, options=TEMPERATURES),
}


def _notice(lines: list[str]) -> None:
    if lines:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in lines), icon=":material/info:")


def token_pieces(bundle: models_mod.ModelBundle, episode: Episode) -> tuple[str, ...]:
    """Each token of ``episode`` decoded on its own (the tokenizer under the model's lock)."""
    with bundle.lock:
        return tuple(bundle.tokenizer.decode([t]) for t in episode.token_ids)


def id_pieces(episode: Episode, unit: str) -> tuple[str, ...]:
    """Display strings without a tokenizer: each token by its id, or each segment's text."""
    if unit == "segment":
        return tuple(s.text for s in episode.segments)
    return tuple(f"[{t}]" for t in episode.token_ids)


def _logprob_temperature(batch: door.EpisodeBatch, request: door.EpisodeRequest) -> float:
    """In-process log-probs are at the sampling temperature; an engine's are raw (1)."""
    return request.logprob_temperature if not batch.engine else 1.0


def _live_set(model: str, request: door.EpisodeRequest) -> EpisodeSet:
    """The request's episodes, sampled once (progress drawn only then) and kept in the store."""
    store = live_store()
    key = ("episodes", model, request, door.label(model))
    found = store.get(key)
    if found is not None:
        return found
    try:
        bundle = ensure_model(model)
    except models_mod.ModelNotFoundError as err:
        st.error(f"The live model is not available: {text.md_escape(str(err))}")
        st.stop()
    n = len(request.tasks) * request.group_size
    with top_slot(), st.status(f"Sampling {n} episodes with {bundle.name}", expanded=True) as box:
        bar = st.progress(0.0, text="starting")

        def progress(fraction: float, words: str) -> None:
            bar.progress(min(max(float(fraction), 0.0), 1.0), text=words)

        got = rollout_engine.engine(model, bundle).episodes(request, progress)
        box.update(label=f"Sampled {n} episodes", state="complete", expanded=False)
    eos = bundle.eos_ids[0] if bundle.eos_ids else None

    def encode(words: str) -> list[int]:
        with bundle.lock:
            return list(bundle.tokenizer(words, add_special_tokens=False)["input_ids"])

    data = EpisodeSet(
        got.episodes,
        tuple(token_pieces(bundle, e) for e in got.episodes),
        f"{n} episodes sampled live from {got.model}. {got.note}",
        eos_id=eos,
        reencode=encode,
        rerender=partial(door.reencode, bundle, strip_think=True),
        model=model,
        drawn_by=got.model,
        temperature=_logprob_temperature(got, request),
    )
    store.put(key, data)
    return data


def live_controls(state: AppState) -> EpisodeSet | None:
    """The live request's controls (bounded by the door's limits) and its episodes, if sampled."""
    tasks = st.multiselect(
        f"Tasks (at most {door.MAX_EPISODE_TASKS})",
        list(door.TASKS),
        default=list(DEFAULT_TASKS),
        max_selections=door.MAX_EPISODE_TASKS,
        key=KEY_TASKS,
        format_func=lambda t: f"{t}: {door.TASKS[t].question}",
    )
    st.caption(
        "calculator: the model writes calc <expression>; lookup: lookup <item> in a price list; "
        "guess: guess <n> and hear higher or lower. Bounds: "
        f"{door.MAX_EPISODE_TASKS} tasks, G <= {door.MAX_EPISODE_GROUP}, "
        f"{door.MAX_TURNS} turns, {door.MAX_TURN_TOKENS} tokens a turn."
    )
    c1, c2, c3, c4, c5 = st.columns(5)
    g = c1.number_input(
        "Episodes per task G", 1, door.MAX_EPISODE_GROUP, 4, key=KEY_G, help="The group."
    )
    turns = c2.number_input("Max turns", 1, door.MAX_TURNS, 3, key=KEY_TURNS)
    tokens = c3.number_input(
        "Max tokens per turn", 8, door.MAX_TURN_TOKENS, 24, step=8, key=KEY_TOKENS
    )
    temp = c4.selectbox("Temperature", list(TEMPERATURES), index=3, key=KEY_TEMP)
    seed = c5.number_input("Seed", 0, 2**31 - 1, 0, key=KEY_SEED)
    try:
        request = door.EpisodeRequest(
            tuple(tasks), int(g), int(turns), int(tokens), float(temp), seed=int(seed)
        )
    except ValueError as err:
        st.error(text.md_escape(str(err)), icon=":material/error:")
        return None
    if st.button("Sample episodes", type="primary", key="ep_sample", icon=":material/play_arrow:"):
        st.session_state[KEY_REQUEST] = request
    asked = st.session_state.get(KEY_REQUEST)
    if asked is None:
        st.info(
            "Press **Sample episodes**: the model plays each task up to the max turns, the tool "
            "answering each call.",
            icon=":material/info:",
        )
        return None
    if asked != request:
        st.caption("The settings changed: press Sample episodes to draw them.")
    return _live_set(state.model, asked)


def file_controls() -> EpisodeSet | None:
    """An uploaded ATIF file's episodes (bad trajectories named, the rest kept)."""
    upload = st.file_uploader(
        f"ATIF trajectory file (.json or .jsonl, at most {MAX_ATIF_BYTES // 2**20} MB)",
        type=["json", "jsonl"],
        key=KEY_UPLOAD,
    )
    if upload is None:
        st.info("Upload an ATIF file (Harbor's trajectory.json).", icon=":material/info:")
        return None
    if upload.size > MAX_ATIF_BYTES:
        st.error(f"The file is larger than {MAX_ATIF_BYTES // 2**20} MB.", icon=":material/error:")
        return None
    return atif_set(upload.name, upload.getvalue())


@st.cache_data(show_spinner=False, max_entries=8, ttl=3600)
def _read_atif(path: str, size: int) -> atif.AtifRead:
    """The file read once per (path, size) (``size`` only keys the cache)."""
    return atif.read_atif(path)


@st.cache_data(show_spinner=False, max_entries=8, ttl=3600)
def _read_upload(digest: str, suffix: str, _data: bytes) -> tuple[atif.AtifRead | str, str]:
    """(what the reader gave, or its refusal's message; the temporary path) per content hash."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(_data)
        try:
            return atif.read_atif(path), str(path)
        except (RunFormatError, OSError) as err:
            return str(err), str(path)


def is_atif(path: Path) -> bool:
    """The file names an ATIF schema version in its first bytes (``data.runs.atif.is_atif``)."""
    return atif.is_atif(path)


def _public(message: str, path: Path, name: str) -> str:
    """A reader's message with the server path replaced by the name the visitor knows."""
    return message.replace(str(path), name)


def atif_from_path(path: Path, name: str) -> EpisodeSet | None:
    """An ATIF file on the server (Your run's upload or folder entry), drawn as ``atif_drawn``.

    Args:
        path: the file on the server.
        name: how the page names it (never the server path).
    """
    try:
        read: atif.AtifRead | str = _read_atif(str(path), path.stat().st_size)
    except (RunFormatError, OSError) as err:
        read = str(err)
    return atif_drawn(read, path, name)


def atif_drawn(read: atif.AtifRead | str, path: Path, name: str) -> EpisodeSet | None:
    """A reader's result: its problems and notes drawn, the episodes (None when none is read).

    Args:
        read: the reader's result, or the message of its refusal of the whole file.
        path: the file the reader was given (its name is replaced in every message).
        name: how the page names the file.
    """
    if isinstance(read, str):
        st.error(text.md_escape(_public(read, path, name)), icon=":material/error:")
        return None
    for problem in read.problems:
        st.warning(text.md_escape(_public(str(problem), path, name)), icon=":material/warning:")
    if read.dropped:
        st.caption(f"... and {read.dropped} more trajectories skipped.")
    for note in read.notes:
        st.caption(text.md_escape(note))
    if not read.episodes:
        st.error("No trajectory of this file could be read.", icon=":material/error:")
        return None
    unit = read.unit
    words = (
        "the tokens are shown by id (the file's tokenizer is unknown; the text is in the table)"
        if unit == "token"
        else "no token ids: one position per message"
    )
    return EpisodeSet(
        read.episodes,
        tuple(id_pieces(e, unit) for e in read.episodes),
        f"{text.count(len(read.episodes), 'trajectory', 'trajectories')} from {name}: {words}.",
        unit=unit,
    )


def atif_set(name: str, data: bytes) -> EpisodeSet | None:
    """The episodes of an uploaded ATIF file's bytes (read once per content)."""
    suffix = ".jsonl" if name.endswith(".jsonl") else ".json"
    read, path = _read_upload(hashlib.sha256(data).hexdigest(), suffix, data)
    return atif_drawn(read, Path(path), name)


def source_controls(state: AppState) -> EpisodeSet | None:
    """Where the episodes come from (URL-bound), and the episodes; None when there are none yet."""
    _notice(check_fields(SOURCE_FIELDS))
    # a bound widget writes its shown label in the link: the options are the short names
    source = bound(
        st.radio,
        "Episodes from",
        list(SOURCES),
        index=0,
        horizontal=True,
        key=KEY_SOURCE,
        captions=list(SOURCES.values()),
    )
    if source == "live":
        data = live_controls(state)
    elif source == "file":
        data = file_controls()
    else:
        data = recorded_set(state.model)
    if data is not None:
        st.caption(text.md_escape(data.source))
    return data


def recorded_set(model: str) -> EpisodeSet:
    """The recorded episodes of the bundled model (committed with the app: no model needed).

    When ``model`` is loaded and is the one that recorded them, its tokenizer re-renders the
    history for the extension check (never loaded for it).
    """
    names = list(recorded.RECORDED_EPISODES)
    name = bound(st.selectbox, "Recorded episodes", names, index=0, key=KEY_SET)
    about = recorded.RECORDED_EPISODES[name]
    st.caption(text.md_escape(f"{about.title}. {about.description}"))
    got = recorded.load_recorded_episodes(name)
    n = len(got.batch.episodes)
    rerender = None
    if model_loaded(model) and cached_models(model).name == got.batch.model:
        bundle = cached_models(model)
        rerender = partial(door.reencode, bundle, strip_think=True)
    return EpisodeSet(
        got.batch.episodes,
        tuple(episode_pieces.pieces(e) for e in got.batch.episodes),
        f"{n} episodes of {got.batch.model}, recorded with: {got.command} "
        f"({got.seconds:.0f} s on a CPU). {got.batch.note}",
        eos_id=episode_pieces.eos_id(),
        rerender=rerender,
        model=model,
        drawn_by=got.batch.model,
        temperature=_logprob_temperature(got.batch, got.request),
    )
