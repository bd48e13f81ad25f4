"""The board reader's simdjson line path gives the same records and messages as the plain one.

``fast_lines`` parses a board line with simdjson and converts its number lists in one C pass;
any line it does not vouch for goes back to the plain reader (orjson/``json`` + the same
converter). Turning the fast path off (``FastLines.object`` always ``SlowLine``) is the reader
as it was: every fixture, and a file of crafted lines, must read to identical records and
warnings; the crafted odd lines must take the plain path, the plain ones the fast one.
"""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from roll_viz.data.runs import RunFormatError, fast_lines, open_run, rllb
from roll_viz.data.runs.fast_lines import FastLines, SlowLine
from tests.data.helpers import FIXTURES, write_jsonl
from tests.data.test_reader_fast_path import FIXTURE_RUNS, _read, _same


def _plain_only(monkeypatch) -> None:
    def refuse(self, raw):
        raise SlowLine

    monkeypatch.setattr(FastLines, "object", refuse)


@pytest.mark.parametrize("name", FIXTURE_RUNS)
def test_every_fixture_reads_the_same_without_the_fast_path(name, monkeypatch):
    fast_run, fast_steps = _read(FIXTURES / name)
    _plain_only(monkeypatch)
    slow_run, slow_steps = _read(FIXTURES / name)
    assert _same(fast_run, slow_run)
    assert _same(fast_steps, slow_steps)


def _row(**over) -> dict:
    row = {
        "step": 1,
        "prompt": "p",
        "response": "r",
        "reward": 0.5,
        "response_tokens": ["a", "b", "c"],
        "logprobs": [-0.5, -1.25, -2.0, 0.0],
        "log_probs2": [-0.5, -1.25, -2.0, 0.0],
        "ref_logprobs": [-0.4, -1.0, -2.5, 0.0],
        "old_log_probs2_entropy": [0.1, 0.2, 0.3, 0.0],
        "new_response_mask": [1, 1, 1, 0],
        "values": [0.0, 0.0, 0.5, 0.0],
        "token_rewards": [0.0, 0.0, 0.5, 0.0],
    }
    row.update(over)
    return row


def _line(**over) -> str:
    return json.dumps(_row(**over))


PLAIN = [
    _line(),
    _line(prompt="q", reward=-0.0, logprobs=[-0.0, 0, -1, 2**60]),
    _line(prompt="a [list] and {braces}", response_tokens=["[", "]", "{", "[1, 2]"]),
    _line(values=[0.0, 1.0, 0.5, 0.0]),  # a critic: kept
    _line(logprobs=[1e-320, 5e-324, 1.7976931348623157e308, 123456789.123456789e-5]),
    _line(response_tokens=[], new_response_mask=[], logprobs=[], ref_logprobs=[]),
    '{"step": 1, "prompt": "\\u00e9\\ud83d\\ude00", "reward": 1, "logprobs": [9007199254740993,'
    ' -9223372036854775808, 18446744073709551615], "ref_logprobs": [1, 2, 3]}',
    _line(step="1", reward="0.5"),  # numbers as text (the readers accept them)
    _line(extra=[True, None, "x", {"a": [1]}], flag=False),  # unused fields of any kind
]

ODD = [
    _line(prompt="a [list], [[x]]"),  # "[" after "[" or ",": read plainly even in a string
    _line().replace("-1.25", "NaN"),
    _line().replace("-1.25", "Infinity"),
    _line().replace("-1.25", "-Infinity"),
    _line().replace("-1.25", "1e400"),
    _line().replace("-1.25", str(10**400)),
    _line().replace("-1.25", str(2**64 + 1)),
    _line(logprobs=[-0.5, True, -2.0, 0.0]),
    _line(logprobs=[-0.5, None, -2.0, 0.0]),
    _line(logprobs=[-0.5, "1.0", -2.0, 0.0]),
    _line(logprobs=[[-0.5], [-1.0], [-2.0], [0.0]]),
    _line(logprobs=[-0.5, [-1.0], -2.0, 0.0]),
    _line(logprobs=[-0.5, {"a": 1}, -2.0, 0.0]),
    _line(logprobs={"a": [1.0]}),
    _line(logprobs=[-0.5]),  # ragged
    _line(new_response_mask=[1.0, 1.0, 1.0, 0.0]),
    _line(new_response_mask=[1, 0, 1, 0]),
    _line(new_response_mask=[1, 2, 1, 0]),
    _line(new_response_mask=[True, True, True, False]),
    _line(response_tokens=["a", 1, "c"]),
    _line(response_tokens=["a", {"b": "c"}, "d"]),
    _line(step=1.5),
    _line(step=2**60),
    _line(reward=None),
    '{"step": 1, "prompt": "p", "step": 2, "reward": 0.5, "logprobs": [1.0]}',
    '{"step": 1, "prompt": "\\ud800", "reward": 0.5, "logprobs": [-1.0]}',
    '\ufeff{"step": 1, "prompt": "bom", "reward": 0.5, "logprobs": [-1.0]}',
    '{"step": 1, "prompt": "tab\tin a string", "reward": 0.5, "logprobs": [-1.0]}',
    '{"step": 1, "prompt": "nul\x00", "reward": 0.5, "logprobs": [-1.0]}',
    '{"step": 1, "prompt": "p", "reward": 0.5, "logprobs": [-1.0]} trailing',
    '{"step": 1, "prompt": "p", "reward": 0.5, "logprobs": [-1.0, ]}',
    '{"step": 1, "prompt": "p", "reward": 0.5, "logprobs": [01]}',
    '{"step": 1, "prompt": "p", "reward": 0.5, "deep": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"step": 1, "prompt": "p", "reward": 0.5, "deep": ' + '{"a":' * 900 + "1" + "}" * 900 + "}",
    '[{"step": 1}]',
    '"just a string"',
    "\x00\x00\x00\x00",
    '{"step": 1, "prompt": "truncated", "reward": 0.5, "logprobs": [-1.0, -2.',
]


def _read_both(path, monkeypatch):
    fast = _read(path)
    with monkeypatch.context() as patch:
        _plain_only(patch)
        slow = _read(path)
    return fast, slow


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # KL of 1.8e308
def test_crafted_lines_read_the_same_on_both_paths(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "board.jsonl", [*PLAIN, *ODD])
    (fast_run, fast_steps), (slow_run, slow_steps) = _read_both(path, monkeypatch)
    assert _same(fast_run, slow_run)
    assert _same(fast_steps, slow_steps)
    assert fast_run.summaries[0].samples + fast_run.summaries[1].samples >= len(PLAIN)
    assert len(fast_run.warnings) >= 20  # the odd lines were refused by the plain path


def test_a_crash_truncated_file_reads_the_same_on_both_paths(tmp_path, monkeypatch):
    path = tmp_path / "board.jsonl"
    nul = "\x00" * 64  # a zero-filled stretch, then a last line cut mid-number, no newline
    path.write_text(f"{_line()}\n{nul}\n{_line(prompt='q')}\n{_line(prompt='r')[:150]}")
    (fast_run, fast_steps), (slow_run, slow_steps) = _read_both(path, monkeypatch)
    assert _same(fast_run, slow_run)
    assert _same(fast_steps, slow_steps)
    assert fast_run.summaries[0].samples == 2
    assert [w.line for w in fast_run.warnings] == [2, 4]


@pytest.mark.parametrize("line", ODD)
def test_each_odd_line_reads_the_same_beside_a_good_one(line, tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "board.jsonl", [_line(), line])
    fast, slow = _read_both(path, monkeypatch)
    assert _same(fast[0], slow[0])
    assert _same(fast[1], slow[1])


def _convert_fast(line: str):
    return rllb.convert(FastLines().object(line.encode()), "f.jsonl", 1)


@pytest.mark.parametrize("line", PLAIN)
def test_plain_lines_take_the_fast_path_with_the_plain_records(line):
    fast = _convert_fast(line)
    slow = rllb.convert(json.loads(line), "f.jsonl", 1)
    assert _same(fast, slow)
    for name, values in fast.series.items():  # bit for bit (-0.0 stays -0.0, 0 is +0.0)
        assert values.dtype == np.float64
        assert values.flags.writeable
        assert np.array_equal(values.view(np.int64), slow.series[name].view(np.int64)), name


@pytest.mark.parametrize("line", ODD)
def test_odd_lines_leave_the_fast_path(line):
    with pytest.raises((SlowLine, RunFormatError)):  # a RunFormatError there: read plainly
        _convert_fast(line)


def test_a_line_over_the_fast_size_is_read_plainly(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_lines, "MAX_FAST_LINE", 100)
    with pytest.raises(SlowLine):
        _convert_fast(_line())
    path = write_jsonl(tmp_path / "board.jsonl", [_line(), _line(prompt="q")])
    run = open_run(path)
    assert run.summaries[0].samples == 2
    assert not run.warnings


def test_a_failed_parse_leaves_the_parser_usable():
    lines = FastLines()
    with pytest.raises(SlowLine):
        lines.object(b'{"a": NaN}')
    held = lines.object(_line().encode())  # proxies of this line still alive
    del held
    assert rllb.convert(lines.object(_line().encode()), "f", 1).score == 0.5


_NUMBER = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).map(
        lambda d: d if abs(d) < 10**300 and (d == 0 or abs(d) > 1e-300) else 0
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NUMBER, max_size=40))
@example([Decimal("18446744073709551616")])  # found by CI: 2**64 as a decimal prints as an int
@example([Decimal("-9223372036854775809")])
def test_numbers_match_json_bit_for_bit(values):
    text = "[" + ", ".join(str(v) for v in values) + "]"
    expected = np.array([float(v) for v in json.loads(text)], dtype=np.float64)
    try:
        got = FastLines().object(('{"x": ' + text + "}").encode())["x"].numbers(1 << 16)
    except SlowLine:
        # the one case the fast path refuses here, by design: an integer literal beyond 64 bits
        # (a decimal such as 2**64 prints as one); the plain path reads such a line
        assert any(_beyond_64_bits(str(v)) for v in values), text
        return
    assert np.array_equal(got.view(np.int64), expected.view(np.int64)), text


def _beyond_64_bits(literal: str) -> bool:
    """Whether a JSON number literal is an integer outside [-2**63, 2**64 - 1]."""
    if any(c in literal for c in ".eE"):
        return False
    return not -(2**63) <= int(literal) <= 2**64 - 1


def test_integers_beyond_64_bits_go_the_plain_way():
    for literal in ("18446744073709551616", "-9223372036854775809"):
        with pytest.raises(SlowLine):
            FastLines().object(('{"x": [' + literal + "]}").encode())
    edge = FastLines().object(b'{"x": [18446744073709551615, -9223372036854775808]}')
    assert edge["x"].numbers(4).tolist() == [2.0**64, -(2.0**63)]
