"""Recorded episodes: committed, compact, bounded, consistent with the tools, and re-readable.

Every shipped file is replayed through the toy tools as they are now (each assistant text
stepped again must give the recorded replies, rewards, anchor states and outcome), so a change
to the tools that makes a preset stale fails here. The command in each file is the CLI's (and on
the tiny model it writes a file of the same schema). The log-probs are re-scored with the bundled
model in the ``slow`` tier.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from roll_viz.cli.record_episodes import PRESETS
from roll_viz.cli.record_episodes import main as cli_main
from roll_viz.data import recorded_episodes as recorded
from roll_viz.lm import toy_tools
from roll_viz.lm.episodes import MAX_EPISODE_TOKENS, score_transcripts
from roll_viz.lm.transcript import reencode

NAMES = list(recorded.RECORDED_EPISODES)
MAX_BYTES = 100_000  # a recording stays small enough to commit and to parse at once


def test_every_preset_has_a_file_and_nothing_else_is_shipped():
    files = {p.stem for p in recorded.RECORDED_EPISODES_DIR.glob("*.json")}
    assert files == set(NAMES) == set(PRESETS)


@pytest.mark.parametrize("name", NAMES)
def test_a_recording_loads_and_is_bounded(name):
    assert (recorded.RECORDED_EPISODES_DIR / f"{name}.json").stat().st_size < MAX_BYTES
    rec = recorded.load_recorded_episodes(name)
    req = rec.request
    assert rec.batch.model.startswith("SmolLM2-135M")
    assert rec.batch.engine == ""
    tasks, tokens = PRESETS[name]
    assert req.tasks == tasks
    assert (req.group_size, req.max_turns, req.max_turn_tokens) == (4, 3, tokens)
    assert len(rec.batch.episodes) == len(req.tasks) * req.group_size
    assert rec.command == f"python -m roll_viz episodes --preset {name} --out " + (
        f"roll_viz/data/recorded_episodes/{name}.json"
    )
    for ep in rec.batch.episodes:
        assert 1 <= ep.n_turns <= req.max_turns
        assert len(ep.token_ids) <= MAX_EPISODE_TOKENS
        for seg in ep.segments:
            if seg.sampled:
                assert len(seg.token_ids) <= req.max_turn_tokens
                assert seg.logprobs is not None
                assert seg.ref_logprobs == seg.logprobs  # the base model is its own reference
                assert all(lp <= 0.0 for lp in seg.logprobs)


@pytest.mark.parametrize("name", NAMES)
def test_a_recording_replays_through_the_tools(name):
    for ep in recorded.load_recorded_episodes(name).batch.episodes:
        task = toy_tools.TASKS[ep.task]
        state = toy_tools.reset(task)
        rewards, states, replies = [], [], []
        for seg in ep.segments:
            if seg.sampled:
                states.append(toy_tools.state_id(task, state))
                step = toy_tools.step(task, state, seg.text)
                assert seg.tool_call == step.call
                rewards.append(step.reward)
                replies.append((step.role, step.observation))
                state = step.state
        recorded_replies = [(s.role, s.text) for s in ep.segments if s.turn >= 0 and not s.sampled]
        assert recorded_replies == replies
        assert ep.turn_rewards == pytest.approx(rewards)
        assert ep.states == tuple(states)
        assert ep.outcome == toy_tools.outcome(task, state)


def test_the_presets_show_different_outcomes_and_shared_anchor_states():
    calculator = recorded.load_recorded_episodes("calculator").batch.episodes
    assert {e.outcome for e in calculator} == {0.0, 1.0}
    guess = recorded.load_recorded_episodes("guess").batch.episodes
    seen = [s for e in guess for s in e.states[1:]]
    assert len(seen) > len(set(seen))  # some anchor state is reached by two episodes


def test_the_think_preset_shows_what_stripping_think_changes():
    for name in NAMES:
        rec = recorded.load_recorded_episodes(name)
        for ep, again, stripped in zip(
            rec.batch.episodes, rec.reencoded, rec.reencoded_strip_think, strict=True
        ):
            assert again == ep.token_ids  # SmolLM2's samples here survive the text round trip
            if name == "think":  # the worked example's <think> blocks are earlier turns
                assert len(stripped) < len(ep.token_ids)
            else:
                assert stripped == ep.token_ids  # nothing to strip


@pytest.mark.parametrize("name", NAMES)
def test_write_read_round_trip(name):
    rec = recorded.load_recorded_episodes(name)
    text = recorded.episodes_to_json(
        rec.batch, rec.request, rec.command, rec.seconds, rec.reencoded, rec.reencoded_strip_think
    )
    again = recorded.episodes_from_json(text, name)
    assert again == rec


def test_progress_survives_the_round_trip():
    rec = recorded.load_recorded_episodes("guess")
    ep = rec.batch.episodes[0]
    scored = dataclasses.replace(ep, progress=tuple(0.25 * (k + 1) for k in range(ep.n_turns)))
    batch = dataclasses.replace(rec.batch, episodes=(scored, *rec.batch.episodes[1:]))
    text = recorded.episodes_to_json(
        batch, rec.request, rec.command, rec.seconds, rec.reencoded, rec.reencoded_strip_think
    )
    again = recorded.episodes_from_json(text, "guess")
    assert again.batch.episodes[0].progress == scored.progress
    assert again.batch.episodes[1].progress is None  # an episode without progress stays so


def _text(name: str = "guess") -> dict:
    return json.loads((recorded.RECORDED_EPISODES_DIR / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda d: "not json", "JSONDecodeError"),
        (lambda d: {**d, "schema": "other/1"}, "not a roll-viz.episodes/1 file"),
        (lambda d: {k: v for k, v in d.items() if k != "episodes"}, "KeyError"),
        (lambda d: {**d, "episodes": d["episodes"] * 7}, "at most one request"),
        (lambda d: {**d, "request": {**d["request"], "group_size": 99}}, "group_size"),
    ],
)
def test_a_damaged_file_is_one_clear_error(damage, match):
    broken = damage(_text())
    text = broken if isinstance(broken, str) else json.dumps(broken)
    with pytest.raises(ValueError, match=match):
        recorded.episodes_from_json(text, "broken")


def test_a_segment_whose_logprobs_do_not_fit_its_tokens_is_refused():
    data = _text()
    seg = next(s for s in data["episodes"][0]["segments"] if s["sampled"])
    seg["lp"] = seg["lp"][:-1]
    with pytest.raises(ValueError, match="values for"):
        recorded.episodes_from_json(json.dumps(data), "broken")


def test_the_command_writes_the_same_schema_on_the_tiny_model(tmp_path):
    out = tmp_path / "calculator.json"
    command = recorded.load_recorded_episodes("calculator").command
    args = shlex.split(command)[4:]  # after "python -m roll_viz episodes"
    args[args.index("--out") + 1] = str(out)
    assert cli_main([*args, "--model", "tiny", "--max-turns", "1", "--max-turn-tokens", "4"]) == 0
    mine = recorded.episodes_from_json(out.read_text(), "mine")
    assert mine.request.tasks == PRESETS["calculator"][0]
    assert len(mine.batch.episodes) == 8


def test_unknown_preset():
    with pytest.raises(KeyError, match="no recorded episodes"):
        recorded.load_recorded_episodes("nope")


@pytest.mark.slow
def test_recorded_logprobs_are_the_bundled_models():
    from roll_viz.lm.models import load_models

    bundle = load_models("smollm2", device="cpu", dtype="float32")
    for name in NAMES:
        rec = recorded.load_recorded_episodes(name)
        episodes = rec.batch.episodes
        scores = score_transcripts(bundle, episodes, rec.request.logprob_temperature)
        stored = [s for e in episodes for s in e.segments if s.sampled]
        for (lp, _), seg in zip(scores, stored, strict=True):
            assert lp == pytest.approx(seg.logprobs, abs=1e-3)
            body = seg.token_ids[:-1] if seg.token_ids[-1] in bundle.eos_ids else seg.token_ids
            assert bundle.tokenizer.decode(list(body)) == seg.text
        for ep, again, stripped in zip(
            episodes, rec.reencoded, rec.reencoded_strip_think, strict=True
        ):
            assert reencode(bundle.tokenizer, ep) == again
            assert reencode(bundle.tokenizer, ep, strip_think=True) == stripped


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--task", "calc-1", "--group-size", "99"], "group_size must be 1..8"),
        (["--task", "calc-1", "--max-turns", "9"], "max_turns must be 1..4"),
        (["--task", "calc-1", "--max-turn-tokens", "1000"], "max_turn_tokens must be 1..64"),
        ([], "give at least one task"),
    ],
)
def test_the_command_refuses_work_beyond_the_bounds(args, named, capsys):
    assert cli_main([*args, "--model", "tiny"]) == 2
    assert named in capsys.readouterr().err


def test_the_command_is_a_subcommand():
    from roll_viz.__main__ import COMMANDS

    assert COMMANDS["episodes"] == "roll_viz.cli.record_episodes"
