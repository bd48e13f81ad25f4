"""Multi-turn episodes: a token-exact transcript of system / user / assistant / tool segments.

One record for every source of an episode (the bundled model through ``lm``, a recorded preset,
an imported ATIF file), so the mask and credit stages read one shape.

An episode's tokens are the concatenation of its segments' ``token_ids`` in order. Assistant
segments hold exactly the tokens the sampler generated (never re-encoded: the extension
property); every other segment holds the tokens the chat template put in the context.

Dimension letters: B episodes, T tokens of the longest transcript (right-padded), N turns.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the roles a segment can have
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Segment:
    """A run of tokens with one role in one turn.

    Attributes:
        role: one of ``ROLES``.
        text: the segment's text (untrusted for assistant and tool: never render as HTML).
        token_ids: the token ids in the context, in order.
        turn: the agent turn it belongs to: turn t is the t-th assistant message (0-based) and
            the tool/user message that answers it belongs to turn t too; the system prompt and the
            first user message are turn -1 (the prompt).
        sampled: True when the sampler generated these tokens (assistant segments of a rollout);
            False for context the template or the environment wrote.
        logprobs: per-token log-prob under the sampling policy (sampled segments), else None.
        ref_logprobs: per-token log-prob under the reference model, else None.
        tool_call: the tool call parsed from an assistant segment ("calc 3*4"), or None.
    """

    role: str
    text: str
    token_ids: tuple[int, ...]
    turn: int
    sampled: bool = False
    logprobs: tuple[float, ...] | None = None
    ref_logprobs: tuple[float, ...] | None = None
    tool_call: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r} is not one of {ROLES}")
        for name in ("logprobs", "ref_logprobs"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.token_ids):
                raise ValueError(f"{name}: {len(values)} values for {len(self.token_ids)} tokens")


@dataclass(frozen=True)
class Episode:
    """One multi-turn trajectory of an agent against an environment.

    Attributes:
        task: the task's id (episodes of one task form a group of G).
        env: the environment's name ("calculator", "lookup", "guess").
        segments: the transcript, in order.
        outcome: the episode's outcome reward (scored once at the end).
        turn_rewards: an optional reward per agent turn (len = number of turns), or None.
        states: an optional id of the environment state seen at the start of each agent turn
            (GiGPO's anchor states: equal ids = the same state), or None.
        stop: why it ended: "answer", "max_turns", "max_tokens" or "error".
        seed: the sampling seed (None for an imported file).
        progress: an optional score of the environment state after each agent turn (len =
            number of turns; prime-rl's ``turn_credit`` state score, e.g. the fraction of the
            task done), or None.
    """

    task: str
    env: str
    segments: tuple[Segment, ...]
    outcome: float
    turn_rewards: tuple[float, ...] | None = None
    states: tuple[str, ...] | None = None
    stop: str = "answer"
    seed: int | None = None
    progress: tuple[float, ...] | None = None

    @property
    def n_turns(self) -> int:
        """Number of agent turns (assistant segments' distinct turns; turn -1 is the prompt)."""
        return len({s.turn for s in self.segments if s.role == "assistant" and s.turn >= 0})

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The whole transcript's tokens, segments concatenated."""
        return tuple(t for s in self.segments for t in s.token_ids)
