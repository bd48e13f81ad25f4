"""The readers' fast number path gives the same records and the same messages as the checked one.

``get_numbers`` converts a JSON line's number lists with one C pass when the line's bytes hold no
``true``/``false`` (no element can then be a bool); otherwise it checks every element's type
first. Forcing the checked path everywhere (``_has_bools`` always True) is the reader as it was
before the fast path: every fixture must scan and load to identical records and warnings.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from roll_viz.data.runs import RunFormatError, load_step, open_run, parse
from tests.data.helpers import FIXTURES, write_jsonl

FIXTURE_RUNS = [
    "rllb",
    "trl",
    "verl",
    "verl_legacy",
    "roll_dump",
    "unipo/run.json",
    "unipo/run.jsonl",
    "plain/samples.csv",
    "plain/samples.jsonl",
    "rollviz/run.jsonl",
    "bad/mixed.jsonl",
    "bad/ragged_rllb.jsonl",
    "bad/rollout_dump_data.step_1.jsonl",
    "bad/all_bad.jsonl",
    "bad/whitespace.jsonl",
]


def _same(a, b) -> bool:
    """Deep equality for the records (tensors, arrays, dataclasses, tuples, errors)."""
    if isinstance(a, torch.Tensor):  # NaN == NaN here (a KL over no positions)
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if not a.is_floating_point():
            return torch.equal(a, b)
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(
            a.nan_to_num(0.0), b.nan_to_num(0.0)
        )
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, RunFormatError):
        return a.as_dict() == b.as_dict()
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b  # NaN == NaN here
    return a == b


def _read(path):
    """(Run, loaded steps), or (the RunFormatError that refused the file, [])."""
    try:
        run = open_run(path)
    except RunFormatError as err:
        return err, []
    return run, [load_step(run, step) for step in run.steps]


@pytest.mark.parametrize("name", FIXTURE_RUNS)
def test_every_fixture_reads_the_same_on_the_checked_path(name, monkeypatch):
    fast_run, fast_steps = _read(FIXTURES / name)
    monkeypatch.setattr(parse, "_has_bools", lambda raw: True)
    slow_run, slow_steps = _read(FIXTURES / name)
    assert _same(fast_run, slow_run)
    assert _same(fast_steps, slow_steps)


# (a bool is left out: its line holds the bytes ``true``/``false``, so it never takes the fast
# path; test_a_bool_in_a_number_list_skips_the_row_with_its_message covers it)
BAD_LISTS = [
    [0.5, "0.5"],
    [1.0, None],
    [1.0, [2.0]],
    [1.0, {"a": 1}],
    [1.0, 10**400],
    [1.0, float("nan")],
    [float("inf")],
]


@pytest.mark.parametrize("value", BAD_LISTS)
def test_a_bad_element_is_named_the_same_on_both_paths(value):
    messages = []
    for raw_has_bools in (True, False):
        with parse._line_without_bools(raw_has_bools), pytest.raises(RunFormatError) as err:
            parse.get_numbers({"lp": value}, "lp", "f.jsonl", 3)
        messages.append(err.value.as_dict())
    assert messages[0] == messages[1]
    assert messages[0]["field"].startswith("lp[")


@pytest.mark.parametrize("value", [[], [0, 1, 2], [-1.5, 2**60, 1e-300], [3]])
def test_good_lists_convert_the_same_on_both_paths(value):
    out = []
    for raw_has_bools in (True, False):
        with parse._line_without_bools(raw_has_bools):
            out.append(parse.get_numbers({"lp": value}, "lp", "f.jsonl", 1))
    assert out[0].dtype == out[1].dtype == np.float64
    assert np.array_equal(out[0], out[1])


def test_a_bool_in_a_number_list_skips_the_row_with_its_message(tmp_path):
    good = {"step": 0, "prompt": "p", "reward": 1.0, "logprobs": [-0.5], "ref_logprobs": [-0.4]}
    bad = {**good, "logprobs": [True]}
    run = open_run(write_jsonl(tmp_path / "board.jsonl", [good, bad, good]))
    assert run.summaries[0].samples == 2
    (warning,) = run.warnings
    assert (warning.line, warning.field) == (2, "logprobs[0]")
    assert "expected a number, got True" in warning.message


def test_the_flag_is_off_outside_a_jsonl_line():
    assert not getattr(parse._LINE, "no_bools", False)
    with pytest.raises(RunFormatError, match="expected a number"):
        parse.get_numbers({"x": [1.0, True]}, "x", "t.parquet", 1)  # a parquet row: checked


def test_the_boolean_check_finds_every_true_and_false():
    rng = np.random.default_rng(0)
    pieces = [b"true", b"false", b"u", b"f", b"ru", b"fals", b"tru", b"e", b"0.5, ", b'"uf"']
    for _ in range(2000):
        parts = rng.choice(len(pieces), size=int(rng.integers(0, 120)))
        raw = b"".join(pieces[k] for k in parts)
        assert parse._has_bools(raw) == (b"true" in raw or b"false" in raw), raw
