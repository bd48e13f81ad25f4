"""Each framework's multi-turn mask in its own layout equals the correct mask over the transcript,
and TRL's own ``GRPOTrainer._tool_call_loop`` (trl 1.16, installed) builds the same tool mask and
completion ids as ``trl_layout`` from the same turns.

The TRL check drives the real method with a stand-in trainer: generation returns the episode's
recorded turns, the tool suffix returns the episode's recorded tool tokens, and ``parse_response``
(which needs a real tokenizer's response schema) returns the episode's next message.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roll_viz.core.agentic.masks import batch_episodes, rule_mask
from roll_viz.core.pipeline.dialects.multiturn import CONVENTIONS, native_mask
from tests.core.test_agentic_masks import calc_episode, short_episode

grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")  # trl is in the dev venv


@pytest.mark.parametrize("framework", list(CONVENTIONS))
def test_native_masks_map_back_to_the_correct_mask(framework):
    episodes = [calc_episode(), short_episode()]
    batch = batch_episodes(episodes)
    correct = rule_mask(batch, "correct")
    for b, episode in enumerate(episodes):
        layout = native_mask(framework, episode)
        assert layout.prompt_ids + layout.ids == episode.token_ids
        assert len(layout.mask) == len(layout.ids)
        for i, m in enumerate(layout.mask):
            assert bool(m) == bool(correct[b, layout.offset + i])
        before = correct[b, : layout.offset]
        assert not before.any()  # nothing trainable is left out of the framework's region


def test_layouts_by_hand():
    episode = calc_episode()
    verl = native_mask("verl", episode)
    assert verl.prompt_ids == (1, 2, 3, 4, 5)
    assert verl.mask == (1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1)
    assert native_mask("trl", episode).mask == verl.mask
    roll = native_mask("roll", episode)
    assert roll.mask == (0,) * 5 + verl.mask
    assert native_mask("openrlhf", episode).mask == roll.mask[1:]
    with pytest.raises(KeyError, match="known"):
        native_mask("deepspeed", episode)


def test_conventions_name_their_native_keys():
    assert CONVENTIONS["verl"].mask_key == "response_mask"
    assert CONVENTIONS["trl"].mask_key == "tool_mask"
    assert CONVENTIONS["trl"].attention_key == "completion_mask"
    assert CONVENTIONS["openrlhf"].mask_key == "action_mask"
    assert "gigpo" in CONVENTIONS["roll"].credit


def test_trl_tool_call_loop_builds_the_same_tool_mask(monkeypatch):
    episode = calc_episode()
    assistants = [s for s in episode.segments if s.role == "assistant"]
    tools = [s for s in episode.segments if s.role == "tool"]

    def message(seg):
        out = {"role": "assistant", "content": seg.text}
        if seg.tool_call is not None:
            expr = seg.tool_call.split(" ", 1)[1]
            out["tool_calls"] = [
                {"type": "function", "function": {"name": "calc", "arguments": {"expr": expr}}}
            ]
        return out

    turn = {"next": 1}

    def calc(expr):
        return {"3*4": "12", "12+5": "17"}[expr]

    def generate(ids, images, fields, num_generations, has_tool_images):
        seg = assistants[turn["next"]]
        turn["next"] += 1
        return [list(seg.token_ids)], [list(seg.logprobs)]

    suffixes = iter(tools)
    replies = iter(assistants[1:])
    monkeypatch.setattr(
        grpo_trainer, "parse_response", lambda tok, ids, prefix, tools: message(next(replies))
    )
    trainer = SimpleNamespace(
        max_tool_calling_iterations=10,
        _sync_tool_dicts=[{"calc": calc}],
        _async_tool_dicts=[{}],
        _get_tool_suffix_ids=lambda messages: list(next(suffixes).token_ids),
        _generate_single_turn=generate,
        use_vllm=False,
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=10_000)),
        _is_vlm=False,
        max_completion_length=1000,
        tools=[],
        environment_factories=None,
        _tokenizer=None,
    )
    prompt = [s for s in episode.segments if s.turn < 0]
    prompt_ids = [[t for s in prompt for t in s.token_ids]]
    first = assistants[0]
    result = grpo_trainer.GRPOTrainer._tool_call_loop(
        trainer,
        [[{"role": "user", "content": "(3*4)+5?"}]],
        prompt_ids,
        [list(first.token_ids)],
        [[message(first)]],
        [list(first.logprobs)],
        None,
        None,
    )
    tool_mask, _, completion_ids, logprobs, calls, failures, _ = result
    layout = native_mask("trl", episode)
    assert (calls, failures) == (2, 0)
    assert tuple(completion_ids[0]) == layout.ids
    assert tuple(tool_mask[0]) == layout.mask
    # TRL pads the tool tokens' log-probs with 0.0 where roll-viz has none
    sampled = [x for s in assistants for x in s.logprobs]
    assert [x for x, m in zip(logprobs[0], tool_mask[0], strict=True) if m] == sampled
