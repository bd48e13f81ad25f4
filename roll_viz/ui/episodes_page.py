"""Streamlit glue of the Episodes page: where the episodes come from, the mask and credit views.

Three sources give one record (``EpisodeSet``): the recorded episodes of the bundled model
(committed, instant, no model), live episodes sampled through the rollout door (bounded: the
door's ``EpisodeRequest`` refuses more; one request at a time behind the model's lock, cached in
the shared live store), and an imported ATIF file (``data.runs.atif``). ``draw_views`` draws the
mask and credit views of any set; the Your run page calls it for an ATIF upload. Every knob is
bound to the URL. Model and tool text is untrusted: it reaches the page only as escaped chips
(``views.episode_charts``), ``st.code`` and plain dataframe cells.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from roll_viz.analysis import episode_lab as lab
from roll_viz.core.agentic import credit as credit_mod
from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode
from roll_viz.data.runs import atif
from roll_viz.data.runs.parse import RunFormatError
from roll_viz.lm import models as models_mod
from roll_viz.lm import rollout as door
from roll_viz.ui import rollout_engine
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.present import top_slot
from roll_viz.ui.resources import live_store
from roll_viz.ui.state import AppState
from roll_viz.ui.url import bound
from roll_viz.ui.widgets import chips, explainer, plot
from roll_viz.views import episode_charts as charts
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
    """

    episodes: tuple[Episode, ...]
    pieces: tuple[tuple[str, ...], ...]
    source: str
    eos_id: int | None = None
    unit: str = "token"
    reencode: Callable[[str], Sequence[int]] | None = None
    rerender: Callable[[Episode], Sequence[int]] | None = None


# ------------------------------------------------------------------------------ the sources

SOURCES = {
    "recorded": "Recorded episodes of the bundled model (instant)",
    "live": "Sample live on the model",
    "file": "An ATIF file (agent trajectories)",
}
KEY_SOURCE = "ep_src"
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
    KEY_G: Field(4, 1, door.MAX_EPISODE_GROUP, integer=True),
    KEY_TURNS: Field(3, 1, door.MAX_TURNS, integer=True),
    KEY_TOKENS: Field(24, 8, door.MAX_TURN_TOKENS, integer=True),
    KEY_SEED: Field(0, 0, 2**31 - 1, integer=True),
    KEY_TEMP: Field(0.7, options=TEMPERATURES),
}


def _notice(lines: list[str]) -> None:
    if lines:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in lines), icon=":material/info:")


def episode_label(episodes: tuple[Episode, ...], i: int) -> str:
    """How episode ``i`` reads in the picker: task, turns, outcome, why it stopped."""
    e = episodes[i]
    return (
        f"{i + 1}: {e.task} ({e.env}), {text.count(e.n_turns, 'turn')}, "
        f"outcome {e.outcome:g}, stop: {e.stop}"
    )


def transcript_table(episode: Episode) -> pd.DataFrame:
    """The transcript as plain rows (role, turn, tokens, text): a dataframe never renders HTML."""
    return pd.DataFrame(
        [
            {
                "role": s.role,
                "turn": str(s.turn + 1) if s.turn >= 0 else "prompt",
                "tokens": len(s.token_ids),
                "sampled": s.sampled,
                "tool call": s.tool_call or "",
                "text": s.text,
            }
            for s in episode.segments
        ]
    )


def pick_episode(data: EpisodeSet, key: str) -> int:
    """The episode the chips show (URL-bound by its number)."""
    n = len(data.episodes)
    _notice(check_fields({key: Field(1, 1, n, integer=True)}))
    if n == 1:
        return 0
    choice = bound(st.selectbox, "Episode", list(range(1, n + 1)), index=0, key=key)
    st.caption(text.md_escape(episode_label(data.episodes, int(choice) - 1)))
    return int(choice) - 1


# ------------------------------------------------------------------------------ the views

#: the mask view's choices: the correct mask, each known mistake, and the re-encoding template
THINK = "think_template"
#: the mask choices as shown (a bound widget's link holds the shown label) -> rule name
MASK_CHOICES = {
    "right mask": "correct",
    **{rule.label: name for name, rule in masks.MASK_RULES.items() if name != "correct"},
    "<think> stripped, re-encoded": THINK,
}
#: the credit rules as shown -> rule name
CREDIT_CHOICES = {rule.label: name for name, rule in credit_mod.CREDIT_RULES.items()}
DEFAULT_CREDIT = credit_mod.CREDIT_RULES["episode_grpo"].label
GAMMAS = (1.0, 0.99, 0.95, 0.9, 0.8, 0.5, 0.0)
REWARDS = (0.0, 0.1, 0.2, 0.25, 0.5, 1.0)
#: the advantage colour range of the token chips (fixed: a rule's scale is visible)
ADVANTAGE_RANGE = 2.0


def _fields(prefix: str, n: int) -> dict[str, Field]:
    return {
        f"{prefix}_row": Field(1, 1, max(n, 1), integer=True),
        f"{prefix}_mask": Field("right mask", options=tuple(MASK_CHOICES)),
        f"{prefix}_credit": Field(DEFAULT_CREDIT, options=tuple(CREDIT_CHOICES)),
        f"{prefix}_gamma": Field(1.0, options=GAMMAS),
        f"{prefix}_r": Field(0.5, options=REWARDS),
    }


def _mask_notes(name: str, data: EpisodeSet) -> str:
    if name == THINK:
        return (
            "A template that drops the reasoning of earlier assistant turns (Qwen3's) re-encodes "
            "the history as other tokens than were sampled: the trainer then scores tokens the "
            "sampler never drew (the extension property broken). Outlined: the positions where "
            "the re-encoded transcript differs."
        )
    rule = masks.MASK_RULES[name]
    return f"{rule.what} ({rule.source})"


def draw_views(data: EpisodeSet, prefix: str = "ep") -> None:
    """The mask and credit views of ``data``: chips, mistakes, rules side by side, the bias.

    Args:
        data: the episodes and their tokens' display strings.
        prefix: the widgets' key prefix (also their URL parameters).
    """
    _notice(check_fields(_fields(prefix, len(data.episodes))))
    row = pick_episode(data, f"{prefix}_row")
    episodes = lab.selected_first(data.episodes, row)
    pieces = (data.pieces[row], *data.pieces[:row], *data.pieces[row + 1 :])
    episode = episodes[0]
    with st.expander("The transcript as text (exactly as recorded)"):
        st.dataframe(transcript_table(episode), hide_index=True, key=f"{prefix}_text")

    st.header("1. Which tokens get gradient?")
    name = MASK_CHOICES[
        bound(
            st.radio,
            "Mask",
            list(MASK_CHOICES),
            index=0,
            key=f"{prefix}_mask",
            horizontal=True,
            help="The right mask, or one of the known mistakes: what it trains, and what it "
            "does to the loss and its gradient.",
        )
    ]
    mlab = lab.mask_lab(episodes, data.eos_id, data.reencode, data.unit)
    right = mlab.effects["correct"]
    shown = mlab.effects.get(name, right)
    differs: Sequence[int] = ()
    if name == THINK:
        if data.rerender is None:
            st.info(
                "The re-encoding needs the tokenizer that wrote these tokens: sample live to "
                "see it.",
                icon=":material/info:",
            )
        else:
            differs = lab.differing_positions(episode.token_ids, data.rerender(episode))
    elif name == "mask_as_attention":
        differs = [i for i, v in enumerate(mlab.row(shown.broken.double())) if v > 0]
    st.caption(_mask_notes(name, data))
    chips(charts.mask_legend_html(name not in ("correct", THINK), bool(differs)))
    chips(
        charts.mask_html(
            episode,
            pieces[0],
            mlab.row(shown.mask.double()),
            mlab.row(right.mask.double()),
            differs,
            wrap=data.unit == "segment",
        )
    )
    _effect_metrics(name, shown, right, mlab, differs)
    st.caption(
        "Advantages for these losses: episode-level GRPO (each episode's return against its "
        "task group); section 2 compares the rules. Loss: -sum m A log pi / sum m at the first "
        "step; gradient d L / d log pi = -m A / sum m."
    )
    with st.expander("Every mask on this batch (table)"):
        st.dataframe(lab.rule_table(mlab), hide_index=True, key=f"{prefix}_rules")

    _credit_section(data, episodes, pieces, mlab, prefix)


def _effect_metrics(name, shown, right, mlab, differs) -> None:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(
        "Tokens trained",
        shown.n_trained,
        delta=shown.n_trained - right.n_trained or None,
        delta_color="off",
        help="Positions in the mask, over the whole batch (the right mask: sampled tokens).",
    )
    share = lab.context_share(shown, mlab.batch)
    c2.metric(
        "Gradient on context",
        f"{share:.1%}",
        help="Share of sum |d L / d log pi| on tokens the sampler did not write (tool output, "
        "prompt, history): 0 with the right mask.",
    )
    c3.metric(
        "A right token's gradient",
        f"x {shown.scale:.3g}",
        help="How the gradient of a correctly trained token is scaled: the right mask's count "
        "over this mask's count (token-mean).",
    )
    if name == THINK or name == "mask_as_attention":
        c4.metric(
            "Positions that differ" if name == THINK else "Positions with broken context",
            len(differs),
            help="Re-encoded tokens that are not the sampled ones"
            if name == THINK
            else "Positions whose causal context loses the tool output when the loss mask is "
            "the attention mask.",
        )
    else:
        loss = "n/a" if shown.loss is None else f"{shown.loss:.4g}"
        c4.metric(
            "Loss",
            loss,
            help="None when the mask trains a token the sampler has no log-prob for (it did not "
            "write it): the gradient above still acts on it.",
        )


def _credit_section(data, episodes, pieces, mlab, prefix: str) -> None:
    st.header("2. Credit per turn: the rules side by side")
    c1, c2 = st.columns([1, 2])
    with c1:
        gamma = bound(
            st.select_slider,
            "gamma (discount across turns)",
            list(GAMMAS),
            value=1.0,
            key=f"{prefix}_gamma",
            help="Read by the rules with returns (per-turn returns, GAE, GiGPO, progress deltas).",
        )
    params = credit_mod.CreditParams(gamma=float(gamma))
    credits = lab.all_credit(episodes, params, data.unit)
    episode = episodes[0]
    labels = [c.label for c in credits.values()]
    plot(
        charts.credit_figure(
            labels,
            [c.turn_advantages[0] for c in credits.values()],
            f"Advantage per turn of episode {episode.task} (outcome {episode.outcome:g}), "
            "every rule",
        ),
        key=f"{prefix}_credit_fig",
    )
    st.dataframe(lab.credit_table(credits), hide_index=True, key=f"{prefix}_credit_table")
    with c2:
        name = CREDIT_CHOICES[
            bound(
                st.selectbox,
                "Rule on the tokens",
                list(CREDIT_CHOICES),
                index=list(CREDIT_CHOICES).index(DEFAULT_CREDIT),
                key=f"{prefix}_credit",
            )
        ]
    chosen = credits[name]
    st.subheader(f"{chosen.label}: the advantage on every token")
    st.markdown(f"**{text.md_escape(chosen.source)}**")
    st.code(f"{chosen.formula}\n{chosen.worked}", language=None, wrap_lines=True)
    for note in chosen.notes:
        st.caption(text.md_escape(note))
    chips(
        charts.advantage_legend_html(ADVANTAGE_RANGE)
        + charts.advantage_html(
            episode,
            pieces[0],
            mlab.row(chosen.token_advantages),
            mlab.row(mlab.effects["correct"].mask.double()),
            ADVANTAGE_RANGE,
            wrap=data.unit == "segment",
        )
    )
    explainer(
        "Every token of turn t carries turn t's advantage; the mask decides which of them "
        "count (grey: no gradient). **Outcome broadcast** and **episode GRPO** give every turn "
        "the same number; the **per-turn** rules tell the turns apart when there are turn "
        "rewards; **GiGPO** compares turns that started from the same state.",
        title="What to look at",
    )

    st.header("3. Which rule rewards an extra turn?")
    st.dataframe(lab.stop_table(episodes, credits), hide_index=True, key=f"{prefix}_stops")
    st.caption(
        "Mean advantage of the first turn of the episodes that took n turns, under each rule. "
        "An unbiased rule moves with the outcome, not with the number of turns."
    )
    _bias(prefix)


def _bias(prefix: str) -> None:
    """The bias of verl #7244, exactly, for a policy that chooses when to stop."""
    reward = bound(
        st.select_slider,
        "Intermediate reward per turn E[r_k] (e.g. a well-formed tool call)",
        list(REWARDS),
        value=0.5,
        key=f"{prefix}_r",
    )
    probs, outcome = (0.5, 0.25, 0.25), (1.0, 1.0, 1.0)
    bias = credit_mod.turn_index_bias(probs, [float(reward)] * 3, outcome)
    plot(
        charts.bias_figure(bias.stops, bias.turn_index, bias.reference),
        key=f"{prefix}_bias_fig",
    )
    extra = ", ".join(f"{x:+.4g}" for x in bias.per_extra_turn)
    st.markdown(
        f"**verl #7244:** per extra turn the per-turn-index baseline moves the advantage by "
        f"**{text.md_escape(extra)}** against the unbiased one (= -E[r_k])."
    )
    st.caption(text.md_escape(bias.text))


def token_pieces(bundle: models_mod.ModelBundle, episode: Episode) -> tuple[str, ...]:
    """Each token of ``episode`` decoded on its own (the tokenizer under the model's lock)."""
    with bundle.lock:
        return tuple(bundle.tokenizer.decode([t]) for t in episode.token_ids)


def id_pieces(episode: Episode, unit: str) -> tuple[str, ...]:
    """Display strings without a tokenizer: each token by its id, or each segment's text."""
    if unit == "segment":
        return tuple(s.text for s in episode.segments)
    return tuple(f"[{t}]" for t in episode.token_ids)


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
        rerender=lambda e: door.reencode(bundle, e, strip_think=True),
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
        data = recorded_set()
    if data is not None:
        st.caption(text.md_escape(data.source))
    return data


def recorded_set() -> EpisodeSet | None:
    """The recorded episodes of the bundled model (committed with the app: no model needed)."""
    st.info("No recorded episodes yet.", icon=":material/info:")
    return None
