"""Toy tool environments for multi-turn episodes: a calculator, a lookup table, guess-the-number.

Pure Python, no model: every answer is one a student can predict by hand. Model text is
untrusted: it is parsed, never evaluated (the calculator reads a tiny arithmetic grammar with a
hand-written parser; nothing is passed to ``eval``), and every amount of work it can cause is
bounded (``MAX_CALL_CHARS``, ``MAX_DIGITS``, ``MAX_DEPTH``, ``MAX_MAGNITUDE``).

The tool-call syntax is one line, ``name: argument`` (``calc: 17*23+4``, ``lookup: cheese``,
``guess: 5``, ``answer: 395``); the parser is lenient (any case, ``:`` ``=`` or ``(`` after the
name, or a number right after it as in "the answer is 380"; backticks and a closing
parenthesis ignored; ``<think>`` blocks skipped; the first call in the message wins).

A 135M model often writes no call at all. The prompt shows a worked exchange (``DEMOS``, as
chat messages), which makes calls the rule rather than the exception. A turn without a call is
still a turn (decided here): the environment answers as the user ("No tool call found ...",
restating the syntax), a malformed or unknown call gets a tool answer starting with ``error:``,
and the episode goes on until an answer or the turn bound (``lm.episodes.MAX_TURNS``). So every
episode is a complete transcript with an outcome, however badly the model does.

API:

- ``TASKS``: task id -> ``Task`` (environment, question, the expected answer);
  ``ENVIRONMENTS``: environment name -> its system prompt; ``DEMOS``: its worked exchange;
  ``task_prompt(task)``: the messages an episode starts from (the ``think-*`` calculator tasks
  ask for a ``<think>`` block before each call: ``THINK_PROMPT``, ``THINK_DEMO``).
- ``reset(task) -> EnvState``; ``step(task, state, text) -> Step``: the environment's reply to
  one assistant message (the observation and its role, the turn's progress reward, done, the
  parsed call) and the next state; ``state_id(task, state)``: the anchor-state id of GiGPO
  (equal observation = equal id); ``outcome(task, state)``: the outcome reward.
- ``parse_call(text)``, ``evaluate(expression)``: the lenient parser and the calculator.

Rewards: the outcome is 1.0 for a correct final answer (for guess-the-number: guessing the
secret), else 0.0. The per-turn reward is the progress the turn made, in [0, 1], summing to at
most 1 over an episode: calculator, 1 for the first ``calc`` whose value is the task's answer;
lookup, 1 / (keys the task needs) for each needed key looked up the first time; guess, the
fraction of the initial range the turn's feedback ruled out. An answering turn earns no progress
(the outcome scores it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

#: bounds on what model text can make a tool do (stated in the observations' error messages)
MAX_CALL_CHARS = 64  # a call's argument; longer is an error
MAX_DIGITS = 6  # digits of one number in a call
MAX_DEPTH = 4  # nested parentheses in a calculator expression
MAX_MAGNITUDE = 10**12  # any intermediate value (numerator and denominator) of the calculator
MAX_SCAN_CHARS = 2000  # the parser reads at most this much of a message
MAX_OBSERVATION_CHARS = 160  # an observation is cut to this

#: tool names per environment (``answer`` ends an episode everywhere)
TOOLS = {
    "calculator": ("calc", "answer"),
    "lookup": ("lookup", "answer"),
    "guess": ("guess", "answer"),
}

#: lenient aliases of the tool names
_ALIASES = {
    "calc": "calc",
    "calculate": "calc",
    "calculator": "calc",
    "lookup": "lookup",
    "look up": "lookup",
    "guess": "guess",
    "answer": "answer",
    "final answer": "answer",
}
_CALL = re.compile(
    r"\b(final answer|calculator|calculate|calc|look up|lookup|guess|answer)"
    r"[ \t]*(?:(?:is|was)\b[ \t]*)?([:=(]?)[ \t]*",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"-?\d+")
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)

#: the lookup environment's table (prices in coins): made up, so the model cannot know them
PRICES = {"apple": 3, "bread": 5, "cheese": 12, "dates": 7, "eggs": 4}

#: environment -> its system prompt (the tool's syntax)
ENVIRONMENTS = {
    "calculator": (
        "You can use a calculator. Write one line: calc: <expression>. "
        "When you know the result, write: answer: <number>."
    ),
    "lookup": (
        "You can look up prices in a table. Write one line: lookup: <item>. "
        "When you know the result, write: answer: <number>."
    ),
    "guess": (
        "Find the secret number. Write one line: guess: <number>. "
        "The game replies higher, lower or correct."
    ),
}

#: environment -> a worked exchange shown as chat messages before the task's question (a small
#: model copies the pattern of earlier turns: with it SmolLM2-135M calls a tool in most turns,
#: with the same example as text in the system prompt in about one turn in three)
DEMOS = {
    "calculator": (
        ("user", "What is 12 * 3?"),
        ("assistant", "calc: 12*3"),
        ("tool", "36"),
        ("assistant", "answer: 36"),
    ),
    "lookup": (
        ("user", "How many coins does milk cost?"),
        ("assistant", "lookup: milk"),
        ("tool", "milk costs 2"),
        ("assistant", "answer: 2"),
    ),
    "guess": (
        ("user", "I picked a number from 1 to 8. Find it."),
        ("assistant", "guess: 4"),
        ("tool", "higher than 4"),
        ("assistant", "guess: 6"),
        ("tool", "correct"),
    ),
}


#: the calculator's worked exchange for a task that thinks first (``Task.think``): a reasoning
#: block in each assistant message, as reasoning models write them; a template that strips
#: earlier turns' ``<think>`` blocks changes these tokens (``lm.transcript.reencode``)
THINK_DEMO = (
    ("user", "What is 12 * 3?"),
    ("assistant", "<think>I multiply 12 by 3.</think>\ncalc: 12*3"),
    ("tool", "36"),
    ("assistant", "<think>The tool says 36.</think>\nanswer: 36"),
)
THINK_PROMPT = (
    "You can use a calculator. Think briefly inside <think></think>, then write one line: "
    "calc: <expression>. When you know the result, write: answer: <number>."
)


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    Attributes:
        id: the task's id ("calc-1"), the group key of its episodes.
        env: the environment ("calculator", "lookup", "guess").
        question: the first user message.
        answer: the expected answer (guess: the secret).
        keys: lookup: the keys the task needs; else empty.
        low: guess: the smallest possible secret.
        high: guess: the largest possible secret.
        think: calculator: the prompt asks for a ``<think>`` block before each call
            (``THINK_PROMPT``, ``THINK_DEMO``).
    """

    id: str
    env: str
    question: str
    answer: int
    keys: tuple[str, ...] = ()
    low: int = 0
    high: int = 0
    think: bool = False


TASKS = {
    t.id: t
    for t in (
        Task("calc-1", "calculator", "What is 17 * 23 + 4?", 395),
        Task("calc-2", "calculator", "What is (48 - 13) * 6?", 210),
        Task("think-1", "calculator", "What is 17 * 23 + 4?", 395, think=True),
        Task("think-2", "calculator", "What is (48 - 13) * 6?", 210, think=True),
        Task("lookup-1", "lookup", "How many coins does cheese cost?", 12, keys=("cheese",)),
        Task(
            "lookup-2",
            "lookup",
            "How many coins do an apple and a bread cost together?",
            8,
            keys=("apple", "bread"),
        ),
        Task("guess-1", "guess", "I picked a number from 1 to 10. Find it.", 7, low=1, high=10),
        Task("guess-2", "guess", "I picked a number from 1 to 10. Find it.", 3, low=1, high=10),
    )
}


@dataclass(frozen=True)
class EnvState:
    """What the environment knows after some turns (frozen; ``step`` returns a new one).

    Attributes:
        observation: the last observation ("" before the first turn).
        low: guess: the smallest secret still possible; else 0.
        high: guess: the largest secret still possible; else 0.
        found: lookup: keys looked up so far; calculator: "value" once computed.
        answered: the final answer given, or None.
        solved: the secret was guessed (guess) or the answer is right.
    """

    observation: str = ""
    low: int = 0
    high: int = 0
    found: tuple[str, ...] = ()
    answered: int | None = None
    solved: bool = False


@dataclass(frozen=True)
class Step:
    """The environment's reply to one assistant message.

    Attributes:
        observation: its text (plain, bounded by ``MAX_OBSERVATION_CHARS``).
        role: "tool" when a call was made (errors included), "user" when none was found.
        reward: the turn's progress reward in [0, 1].
        done: the episode ends (an answer was given or the secret guessed).
        call: the parsed call ("calc 17*23+4"), or None.
        state: the environment's state after the turn.
    """

    observation: str
    role: str
    reward: float
    done: bool
    call: str | None
    state: EnvState


class ToolError(ValueError):
    """A call the tool refuses; the message is the observation shown to the model."""


def task_prompt(task: Task) -> tuple[tuple[str, str], ...]:
    """The task's prompt as (role, text) messages: system, the worked exchange, the question."""
    if task.think:
        return (("system", THINK_PROMPT), *THINK_DEMO, ("user", task.question))
    return (("system", ENVIRONMENTS[task.env]), *DEMOS[task.env], ("user", task.question))


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_call(text: str) -> tuple[str, str] | None:
    """The first tool call in an assistant message: (tool, raw argument), or None.

    Reads at most ``MAX_SCAN_CHARS`` characters, skipping closed ``<think>...</think>`` blocks
    (reasoning, not a call). The argument is the rest of the line, stripped of
    backticks, quotes, a trailing full stop and an unbalanced closing parenthesis; it may be
    longer than ``MAX_CALL_CHARS`` (the tool refuses it then).
    """
    text = _THINK_BLOCK.sub(" ", text[:MAX_SCAN_CHARS])  # reasoning is not a call
    for found in _CALL.finditer(text):
        separator, arg = found.group(2), text[found.end() :].split("\n", 1)[0]
        if not separator and not _NUMBER.match(arg):
            continue  # "I can calculate it" names a tool without calling it
        name = _ALIASES[" ".join(found.group(1).lower().split())]
        arg = arg.strip().strip("`'\"").strip().rstrip(".").strip()
        if arg.endswith(")") and (separator == "(" or arg.count(")") > arg.count("(")):
            arg = arg[:-1].strip()
        return name, arg
    return None


def _tokens(expression: str) -> list[str]:
    """The calculator's tokens: integers, + - * / ( ); x and × mean *. Else ``ToolError``."""
    out, i = [], 0
    text = expression.replace("×", "*").replace("x", "*").replace("X", "*")
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            if j - i > MAX_DIGITS:
                raise ToolError(f"error: numbers have at most {MAX_DIGITS} digits")
            out.append(text[i:j])
            i = j
        elif char in "+-*/()":
            out.append(char)
            i += 1
        else:
            raise ToolError(f"error: cannot read {char!r}; use digits and + - * / ( )")
    return out


def evaluate(expression: str) -> Fraction:
    """The value of an arithmetic expression: integers, + - * /, unary minus, parentheses.

    A recursive-descent parser over ``_tokens`` (never ``eval``). Division is exact
    (``Fraction``). Bounded: at most ``MAX_CALL_CHARS`` characters, ``MAX_DIGITS`` digits per
    number, ``MAX_DEPTH`` nested parentheses, every intermediate numerator and denominator at
    most ``MAX_MAGNITUDE``.

    Raises:
        ToolError: anything else; the message is the observation ("error: ...").
    """
    if len(expression) > MAX_CALL_CHARS:
        raise ToolError(f"error: expressions have at most {MAX_CALL_CHARS} characters")
    tokens = _tokens(expression)
    if not tokens:
        raise ToolError("error: empty expression")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def check(value: Fraction) -> Fraction:
        if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
            raise ToolError("error: number too large")
        return value

    def expr(depth: int) -> Fraction:
        value = term(depth)
        while peek() in ("+", "-"):
            op = take()
            right = term(depth)
            value = check(value + right if op == "+" else value - right)
        return value

    def term(depth: int) -> Fraction:
        value = factor(depth)
        while peek() in ("*", "/"):
            op = take()
            right = factor(depth)
            if op == "/" and right == 0:
                raise ToolError("error: division by zero")
            value = check(value * right if op == "*" else value / right)
        return value

    def factor(depth: int) -> Fraction:
        token = peek()
        if token is None:
            raise ToolError("error: the expression ends too early")
        if token == "-":
            take()
            if depth > MAX_DEPTH * 2:  # a run of unary minuses is bounded like the parentheses
                raise ToolError("error: too many signs")
            return -factor(depth + 1)
        if token == "(":
            if depth >= MAX_DEPTH:
                raise ToolError(f"error: at most {MAX_DEPTH} nested parentheses")
            take()
            value = expr(depth + 1)
            if peek() != ")":
                raise ToolError("error: missing )")
            take()
            return value
        if token.isdigit():
            take()
            return Fraction(int(token))
        raise ToolError(f"error: unexpected {token!r}")

    value = expr(0)
    if pos != len(tokens):
        raise ToolError(f"error: unexpected {tokens[pos]!r}")
    return value


def show(value: Fraction) -> str:
    """A calculator value as the tool writes it: "36", "-4", "7/2"."""
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )


def _integer(arg: str) -> int:
    """The first integer in a call's argument (``MAX_DIGITS`` digits at most), else ToolError."""
    found = _NUMBER.search(arg[:MAX_CALL_CHARS])
    if found is None:
        raise ToolError("error: give a number")
    if len(found.group(0).lstrip("-")) > MAX_DIGITS:
        raise ToolError(f"error: numbers have at most {MAX_DIGITS} digits")
    return int(found.group(0))


def _key(arg: str) -> str:
    """A lookup key: the first item the argument names ("Apples and bread." -> "apple").

    Lower case letters only, a plural s dropped; the whole cleaned argument when it names no
    item (the tool then refuses it).
    """
    text = re.sub(r"[^a-z ]", " ", arg[:MAX_CALL_CHARS].lower())
    for word in text.split():
        for item in (word, word.removesuffix("s")):
            if item in PRICES:
                return item
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Stepping


def reset(task: Task) -> EnvState:
    """The state before the first turn."""
    return EnvState(low=task.low, high=task.high)


def state_id(task: Task, state: EnvState) -> str:
    """GiGPO's anchor-state id of the state an agent turn starts from: equal observation, equal id.

    ``"<task>|start"`` before the first turn, else ``"<task>|<last observation>"`` (the
    observation's first 60 characters; the observations of these environments are shorter).
    """
    return f"{task.id}|{state.observation[:60] or 'start'}"


def outcome(task: Task, state: EnvState) -> float:
    """The outcome reward: 1.0 for a correct answer (guess: the secret found), else 0.0."""
    return 1.0 if state.solved else 0.0


def _clip(text: str) -> str:
    return text[:MAX_OBSERVATION_CHARS]


def step(task: Task, state: EnvState, text: str) -> Step:
    """The environment's reply to one assistant message (see the module docstring).

    Args:
        task: the episode's task.
        state: the state the turn started from.
        text: the assistant message's text (untrusted; parsed, never executed).

    Returns:
        The Step: observation, role, progress reward, done, the parsed call, the next state.
    """
    parsed = parse_call(text)
    if parsed is None:
        example = {"calculator": "calc: 12*3", "lookup": "lookup: milk", "guess": "guess: 5"}
        observation = (
            f"No tool call found. Write one line like {example[task.env]} or answer: <number>."
        )
        return Step(observation, "user", 0.0, False, None, replace(state, observation=observation))
    name, arg = parsed
    call = f"{name} {arg[:MAX_CALL_CHARS]}"
    try:
        if name not in TOOLS[task.env]:
            raise ToolError(f"error: no tool {name} here; use {' or '.join(TOOLS[task.env])}")
        if len(arg) > MAX_CALL_CHARS:
            raise ToolError(f"error: arguments have at most {MAX_CALL_CHARS} characters")
        if name == "answer" and task.env != "guess":
            value = _integer(arg)
            solved = value == task.answer
            after = replace(state, answered=value, solved=solved, observation=f"answer {value}")
            return Step(f"answer {value} received", "tool", 0.0, True, call, after)
        reply, reward, after = _use(task, state, name, arg)
    except ToolError as err:
        observation = _clip(str(err))
        return Step(observation, "tool", 0.0, False, call, replace(state, observation=observation))
    observation = _clip(reply)
    after = replace(after, observation=observation)
    return Step(observation, "tool", reward, after.solved, call, after)


def _use(task: Task, state: EnvState, name: str, arg: str) -> tuple[str, float, EnvState]:
    """(reply, progress reward, next state) of a valid tool name's call; ToolError if refused."""
    if name == "calc":
        value = evaluate(arg)
        first = value == task.answer and "value" not in state.found
        found = (*state.found, "value") if first else state.found
        return show(value), 1.0 if first else 0.0, replace(state, found=found)
    if name == "lookup":
        key = _key(arg)
        if key not in PRICES:
            raise ToolError(f"error: no item {key[:20]!r}; items: {', '.join(PRICES)}")
        new = key in task.keys and key not in state.found
        reward = 1.0 / len(task.keys) if new else 0.0
        found = (*state.found, key) if new else state.found
        return f"{key} costs {PRICES[key]}", reward, replace(state, found=found)
    # guess (and answer, its synonym in this game)
    value = _integer(arg)
    width = task.high - task.low + 1
    if value == task.answer:
        reply, after = "correct", replace(state, low=value, high=value, solved=True)
    elif value < task.answer:
        reply = f"higher than {value}"
        after = replace(state, low=max(state.low, value + 1))
    else:
        reply = f"lower than {value}"
        after = replace(state, high=min(state.high, value - 1))
    kept = after.high - after.low + 1
    before = state.high - state.low + 1
    return reply, max(0, before - kept) / (width - 1), after
