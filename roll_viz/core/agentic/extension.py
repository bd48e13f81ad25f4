"""Token-exact histories: the extension property, and the per-turn layout of a transcript.

The extension property: the tokens of turn t's prompt extend the tokens of turn t-1's prompt
plus what was sampled, so the trainer scores exactly the tokens the sampler generated. A chat
template that rewrites earlier assistant turns breaks it. Qwen3's template drops the reasoning
of every assistant turn before the last user query (the template's
``content.split('</think>')[-1].lstrip(newline)``); re-encoding a history through it gives
other tokens than were sampled, and a trainer that builds its batch from the re-rendered text
scores those.

``check_extension`` re-encodes the history with a tokenizer-free ``reencode`` argument (the lm
layer passes the real tokenizer) after a pure text ``transform`` (``strip_think`` by default)
and marks the positions where the re-encoded transcript differs from the sampled one. Nothing
here changes the episode: the sampled tokens are never re-encoded in the training batch
(``masks.batch_episodes`` takes them as recorded).

``per_turn_samples`` splits an episode into one training sample per turn, earlier turns in the
prompt (the layout where NeMo RL PR #2176 trained history assistant turns again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from roll_viz.core.agentic.episode import Episode
from roll_viz.core.agentic.masks import Reencode

THINK_CLOSE = "</think>"


def strip_think(text: str) -> str:
    """The text a Qwen3-style template keeps of a history assistant turn.

    Everything up to the last ``</think>`` is dropped, then leading newlines (the template's
    ``content.split('</think>')[-1].lstrip(newline)``); a text without ``</think>`` is unchanged.
    """
    if THINK_CLOSE not in text:
        return text
    return text.split(THINK_CLOSE)[-1].lstrip("\n")


@dataclass(frozen=True)
class SegmentCheck:
    """One history assistant segment: its sampled tokens against its re-encoding.

    Attributes:
        index: the segment's index in the episode.
        turn: its turn.
        start: its first position in the sampled transcript.
        sampled: the tokens the sampler generated.
        rendered: the tokens of the re-encoded (transformed) text.
        differs: per position of ``max(len)``, True where the two differ (or one is shorter).
    """

    index: int
    turn: int
    start: int
    sampled: tuple[int, ...]
    rendered: tuple[int, ...]
    differs: tuple[bool, ...]

    @property
    def equal(self) -> bool:
        """The re-encoding gives back exactly the sampled tokens."""
        return self.sampled == self.rendered


@dataclass(frozen=True)
class ExtensionReport:
    """The sampled transcript against the re-rendered one.

    Attributes:
        sampled: the whole transcript as sampled.
        rendered: the transcript with history assistant turns re-encoded after the transform.
        differs: per position of ``max(len)``, True where they differ (a length change shifts
            every later position: the trainer then scores other tokens there).
        segments: the check of each re-encoded segment.
    """

    sampled: tuple[int, ...]
    rendered: tuple[int, ...]
    differs: tuple[bool, ...]
    segments: tuple[SegmentCheck, ...]

    @property
    def holds(self) -> bool:
        """The extension property holds: nothing differs."""
        return not any(self.differs)

    @property
    def n_differing(self) -> int:
        """Positions that differ."""
        return sum(self.differs)

    @property
    def first_difference(self) -> int | None:
        """The first differing position, or None."""
        return next((i for i, d in enumerate(self.differs) if d), None)


def _differs(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[bool, ...]:
    n = max(len(a), len(b))
    return tuple(i >= len(a) or i >= len(b) or a[i] != b[i] for i in range(n))


def check_extension(
    episode: Episode,
    reencode: Reencode,
    transform: Callable[[str], str] = strip_think,
    keep_last: bool = True,
) -> ExtensionReport:
    """Re-encode the history turns of ``episode`` and mark where they differ from the sample.

    Args:
        episode: the episode (its assistant segments hold the sampled tokens).
        reencode: text -> token ids (the tokenizer's encode without special tokens).
        transform: what the template does to a history assistant text (``strip_think``).
        keep_last: leave the last turn as sampled (the template keeps the latest turn).

    Returns:
        The report; the episode is not changed.
    """
    last = max((s.turn for s in episode.segments if s.role == "assistant"), default=-1)
    rendered: list[int] = []
    checks = []
    position = 0
    for index, seg in enumerate(episode.segments):
        history = seg.role == "assistant" and seg.sampled and not (keep_last and seg.turn == last)
        tokens = tuple(seg.token_ids)
        if history:
            again = tuple(int(t) for t in reencode(transform(seg.text)))
            checks.append(
                SegmentCheck(index, seg.turn, position, tokens, again, _differs(tokens, again))
            )
            tokens = again
        rendered.extend(tokens)
        position += len(seg.token_ids)
    sampled = episode.token_ids
    rendered_t = tuple(rendered)
    return ExtensionReport(sampled, rendered_t, _differs(sampled, rendered_t), tuple(checks))


def per_turn_samples(episode: Episode) -> tuple[Episode, ...]:
    """One sample per sampled assistant turn, the earlier turns as its prompt.

    Sample t holds every segment of turns < t (earlier assistant turns become history:
    ``sampled=False``, no log-probs) and the sampled assistant segments of turn t. A correct
    mask trains each turn once over the samples; one that trains every assistant message
    (NeMo RL PR #2176) trains turn j of an N-turn episode N - j times.
    """
    turns = sorted({s.turn for s in episode.segments if s.role == "assistant" and s.sampled})
    samples = []
    for t in turns:
        segments = []
        for seg in episode.segments:
            if seg.turn < t:
                history = seg.role == "assistant"
                segments.append(replace(seg, sampled=False, logprobs=None) if history else seg)
            elif seg.turn == t and seg.role == "assistant" and seg.sampled:
                segments.append(seg)
        samples.append(replace(episode, segments=tuple(segments)))
    return tuple(samples)
