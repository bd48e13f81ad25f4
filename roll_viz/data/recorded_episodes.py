"""Recorded multi-turn episodes shipped with the app: the bundled model against the toy tools.

Each file in ``roll_viz/data/recorded_episodes/`` (JSON, schema ``roll-viz.episodes/1``) holds
one ``lm.episodes.EpisodeBatch`` sampled in-process from SmolLM2-135M on CPU by
``python -m roll_viz episodes`` (the command is in the file and in ``RECORDED_EPISODES``), so a
page opens the presets at once: ``load_recorded_episodes(name)`` returns a ``RecordedEpisodes``
(no model, no waiting).

The format, one object: ``schema``, ``model``, ``engine``, ``note``, ``command``, ``seconds``
(wall time of the recording), ``request`` (the ``EpisodeRequest``'s fields, policy left out:
the presets are the base model) and ``episodes``, each with its ``Episode`` fields and its
segments as ``{role, text, ids, turn, sampled, lp, ref, call}`` (``lp``/``ref``: per-token
log-probs rounded to ``DIGITS`` decimals, null on unsampled segments), and ``reencoded`` /
``reencoded_strip_think``: the transcript re-encoded from its text by the chat template, plain
and with earlier ``<think>`` blocks stripped (``lm.transcript.reencode``; null where it gives back
the transcript's own ids). ``episodes_to_json`` writes it, ``episodes_from_json`` reads it back
(one clear ``ValueError`` for a bad file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.lm.episodes import (
    MAX_EPISODE_GROUP,
    MAX_EPISODE_TASKS,
    MAX_EPISODE_TOKENS,
    EpisodeBatch,
    EpisodeRequest,
)

SCHEMA = "roll-viz.episodes/1"
DIGITS = 5  # log-probs are stored rounded to this many decimals
MAX_FILE_BYTES = 2 * 2**20  # a recorded file larger than this is refused unread
RECORDED_EPISODES_DIR = Path(__file__).with_name("recorded_episodes")
REQUEST_FIELDS = (
    "tasks",
    "group_size",
    "max_turns",
    "max_turn_tokens",
    "temperature",
    "top_p",
    "seed",
)


@dataclass(frozen=True)
class RecordedEpisodeSet:
    """One shipped file.

    Attributes:
        name: its id (the file stem).
        title: what it shows, for a picker.
        description: what to look for, one or two sentences.
    """

    name: str
    title: str
    description: str


RECORDED_EPISODES = {
    s.name: s
    for s in (
        RecordedEpisodeSet(
            "calculator",
            "Calculator: 17 * 23 + 4 and (48 - 13) * 6",
            "Most episodes call the calculator and copy its number into the answer; the ones "
            "that type the expression wrong answer a wrong number (outcome 0), and the ones "
            "that never call the tool run out of turns.",
        ),
        RecordedEpisodeSet(
            "lookup",
            "Lookup table: one price, then the sum of two",
            "Every episode finds the price of cheese and every one fails apple plus bread: "
            "both groups have equal outcomes (a GRPO advantage of 0 for all), while the "
            "per-turn progress reward still credits the apple lookup.",
        ),
        RecordedEpisodeSet(
            "think",
            "Calculator, thinking first",
            "The calculator's questions with a <think> block asked for before each call: the "
            "model reasons its own (wrong) arithmetic instead of calling the tool. The worked "
            "example's <think> blocks are earlier assistant turns too: a chat template that "
            "strips them gives the trainer another context than the one sampled from.",
        ),
        RecordedEpisodeSet(
            "guess",
            "Guess the number from 1 to 10",
            "Each guess's feedback rules out part of the range (the per-turn progress reward, "
            "summing to 1 when the number is found); episodes that saw the same feedback share "
            "an anchor state (GiGPO).",
        ),
    )
}


@dataclass(frozen=True)
class RecordedEpisodes:
    """A recorded file, read.

    Attributes:
        name: the file stem.
        batch: the episodes, how they were drawn (``EpisodeBatch``).
        request: the request that drew them (policy None: the base model).
        command: the CLI command that recorded them.
        seconds: the recording's wall time.
        reencoded: (B,) each transcript re-encoded from its text by the model's chat template
            (equal to ``Episode.token_ids`` where the round trip gives the sampled ids back).
        reencoded_strip_think: (B,) the same with earlier turns' ``<think>`` blocks stripped.
    """

    name: str
    batch: EpisodeBatch
    request: EpisodeRequest
    command: str
    seconds: float
    reencoded: tuple[tuple[int, ...], ...]
    reencoded_strip_think: tuple[tuple[int, ...], ...]


def _segment_dict(seg: Segment) -> dict[str, Any]:
    def rounded(values: tuple[float, ...] | None) -> list[float] | None:
        return None if values is None else [round(v, DIGITS) for v in values]

    return {
        "role": seg.role,
        "text": seg.text,
        "ids": list(seg.token_ids),
        "turn": seg.turn,
        "sampled": seg.sampled,
        "lp": rounded(seg.logprobs),
        "ref": rounded(seg.ref_logprobs),
        "call": seg.tool_call,
    }


def _episode_dict(ep: Episode, again: tuple[int, ...], stripped: tuple[int, ...]) -> dict:
    return {
        "task": ep.task,
        "env": ep.env,
        "outcome": ep.outcome,
        "turn_rewards": None if ep.turn_rewards is None else list(ep.turn_rewards),
        "states": None if ep.states is None else list(ep.states),
        "progress": None if ep.progress is None else list(ep.progress),
        "stop": ep.stop,
        "seed": ep.seed,
        "segments": [_segment_dict(s) for s in ep.segments],
        "reencoded": None if again == ep.token_ids else list(again),
        "reencoded_strip_think": None if stripped == ep.token_ids else list(stripped),
    }


def episodes_to_json(
    batch: EpisodeBatch,
    request: EpisodeRequest,
    command: str,
    seconds: float,
    reencoded: tuple[tuple[int, ...], ...],
    reencoded_strip_think: tuple[tuple[int, ...], ...],
) -> str:
    """The file's text: a header, then one episode per line (readable diffs)."""
    header = {
        "schema": SCHEMA,
        "model": batch.model,
        "engine": batch.engine,
        "note": batch.note,
        "command": command,
        "seconds": round(seconds, 1),
        "request": {
            k: list(v) if isinstance(v, tuple) else v
            for k in REQUEST_FIELDS
            for v in [getattr(request, k)]
        },
    }
    lines = [
        json.dumps(_episode_dict(e, a, b), separators=(",", ":"))
        for e, a, b in zip(batch.episodes, reencoded, reencoded_strip_think, strict=True)
    ]
    head = json.dumps(header, indent=1)[:-2]  # drop the closing "\n}"
    return head + ',\n "episodes": [\n' + ",\n".join(lines) + "\n ]\n}\n"


def episodes_from_json(text: str, name: str = "") -> RecordedEpisodes:
    """Read a recorded file's text back into Episodes.

    Raises:
        ValueError: not JSON, another schema, a missing or mistyped field, or more episodes
            than a request may ask for; the message names the problem.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        request = EpisodeRequest(**{k: data["request"][k] for k in REQUEST_FIELDS})
        rows = data["episodes"]
        if not isinstance(rows, list) or len(rows) > MAX_EPISODE_TASKS * MAX_EPISODE_GROUP:
            raise ValueError("episodes must be a list of at most one request's episodes")
        episodes = tuple(_episode(row) for row in rows)
        batch = EpisodeBatch(episodes, str(data["engine"]), str(data["note"]), str(data["model"]))
        again = tuple(_ids(row["reencoded"], e) for row, e in zip(rows, episodes, strict=True))
        stripped = tuple(
            _ids(row["reencoded_strip_think"], e) for row, e in zip(rows, episodes, strict=True)
        )
        return RecordedEpisodes(
            name, batch, request, str(data["command"]), float(data["seconds"]), again, stripped
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as err:
        raise ValueError(f"recorded episodes {name!r}: {type(err).__name__}: {err}") from None


def _ids(values: Any, episode: Episode) -> tuple[int, ...]:
    """Re-encoded ids as stored (null: the transcript's own)."""
    if values is None:
        return episode.token_ids
    if len(values) > 2 * MAX_EPISODE_TOKENS:
        raise ValueError("a re-encoded transcript is longer than any transcript can be")
    return tuple(int(i) for i in values)


def _floats(values: Any) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)


def _episode(row: dict) -> Episode:
    segments = tuple(
        Segment(
            role=str(s["role"]),
            text=str(s["text"]),
            token_ids=tuple(int(i) for i in s["ids"]),
            turn=int(s["turn"]),
            sampled=bool(s["sampled"]),
            logprobs=_floats(s["lp"]),
            ref_logprobs=_floats(s["ref"]),
            tool_call=None if s["call"] is None else str(s["call"]),
        )
        for s in row["segments"]
    )
    return Episode(
        task=str(row["task"]),
        env=str(row["env"]),
        segments=segments,
        outcome=float(row["outcome"]),
        turn_rewards=_floats(row["turn_rewards"]),
        states=None if row["states"] is None else tuple(str(s) for s in row["states"]),
        stop=str(row["stop"]),
        seed=None if row["seed"] is None else int(row["seed"]),
        progress=_floats(row.get("progress")),  # files recorded before it have none
    )


@lru_cache(maxsize=len(RECORDED_EPISODES))
def load_recorded_episodes(name: str) -> RecordedEpisodes:
    """The shipped file ``name`` of ``RECORDED_EPISODES``, read once per process.

    Raises:
        KeyError: no such preset.
        ValueError: the file is damaged or too large.
    """
    if name not in RECORDED_EPISODES:
        raise KeyError(f"no recorded episodes {name!r}; have {sorted(RECORDED_EPISODES)}")
    path = RECORDED_EPISODES_DIR / f"{name}.json"
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"recorded episodes {name!r}: larger than {MAX_FILE_BYTES} bytes")
    return episodes_from_json(path.read_text(encoding="utf-8"), name)
