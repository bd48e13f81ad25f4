"""ATIF trajectories: valid files become Episodes token for token; truncated, huge, deep and
mistyped files give one message per trajectory naming the line and the field path.

Fixtures: tests/fixtures/runs/atif (written by make_atif.py there).
"""

from __future__ import annotations

import json

import pytest

from roll_viz.core.agentic.credit import credit
from roll_viz.core.agentic.masks import batch_episodes, rule_mask
from roll_viz.data.runs import atif, parse
from roll_viz.data.runs.atif import is_atif, read_atif
from roll_viz.data.runs.detect import detect
from roll_viz.data.runs.parse import DocumentTooLarge, RunFormatError
from tests.data.helpers import fixture

PROMPT = (1, 2, 3, 4, 5)


def test_valid_trajectory_becomes_a_token_exact_episode():
    read = read_atif(fixture("atif/calculator.json"))
    assert read.token_ids == "all"
    assert read.unit == "token"
    assert read.problems == ()
    assert read.extension == ()
    (episode,) = read.episodes
    roles = [(s.role, s.turn) for s in episode.segments]
    assert roles == [
        ("system", -1),
        ("user", -1),
        ("assistant", 0),
        ("tool", 0),
        ("assistant", 1),
        ("tool", 1),
        ("assistant", 2),
    ]
    # the transcript is the last prompt_token_ids plus the last completion, exactly
    last_prompt = (*PROMPT, 10, 11, 12, 0, 20, 21, 13, 14, 0, 22, 23, 24)
    assert episode.token_ids == (*last_prompt, 15, 16, 17, 0)
    first = episode.segments[2]
    assert first.sampled
    assert first.text == "<think>First the product.</think>\ncalc 3*4"
    assert first.logprobs == (-0.5, -0.25, -0.125, -0.0625)
    assert first.tool_call == 'calc({"expr": "3*4"})'
    assert episode.segments[3].text == "12"
    assert episode.outcome == 1.0
    assert episode.turn_rewards == (0.1, 0.1, 0.0)
    assert episode.states == ("start", "have 12", "have 17")
    assert episode.task == "calc-1"
    assert episode.env == "calculator"


def test_the_episode_opens_in_the_mask_and_credit_views():
    read = read_atif(fixture("atif/calculator.json"))
    batch = batch_episodes(read.episodes, unit=read.unit)
    assert int(rule_mask(batch, "correct").sum()) == 4 + 3 + 4
    result = credit("gigpo", read.episodes)
    assert len(result.turn_advantages[0]) == 3


def test_jsonl_group_reports_bad_lines_and_a_broken_extension():
    read = read_atif(fixture("atif/group.jsonl"))
    assert len(read.episodes) == 2
    assert [(p.line, p.field) for p in read.problems] == [(3, "steps[0].message"), (4, None)]
    assert "expected a string or a list of content parts, got int" in read.problems[0].message
    assert "invalid JSON" in read.problems[1].message
    # trajectory 1's third prompt re-rendered the first assistant turn: position 5 differs
    assert read.extension == ((1, 5, 5),)
    assert any("history re-rendered" in n for n in read.notes)
    assert read.episodes[1].outcome == 0.0


def test_trajectory_without_token_ids_works_per_segment():
    read = read_atif(fixture("atif/no_tokens.json"))
    assert read.token_ids == "none"
    assert read.unit == "segment"
    (episode,) = read.episodes
    assert [(s.role, s.turn, s.text) for s in episode.segments] == [
        ("user", -1, "Find x."),
        ("assistant", 0, "lookup x"),
        ("tool", 0, "x = 3"),
        ("user", 0, "And y?"),
        ("assistant", 1, "y is 4"),
    ]
    assert episode.task == "s-parts"
    assert {"no outcome reward (extra.reward): taken as 0"} <= set(read.notes)
    batch = batch_episodes(read.episodes, unit=read.unit)
    assert rule_mask(batch, "correct")[0].int().tolist() == [0, 1, 0, 0, 1]
    # the credit views take the same per-segment layout
    per_segment = credit("outcome_broadcast", read.episodes, unit=read.unit)
    assert per_segment.token_advantages.shape == (1, 5)


def test_tokenize_fills_in_missing_ids_and_says_so():
    read = read_atif(fixture("atif/no_tokens.json"), tokenize=lambda t: [len(w) for w in t.split()])
    assert read.token_ids == "re-encoded"
    assert read.unit == "token"
    assert any("not the sampled tokens" in n for n in read.notes)
    assert read.episodes[0].segments[1].token_ids == (6, 1)


def test_mistyped_lines_each_name_their_field():
    read = read_atif(fixture("atif/wrong_types.jsonl"))
    assert len(read.episodes) == 1  # the last line is good
    got = {p.line: (p.field, p.message) for p in read.problems}
    assert got[1] == ("steps", "expected a list, got str")
    assert got[2][0] == "steps[2].source"
    assert "'robot'" in got[2][1]
    assert got[3][0] == "steps[2].metrics.completion_token_ids[1]"
    assert got[4][0] == "steps[3].metrics.logprobs[0]"
    assert got[5][0] == "schema_version"
    assert got[6][0] == "steps[4].message"
    assert got[7] == ("steps[2].tool_calls[0].arguments", "expected an object, got list")
    assert got[8] == ("extra.reward", "expected a number, got str")
    assert got[9] == ("(trajectory)", "expected an object, got list")
    assert got[10][0] == "extra.reward"
    assert "no float can hold" in got[10][1]
    line = read.problems[0].one_line()
    assert line.endswith("wrong_types.jsonl:1: steps: expected a list, got str")


def test_truncated_deep_and_huge_files_are_one_clear_error():
    with pytest.raises(RunFormatError, match="invalid JSON"):
        read_atif(fixture("atif/truncated.json"))
    with pytest.raises(RunFormatError, match="nested too deeply"):
        read_atif(fixture("atif/deep.json"))
    with pytest.raises(DocumentTooLarge, match="20x its size"):
        read_atif(fixture("atif/huge.json"))


def test_size_caps_bite_with_a_message(monkeypatch, tmp_path):
    monkeypatch.setattr(parse, "MAX_JSON_BYTES", 1000)
    with pytest.raises(DocumentTooLarge, match="larger than the JSON cap 1000"):
        read_atif(fixture("atif/calculator.json"))
    monkeypatch.undo()
    monkeypatch.setattr(atif, "MAX_STEPS", 3)
    with pytest.raises(RunFormatError, match="5 entries, more than the cap 3") as err:
        read_atif(fixture("atif/calculator.json"))
    assert err.value.field == "steps"
    monkeypatch.undo()
    doc = json.loads(fixture("atif/calculator.json").read_text())
    monkeypatch.setattr(atif, "MAX_TRAJECTORIES", 2)
    many = tmp_path / "many.json"
    many.write_text(json.dumps([doc] * 3))
    with pytest.raises(RunFormatError, match="3 trajectories, more than 2"):
        read_atif(many)


def test_the_token_cap_bites_per_trajectory(monkeypatch):
    monkeypatch.setattr(atif, "MAX_TRANSCRIPT_TOKENS", 17)  # the longest list: 17
    with pytest.raises(RunFormatError, match="21 tokens, more than the cap 17"):
        read_atif(fixture("atif/calculator.json"))


def test_detection_parses_when_the_version_comes_late(tmp_path):
    doc = json.loads(fixture("atif/calculator.json").read_text())
    late = {"steps": doc["steps"], "notes": "x" * 9000, "schema_version": "ATIF-v1.7"}
    path = tmp_path / "late.json"
    path.write_text(json.dumps(late))
    assert is_atif(path)
    lines = tmp_path / "late.jsonl"
    lines.write_text(json.dumps(late) + "\n")
    assert is_atif(lines)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"notes": "x" * 9000, "schema_version": "v2"}))
    assert not is_atif(other)
    assert not is_atif(tmp_path / "missing.json")


def test_a_newer_minor_version_is_read_with_a_note(tmp_path):
    doc = json.loads(fixture("atif/calculator.json").read_text())
    doc["schema_version"] = "ATIF-v1.9"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    read = read_atif(path)
    assert "ATIF-v1.9 is newer than ATIF-v1.7: read as v1.7" in read.notes


def test_detection_names_atif_and_the_run_reader_points_to_it():
    for name in ("calculator.json", "group.jsonl", "no_tokens.json"):
        assert is_atif(fixture(f"atif/{name}"))
    assert not is_atif(fixture("bad/mixed.jsonl"))
    with pytest.raises(RunFormatError, match="ATIF agent trajectory"):
        detect(fixture("atif/calculator.json"))
    with pytest.raises(RunFormatError, match="ATIF agent trajectory"):
        detect(fixture("atif/group.jsonl"))
