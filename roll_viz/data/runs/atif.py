"""ATIF trajectories (Harbor's Agent Trajectory Interchange Format, RFC 0001 v1.0-1.7) as Episodes.

An ATIF file is one JSON document per trajectory (Harbor writes ``trajectory.json``); a JSON
list of trajectories and a JSONL file of one trajectory per line are read too. A trajectory is
``{schema_version: "ATIF-v1.x", session_id, agent: {name, ...}, steps: [...], final_metrics?,
extra?}``; each step has ``step_id``, ``source`` ("system", "user" or "agent"), ``message`` (a
string, or from v1.6 a list of content parts), and for agent steps ``reasoning_content``,
``tool_calls`` ([{tool_call_id, function_name, arguments}]), ``observation`` ({results:
[{source_call_id, content}]}) and ``metrics`` (``prompt_token_ids`` v1.4, ``completion_token_ids``
v1.3, ``logprobs``).

How a trajectory becomes an ``Episode`` (roll-viz's reading where the RFC is silent):

- agent step k is turn k: an assistant segment (its text ``message``, preceded by
  ``<think>reasoning</think>`` when there is ``reasoning_content``; its tokens
  ``completion_token_ids``, sampled, with ``logprobs`` when their length matches) and one tool
  segment per observation result (turn k); system and user steps before the first agent step
  are the prompt (turn -1), later user steps answer the turn before them;
- the tokens between agent steps come from the next agent step's ``prompt_token_ids``: what it
  adds to the previous prompt and completion, given to the first segment of that gap (the RFC
  records no token ids per message). A prompt that does not extend the previous prompt and
  completion breaks the extension property: the step is named in ``AtifRead.extension``, and
  that gap gets no tokens;
- without token ids the segments carry none (``AtifRead.token_ids`` says "none": the mask and
  credit views then work per segment, ``unit="segment"``), or, when the caller passes
  ``tokenize``, the texts re-encoded (said in the notes: those are not the sampled tokens);
- rewards are not part of the RFC: the outcome is ``extra.reward`` (root) or
  ``final_metrics.extra.reward``, a turn reward ``extra.reward`` of an agent step, an anchor
  state ``extra.state``; the task (the group) ``extra.task_id`` or ``extra.task``, else the
  session id. What is missing is said in the notes.

Bad input: each trajectory that cannot be read is skipped with one ``RunFormatError`` naming
the file, the line (JSONL) and the field path (``steps[3].metrics.logprobs[2]``); the rest
still loads. Bounds: the file as ``json_document`` (``parse.MAX_JSON_BYTES``, the parsed-size
multiple, nesting) or JSONL lines (``parse.MAX_LINE_BYTES``); at most ``MAX_TRAJECTORIES``
trajectories (``masks.MAX_EPISODES``), ``MAX_STEPS`` steps each, ``MAX_TRANSCRIPT_TOKENS``
tokens each, ``MAX_TEXT_CHARS`` characters of any one text kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.core.agentic.masks import MAX_EPISODES, MAX_TRANSCRIPT_TOKENS
from roll_viz.data.runs import parse
from roll_viz.data.runs.json_document import read_json_document
from roll_viz.data.runs.json_numbers import Unreadable, is_number
from roll_viz.data.runs.parse import Problems, RunFormatError, iter_jsonl

FORMAT = "atif"
LABEL = "ATIF agent trajectories (Harbor RFC 0001)"
#: what ``detect`` says of an ATIF file (it holds episodes, not a run of samples)
NOT_A_RUN = (
    "an ATIF agent trajectory (multi-turn episodes, not a run of samples): open it with the "
    "episodes view (read_atif)"
)
#: the versions this reader knows (a later v1.x is read as v1.7, with a note)
KNOWN_MINOR = 7
MAX_TRAJECTORIES = MAX_EPISODES
MAX_STEPS = 4096
MAX_TEXT_CHARS = 100_000
MAX_TOKEN_ID = 2**31 - 1
SOURCES = ("system", "user", "agent")
_VERSION = re.compile(r"ATIF-v1\.(\d+)")
#: the root's and a step's ``extra`` keys roll-viz reads (the RFC has no reward field)
REWARD_KEY = "reward"
STATE_KEY = "state"
TASK_KEYS = ("task_id", "task")

Tokenize = Callable[[str], Sequence[int]]


@dataclass(frozen=True)
class AtifRead:
    """What a file gave.

    Attributes:
        episodes: one per readable trajectory, in file order.
        problems: one per trajectory skipped (file, line, field path, message), capped at
            ``parse.MAX_WARNINGS``.
        dropped: problems beyond the cap (only counted).
        notes: what the reader assumed or left out (missing rewards, re-encoded text, ...).
        token_ids: "all" (every agent step had ``completion_token_ids``), "some", "none" or
            "re-encoded" (``tokenize`` filled them in).
        extension: (trajectory index, step_id, first differing position) for each agent step
            whose ``prompt_token_ids`` do not extend the previous prompt and completion.
    """

    episodes: tuple[Episode, ...]
    problems: tuple[RunFormatError, ...]
    dropped: int
    notes: tuple[str, ...]
    token_ids: str
    extension: tuple[tuple[int, int, int], ...]

    @property
    def unit(self) -> str:
        """The unit the mask and credit views should use for these episodes."""
        return "segment" if self.token_ids in ("none", "some") else "token"


def matches(doc: Any) -> bool:
    """A parsed JSON value looks like an ATIF trajectory (or a list of them)."""
    if isinstance(doc, list) and doc:
        doc = doc[0]
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    return isinstance(version, str) and version.startswith("ATIF-")


def is_atif(path: str | Path) -> bool:
    """The file holds ATIF trajectories (False for anything unreadable; never raises).

    The first bytes decide when they name an ATIF schema version; otherwise the document (or the
    first JSONL line) is parsed under the usual caps and its ``schema_version`` looked at.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(parse.SNIFF_BYTES)
    except OSError:
        return False
    text = head.decode("utf-8", errors="ignore").lstrip()
    if not text.startswith(("{", "[")):
        return False
    if '"schema_version"' in text and '"ATIF-v' in text:
        return True
    try:
        if path.suffix == ".jsonl":
            return any(matches(value) for _, _, value in _first_line(path))
        return matches(read_json_document(path))
    except (RunFormatError, OSError):
        return False


def _first_line(path: Path):
    for item in iter_jsonl(path, Problems()):
        yield item
        return


# ---------------------------------------------------------------------------------------------
# Field readers: each raises _Bad(field path, message)


class _Bad(ValueError):
    def __init__(self, where: str, message: str):
        super().__init__(where, message)
        self.where = where
        self.message = message


def _kind(value: Any) -> str:
    if isinstance(value, Unreadable):
        return f"a number no float can hold ({value.why})"
    return "null" if value is None else type(value).__name__


def _object(value: Any, where: str, required: bool = True) -> dict | None:
    if value is None and not required:
        return None
    if not isinstance(value, dict):
        raise _Bad(where, f"expected an object, got {_kind(value)}")
    return value


def _list(value: Any, where: str, cap: int, required: bool = True) -> list | None:
    if value is None and not required:
        return None
    if not isinstance(value, list):
        raise _Bad(where, f"expected a list, got {_kind(value)}")
    if len(value) > cap:
        raise _Bad(where, f"{len(value)} entries, more than the cap {cap}")
    return value


def _text(value: Any, where: str, required: bool = True) -> str:
    """A string, or (v1.6+) a list of content parts whose text parts are joined."""
    if value is None and not required:
        return ""
    if isinstance(value, str):
        return value[:MAX_TEXT_CHARS]
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(_list(value, where, MAX_STEPS) or []):
            part = _object(part, f"{where}[{i}]")
            if part.get("type") == "text":
                parts.append(_text(part.get("text"), f"{where}[{i}].text"))
            else:
                parts.append(f"[{str(part.get('type'))[:40]}]")  # an image: shown as its type
        return "".join(parts)[:MAX_TEXT_CHARS]
    raise _Bad(where, f"expected a string or a list of content parts, got {_kind(value)}")


def _ids(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    for i, x in enumerate(_list(value, where, MAX_TRANSCRIPT_TOKENS) or []):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_TOKEN_ID:
            raise _Bad(f"{where}[{i}]", f"expected a token id (0..{MAX_TOKEN_ID}), got {_kind(x)}")
    return tuple(value)


def _floats(value: Any, where: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    for i, x in enumerate(_list(value, where, MAX_TRANSCRIPT_TOKENS) or []):
        if not is_number(x):
            raise _Bad(f"{where}[{i}]", f"expected a number, got {_kind(x)}")
    return tuple(float(x) for x in value)


def _number(obj: dict | None, key: str, where: str) -> float | None:
    if obj is None or obj.get(key) is None:
        return None
    if not is_number(obj[key]):
        raise _Bad(f"{where}.{key}", f"expected a number, got {_kind(obj[key])}")
    return float(obj[key])


def _tool_calls(value: Any, where: str) -> str | None:
    calls = _list(value, where, MAX_STEPS, required=False)
    if not calls:
        return None
    shown = []
    for i, call in enumerate(calls):
        call = _object(call, f"{where}[{i}]")
        name = _text(call.get("function_name"), f"{where}[{i}].function_name")
        args = _object(call.get("arguments", {}), f"{where}[{i}].arguments")
        try:
            text = json.dumps(args, ensure_ascii=False, sort_keys=True)
        except (RecursionError, ValueError, TypeError):
            raise _Bad(f"{where}[{i}].arguments", "arguments nested too deeply") from None
        shown.append(f"{name}({text[:2000]})")
    return "; ".join(shown)


# ---------------------------------------------------------------------------------------------
# One trajectory


@dataclass
class _Parts:
    """One trajectory as read, before it becomes an Episode."""

    segments: list[Segment]
    gaps: list[int]  # index of the first segment of each gap before an agent step
    prompts: list[tuple[int, ...] | None]  # prompt_token_ids per agent step
    step_ids: list[int]
    turn_rewards: list[float | None]
    states: list[str | None]
    id_source: list[str]  # per agent step: "file", "tokenize" or "none"


def _steps(doc: dict, tokenize: Tokenize | None) -> _Parts:
    steps = _list(doc.get("steps"), "steps", MAX_STEPS)
    if not steps:
        raise _Bad("steps", "no steps")
    parts = _Parts([], [], [], [], [], [], [])
    turn = -1
    gap_start = 0
    for k, raw in enumerate(steps):
        where = f"steps[{k}]"
        step = _object(raw, where)
        source = step.get("source")
        if source not in SOURCES:
            raise _Bad(
                f"{where}.source", f"expected one of {', '.join(SOURCES)}, got {source!r:.40}"
            )
        message = _text(step.get("message"), f"{where}.message", required=False)
        if source != "agent":
            role = "system" if source == "system" else "user"
            parts.segments.append(Segment(role, message, (), turn))
            continue
        step_id = step.get("step_id", k + 1)
        if isinstance(step_id, bool) or not isinstance(step_id, int):
            raise _Bad(f"{where}.step_id", f"expected an integer, got {_kind(step_id)}")
        turn += 1
        metrics = _object(step.get("metrics"), f"{where}.metrics", required=False)
        extra = _object(step.get("extra"), f"{where}.extra", required=False)
        reasoning = _text(step.get("reasoning_content"), f"{where}.reasoning_content", False)
        text = f"<think>{reasoning}</think>\n{message}" if reasoning else message
        ids = _ids(
            (metrics or {}).get("completion_token_ids"), f"{where}.metrics.completion_token_ids"
        )
        lps = _floats((metrics or {}).get("logprobs"), f"{where}.metrics.logprobs")
        parts.id_source.append("file" if ids is not None else "none")
        if ids is None and tokenize is not None:
            ids = tuple(int(t) for t in tokenize(text))
            parts.id_source[-1] = "tokenize"
        if lps is not None and (ids is None or len(lps) != len(ids)):
            lps = None  # logprobs that do not align with the tokens are not used (noted)
        tool_call = _tool_calls(step.get("tool_calls"), f"{where}.tool_calls")
        parts.gaps.append(gap_start)
        parts.prompts.append(
            _ids((metrics or {}).get("prompt_token_ids"), f"{where}.metrics.prompt_token_ids")
        )
        parts.step_ids.append(step_id)
        parts.turn_rewards.append(_number(extra, REWARD_KEY, f"{where}.extra"))
        state = (extra or {}).get(STATE_KEY)
        parts.states.append(str(state)[:200] if state is not None else None)
        parts.segments.append(
            Segment("assistant", text, ids or (), turn, True, lps, None, tool_call)
        )
        gap_start = len(parts.segments)  # the tool output opens the next gap
        observation = _object(step.get("observation"), f"{where}.observation", required=False)
        results = _list(
            (observation or {}).get("results"), f"{where}.observation.results", MAX_STEPS, False
        )
        for i, result in enumerate(results or []):
            result = _object(result, f"{where}.observation.results[{i}]")
            content = _text(
                result.get("content"), f"{where}.observation.results[{i}].content", False
            )
            parts.segments.append(Segment("tool", content, (), turn))
    if turn < 0:
        raise _Bad("steps", "no agent step")
    return parts


def _fill_context_tokens(parts: _Parts, tokenize: Tokenize | None) -> list[tuple[int, int]]:
    """Give each gap the tokens its agent step's prompt adds.

    Returns:
        (step_id, first difference) where a prompt does not extend the previous prompt and
        completion (that gap keeps no tokens).
    """
    broken = []
    segs = parts.segments
    previous: tuple[int, ...] = ()
    agent_at = [i for i, s in enumerate(segs) if s.role == "assistant"]
    for k, (start, prompt) in enumerate(zip(parts.gaps, parts.prompts, strict=True)):
        end = agent_at[k]
        if prompt is not None:
            if prompt[: len(previous)] == previous and start < end:
                segs[start] = Segment(
                    segs[start].role, segs[start].text, prompt[len(previous) :], segs[start].turn
                )
            elif prompt[: len(previous)] != previous:
                first = next(
                    (i for i, (a, b) in enumerate(zip(prompt, previous, strict=False)) if a != b),
                    min(len(prompt), len(previous)),
                )
                broken.append((parts.step_ids[k], first))
            previous = prompt + segs[end].token_ids
        elif tokenize is not None:
            for i in range(start, end):
                segs[i] = Segment(
                    segs[i].role, segs[i].text, tuple(tokenize(segs[i].text)), segs[i].turn
                )
            previous = ()
    if tokenize is not None:  # what follows the last agent step (tool output) re-encoded
        for i in range(agent_at[-1] + 1, len(segs)):
            if not segs[i].token_ids:
                segs[i] = Segment(
                    segs[i].role, segs[i].text, tuple(tokenize(segs[i].text)), segs[i].turn
                )
    return broken


def _episode(doc: Any, index: int, tokenize: Tokenize | None, notes: set[str]):
    root = _object(doc, "(trajectory)")
    version = root.get("schema_version")
    found = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if not found:
        raise _Bad(
            "schema_version", f"expected 'ATIF-v1.x', got {_kind(version)} {str(version)[:40]!r}"
        )
    if int(found.group(1)) > KNOWN_MINOR:
        notes.add(f"{version} is newer than ATIF-v1.{KNOWN_MINOR}: read as v1.{KNOWN_MINOR}")
    agent = _object(root.get("agent", {}), "agent")
    session = root.get("session_id", f"trajectory {index}")
    if not isinstance(session, str):
        raise _Bad("session_id", f"expected a string, got {_kind(session)}")
    extra = _object(root.get("extra"), "extra", required=False) or {}
    final = _object(root.get("final_metrics"), "final_metrics", required=False) or {}
    final_extra = _object(final.get("extra"), "final_metrics.extra", required=False)
    parts = _steps(root, tokenize)
    broken = _fill_context_tokens(parts, tokenize)
    outcome = _number(extra, REWARD_KEY, "extra")
    if outcome is None:
        outcome = _number(final_extra, REWARD_KEY, "final_metrics.extra")
    if outcome is None:
        notes.add("no outcome reward (extra.reward): taken as 0")
        outcome = 0.0
    task = next((str(extra[k])[:200] for k in TASK_KEYS if isinstance(extra.get(k), str)), None)
    if task is None:
        notes.add("no task id (extra.task_id): each session is its own group")
    size = sum(len(s.token_ids) for s in parts.segments)
    if size > MAX_TRANSCRIPT_TOKENS:
        raise _Bad("steps", f"{size} tokens, more than the cap {MAX_TRANSCRIPT_TOKENS}")
    has_turn = any(r is not None for r in parts.turn_rewards)
    has_states = all(s is not None for s in parts.states)
    if any(s.role == "assistant" and s.logprobs is None and s.token_ids for s in parts.segments):
        notes.add("logprobs missing or not aligned with completion_token_ids on some steps")
    episode = Episode(
        task or session[:200],
        str(agent.get("name", "agent"))[:200],
        tuple(parts.segments),
        outcome,
        tuple(r or 0.0 for r in parts.turn_rewards) if has_turn else None,
        tuple(str(s) for s in parts.states) if has_states else None,
    )
    return episode, broken, parts.id_source


def _documents(path: Path, problems: Problems) -> list[tuple[int | None, Any]]:
    """(line or None, trajectory) per trajectory in the file."""
    if path.suffix == ".jsonl":
        out = []
        for line, _, value in iter_jsonl(path, problems):
            out.append((line, value))
            if len(out) > MAX_TRAJECTORIES:
                raise RunFormatError(path, line, None, f"more than {MAX_TRAJECTORIES} trajectories")
        return out
    doc = read_json_document(path)
    if isinstance(doc, list):
        if len(doc) > MAX_TRAJECTORIES:
            raise RunFormatError(
                path, None, None, f"{len(doc)} trajectories, more than {MAX_TRAJECTORIES}"
            )
        return [(None, d) for d in doc]
    return [(None, doc)]


def read_atif(path: str | Path, tokenize: Tokenize | None = None) -> AtifRead:
    """Read an ATIF file (``.json`` document or list, ``.jsonl`` one trajectory a line).

    Args:
        path: the file.
        tokenize: text -> token ids, used only where the file has no ``completion_token_ids``
            (the result says "re-encoded": those are not the sampled tokens).

    Raises:
        RunFormatError: the whole file cannot be read (too large, not JSON, nested too deeply,
            too many trajectories, or no trajectory readable: the first problem is named).
    """
    path = Path(path)
    problems = Problems()
    notes: set[str] = set()
    episodes, extension, flags = [], [], set()
    for n, (line, doc) in enumerate(_documents(path, problems)):
        try:
            episode, broken, sources = _episode(doc, n, tokenize, notes)
        except _Bad as bad:
            problems.add(RunFormatError(path, line, bad.where, bad.message))
            continue
        problems.rows_ok += 1
        extension.extend((len(episodes), step, first) for step, first in broken)
        episodes.append(episode)
        flags.update(sources)
    if not episodes:
        first = problems.items[0] if problems.items else None
        raise first or RunFormatError(path, None, None, "no trajectory in the file")
    if "tokenize" in flags:
        token_ids = "re-encoded"
        notes.add("token ids re-encoded from the text on some steps: not the sampled tokens")
    else:
        token_ids = "all" if flags == {"file"} else "some" if "file" in flags else "none"
    if token_ids in ("none", "some"):
        notes.add("no completion_token_ids on some agent steps: masks and credit are per segment")
    if extension:
        notes.add("some prompt_token_ids do not extend the previous turn (history re-rendered)")
    return AtifRead(
        tuple(episodes),
        tuple(sorted(problems.items, key=lambda e: e.line or 0)),
        problems.dropped,
        tuple(sorted(notes)),
        token_ids,
        tuple(extension),
    )
