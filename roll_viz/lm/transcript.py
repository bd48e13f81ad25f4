"""Token-exact multi-turn transcripts: the chat template's pieces as token ids, and re-encoding.

A multi-turn context is built by APPENDING token ids, never by re-rendering the conversation:

- ``ChatPieces.of(tokenizer)`` reads the tokenizer's own chat template once, with a sentinel
  content, and keeps its pieces: the text before and after a message's content for each role,
  and the assistant's generation header;
- ``ChatPieces.message_ids(role, content)`` is one non-assistant message as the template writes
  it: the template's text (role markers parsed as their special tokens) around the content,
  tokenised once with special tokens NOT parsed (a tool reply or a user text that contains
  ``<|im_end|>`` stays text; it can never close a turn);
- the assistant's tokens are the sampler's ids, verbatim; ``ChatPieces.close_ids(sampled)`` is
  what the template writes after an assistant message, less the EOS the sampler already drew.

``reencode(tokenizer, episode, strip_think=False)`` is the other way, the one a stack that keeps
text takes: the conversation's messages rendered by the chat template and tokenised as one
string. With ``strip_think`` the ``<think>...</think>`` blocks of earlier assistant turns are
removed first (as Qwen3's template does). Where its ids differ from ``Episode.token_ids``, a
trainer that re-encodes scores other tokens than were sampled (the extension property;
``core.agentic`` compares the two).

Conventions of an ``Episode`` built here: ``Segment.text`` is the message's content (for an
assistant segment, its sampled ids decoded, the final EOS left out); ``Segment.token_ids`` are
the context's tokens. A non-assistant segment carries the template's text around its content:
the close of the assistant turn before it, and the header of the assistant turn after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from roll_viz.core.agentic.episode import Episode

SENTINEL = "\x00SENTINEL\x00"  # a content no template changes
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def _render(tokenizer: Any, messages: list[dict], generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)


def template_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of template text: its role markers are parsed as their special tokens."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def content_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of message content: special-token strings in it stay plain text."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


@dataclass(frozen=True)
class ChatPieces:
    """The chat template's pieces of one tokenizer (see the module docstring).

    Attributes:
        around: role -> (text before the content, text after it) of one message.
        header: the assistant's generation header (ChatML: ``<|im_start|>assistant``, newline).
        eos_text: the text of the EOS token the sampler ends a turn with.
    """

    around: dict[str, tuple[str, str]]
    header: str
    eos_text: str

    @classmethod
    def of(cls, tokenizer: Any) -> ChatPieces:
        """Read the pieces from the tokenizer's chat template (after a system message).

        Raises:
            ValueError: the template does not render messages one after another (a template
                that rewrites earlier messages cannot be extended token by token).
        """
        system = {"role": "system", "content": "s"}
        base = _render(tokenizer, [system], False)
        around = {}
        for role in ("system", "user", "assistant", "tool"):
            messages = [{"role": role, "content": SENTINEL}]
            prefix = ""
            if role != "system":
                messages.insert(0, system)
                prefix = base
            text = _render(tokenizer, messages, False)
            if not text.startswith(prefix) or text.count(SENTINEL) != 1:
                raise ValueError(f"the chat template does not append a {role} message")
            before, after = text[len(prefix) :].split(SENTINEL)
            around[role] = (before, after)
        user = [system, {"role": "user", "content": "u"}]
        plain, generation = _render(tokenizer, user, False), _render(tokenizer, user, True)
        if not generation.startswith(plain):
            raise ValueError("the chat template's generation prompt is not appended")
        eos = tokenizer.eos_token or ""
        return cls(around, generation[len(plain) :], eos)

    def message_ids(self, tokenizer: Any, role: str, content: str) -> list[int]:
        """One non-assistant message as the template writes it: markers + content + markers."""
        before, after = self.around[role]
        return (
            template_ids(tokenizer, before)
            + content_ids(tokenizer, content)
            + template_ids(tokenizer, after)
        )

    def header_ids(self, tokenizer: Any) -> list[int]:
        """The assistant's generation header."""
        return template_ids(tokenizer, self.header)

    def close_ids(self, tokenizer: Any, ended_with_eos: bool) -> list[int]:
        """What the template writes after an assistant message, less the EOS the sampler drew.

        All of it for a turn cut at its token bound (no EOS drawn).
        """
        after = self.around["assistant"][1]
        if ended_with_eos and self.eos_text and after.startswith(self.eos_text):
            after = after[len(self.eos_text) :]
        return template_ids(tokenizer, after)


def messages_of(episode: Episode) -> list[dict]:
    """The episode's chat messages (role, content) in order, as a stack that keeps text has them."""
    return [{"role": s.role, "content": s.text} for s in episode.segments]


def reencode(tokenizer: Any, episode: Episode, strip_think: bool = False) -> tuple[int, ...]:
    """The episode's history re-encoded from text by the chat template, tokenised as one string.

    Everything before the last message is rendered by the template (with the generation header
    when the last message is the assistant's); the last assistant message follows as its text,
    plus the EOS text when its sampled ids ended with EOS. So a transcript that survives the
    round trip gives exactly ``episode.token_ids``; any difference is the re-encoding's.

    Args:
        tokenizer: the model's tokenizer (with its chat template).
        episode: the transcript.
        strip_think: drop ``<think>...</think>`` from every assistant message but the last (as
            Qwen3's template does with earlier turns).

    Returns:
        The re-encoded ids.
    """
    messages = messages_of(episode)
    last_assistant = max(
        (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1
    )
    if strip_think:
        messages = [
            {**m, "content": _THINK.sub("", m["content"])}
            if m["role"] == "assistant" and i != last_assistant
            else m
            for i, m in enumerate(messages)
        ]
    if messages and messages[-1]["role"] == "assistant":
        last = episode.segments[-1]
        eos_id = tokenizer.eos_token_id
        tail = messages[-1]["content"]
        if last.token_ids and eos_id is not None and last.token_ids[-1] == eos_id:
            tail += tokenizer.eos_token
        text = _render(tokenizer, messages[:-1], True) + tail
    else:
        text = _render(tokenizer, messages, False)
    return tuple(template_ids(tokenizer, text))
