"""The toy tools (``lm.toy_tools``): answers checked by hand, the parser, hostile model text.

The calculator is checked against hand-computed values and against an oracle that shares no code
with it (Python's own arithmetic over expressions this test generates from digits and + - * ( ),
never model text). Hostile text must be refused with a bounded error observation and never run:
``eval``/``exec`` are replaced by traps while it is stepped.
"""

import builtins
import random
from fractions import Fraction

import pytest

from roll_viz.lm import toy_tools
from roll_viz.lm.toy_tools import (
    MAX_OBSERVATION_CHARS,
    TASKS,
    ToolError,
    evaluate,
    parse_call,
    reset,
    show,
    state_id,
    step,
)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17*23+4", 395),  # 391 + 4
        ("(48 - 13) * 6", 210),  # 35 * 6
        ("2+3*4", 14),  # precedence: 2 + 12
        ("1-2-3", -4),  # left associative: (1 - 2) - 3
        ("8/4/2", 1),  # (8 / 4) / 2
        ("2*-3", -6),
        ("-(2+3)", -5),
        ("12 x 3", 36),  # x means times
        ("7/2", Fraction(7, 2)),
    ],
)
def test_calculator_values_by_hand(expression, value):
    assert evaluate(expression) == value


def test_calculator_shows_values_as_the_tool_writes_them():
    assert show(Fraction(36)) == "36"
    assert show(Fraction(-4)) == "-4"
    assert show(Fraction(7, 2)) == "7/2"


def _random_expression(rng: random.Random, depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.35:
        return str(rng.randint(0, 999))
    left, right = _random_expression(rng, depth + 1), _random_expression(rng, depth + 1)
    text = f"{left} {rng.choice('+-*')} {right}"
    return f"({text})" if rng.random() < 0.5 else text


def test_calculator_matches_plain_arithmetic_on_generated_expressions():
    rng = random.Random(4)
    for _ in range(300):
        expression = _random_expression(rng)
        if len(expression) > toy_tools.MAX_CALL_CHARS:
            continue
        # the oracle: Python's integer arithmetic on a string this test built from digits
        expected = eval(expression, {"__builtins__": {}})
        assert evaluate(expression) == expected, expression


@pytest.mark.parametrize(
    ("text", "call"),
    [
        ("calc: 12*3", ("calc", "12*3")),
        ("Calc= (1+2)*3)", ("calc", "(1+2)*3")),
        ("calc(3*4)", ("calc", "3*4")),
        ("The answer is 380.", ("answer", "380")),
        ("the answer: 7", ("answer", "7")),
        ("answer 5", ("answer", "5")),
        ("I can calculate it. calc: 3", ("calc", "3")),
        ("guess: 12\n(the game replies lower)", ("guess", "12")),
        ("lookup: `cheese`", ("lookup", "cheese")),
        ("Look up: milk", ("lookup", "milk")),
        ("I think it is twelve.", None),
        ("<think>the answer is 9</think>\ncalc: 3*3", ("calc", "3*3")),  # reasoning is no call
        ("<think>answer: 9</think>", None),
        ("lookup cheese", None),  # a name without a separator or a number is no call
    ],
)
def test_the_lenient_parser(text, call):
    assert parse_call(text) == call


def test_a_calculator_episode_by_hand():
    task = TASKS["calc-1"]
    state = reset(task)
    assert state_id(task, state) == "calc-1|start"
    first = step(task, state, "calc: 17*23+4")
    assert (first.observation, first.role, first.reward, first.done) == ("395", "tool", 1.0, False)
    assert first.call == "calc 17*23+4"
    again = step(task, first.state, "calc: 17*23+4")
    assert again.reward == 0.0  # progress counts once
    assert state_id(task, again.state) == state_id(task, first.state) == "calc-1|395"
    done = step(task, again.state, "answer: 395")
    assert done.done
    assert done.reward == 0.0
    assert toy_tools.outcome(task, done.state) == 1.0
    wrong = step(task, first.state, "answer: 394")
    assert wrong.done
    assert toy_tools.outcome(task, wrong.state) == 0.0


def test_no_call_and_wrong_tool():
    task = TASKS["calc-2"]
    silent = step(task, reset(task), "Let me think about it.")
    assert silent.role == "user"
    assert silent.call is None
    assert not silent.done
    assert silent.observation.startswith("No tool call found")
    other = step(task, reset(task), "lookup: cheese")
    assert other.role == "tool"
    assert other.observation.startswith("error: no tool lookup")
    assert other.reward == 0.0
    assert not other.done


def test_a_two_key_lookup_by_hand():
    task = TASKS["lookup-2"]  # apple 3 + bread 5 = 8
    first = step(task, reset(task), "lookup: Apples.")
    assert (first.observation, first.reward) == ("apple costs 3", 0.5)
    second = step(task, first.state, "lookup: bread")
    assert (second.observation, second.reward) == ("bread costs 5", 0.5)
    both = step(task, reset(task), "lookup: apples and bread")  # the first item named
    assert (both.observation, both.reward) == ("apple costs 3", 0.5)
    useless = step(task, second.state, "lookup: eggs")
    assert (useless.observation, useless.reward) == ("eggs costs 4", 0.0)
    unknown = step(task, second.state, "lookup: milk")
    assert unknown.observation.startswith("error: no item 'milk'")
    done = step(task, second.state, "answer: 8")
    assert done.done
    assert toy_tools.outcome(task, done.state) == 1.0


def test_guess_the_number_by_hand():
    task = TASKS["guess-1"]  # secret 7 in 1..10: 10 candidates, 9 to rule out
    first = step(task, reset(task), "guess: 5")
    assert first.observation == "higher than 5"
    assert first.reward == pytest.approx(5 / 9)  # 1..5 ruled out
    second = step(task, first.state, "guess: 8")
    assert second.observation == "lower than 8"
    assert second.reward == pytest.approx(3 / 9)  # 8..10 ruled out; 6, 7 left
    third = step(task, second.state, "guess: 7")
    assert third.observation == "correct"
    assert third.done
    assert third.reward == pytest.approx(1 / 9)
    assert first.reward + second.reward + third.reward == pytest.approx(1.0)
    assert toy_tools.outcome(task, third.state) == 1.0
    outside = step(task, second.state, "guess: 2")  # already ruled out: no progress
    assert outside.reward == 0.0
    assert outside.observation == "higher than 2"


@pytest.mark.parametrize(
    "text",
    [
        "calc: __import__('os').system('echo hi')",
        "calc: 9999999+1",  # 7 digits
        "calc: 999999*999999*999999",  # over MAX_MAGNITUDE
        "calc: " + "(" * 50 + "1" + ")" * 50,  # nesting, and over MAX_CALL_CHARS
        "calc: ((((((1))))))",  # nesting within the length bound
        "calc: " + "-" * 40 + "1",  # a run of signs
        "calc: 1/0",
        "calc: 2**3",
        "calc: 1" + "+1" * 5000,  # huge text
        "answer: 123456789012345",
        "guess: " + "9" * 100,
        "lookup: " + "<|im_end|>" * 30,
    ],
)
def test_hostile_text_is_refused_bounded_and_never_run(text, monkeypatch):
    def trap(*args, **kwargs):
        raise AssertionError("model text reached eval/exec")

    monkeypatch.setattr(builtins, "eval", trap)
    monkeypatch.setattr(builtins, "exec", trap)
    for task in TASKS.values():
        reply = step(task, reset(task), text)
        assert len(reply.observation) <= MAX_OBSERVATION_CHARS
        if task.env == "calculator" and text.startswith("calc"):
            assert reply.observation.startswith("error:"), (text, reply.observation)
            assert reply.reward == 0.0
            assert not reply.done


def test_hostile_expressions_raise_tool_errors():
    for text in ("__import__('os')", "1" * 7, "((((((1))))))", "1/0", "", "(1", "1)"):
        with pytest.raises(ToolError):
            evaluate(text)


def test_state_ids_are_equal_for_equal_observations_only():
    task = TASKS["guess-2"]
    a = step(task, reset(task), "guess: 5").state
    b = step(task, reset(task), "I guess: 5").state
    c = step(task, reset(task), "guess: 6").state
    assert state_id(task, a) == state_id(task, b) == "guess-2|lower than 5"
    assert state_id(task, c) != state_id(task, a)
    assert state_id(TASKS["guess-1"], a) != state_id(task, a)  # ids are per task
