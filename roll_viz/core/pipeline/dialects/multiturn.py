"""Each framework's multi-turn conventions, under its own keys: which mask, laid out how.

All four train on the sampled assistant tokens only, but each lays the transcript out its own way
and names the mask its own way (read in each framework's code at the commits below):

- verl (agent loop, ``verl/experimental/agent_loop/agent_loop.py``, 1dda039, Aug 2026):
  ``responses`` start at the first assistant token; ``response_mask`` is 1 for LLM-generated
  tokens and 0 for tool observations and padding; ``attention_mask`` is 1 on every real token.
  Turn-by-turn token ids are concatenated (``use_inference_chat_template: False`` keeps the
  recorded ids, the extension property) and ``tokenization_sanity_check_mode`` compares them
  with a re-render of the whole conversation at the end (a warning, not an error).
- ROLL (agentic pipeline, ``roll/pipeline/agentic/env_manager/traj_env_manager.py``, 8eb27cc):
  the whole transcript is one row; ``response_mask`` is 1 on each turn's ``response_ids`` and 0
  on each turn's ``prompt_ids`` (the first prompt and every observation), ``prompt_mask`` 1
  before the first response; the episode score (the sum of the turn rewards) sits on the last
  token. GiGPO ships as ``adv_estimator: gigpo`` with ``episode_reward_weight``,
  ``step_reward_weight``, ``step_reward_gamma`` (0.95) and state groups by ``state_hash``.
- TRL 1.16 (``GRPOTrainer._tool_call_loop``): the completion is everything after the prompt;
  ``tool_mask`` is 0 on tool-result tokens (the tool suffix of the chat template) and 1
  elsewhere, padded with 1; the loss mask is ``completion_mask * tool_mask`` and the attention
  mask stays ``completion_mask`` (TRL #4974 was a custom mask used as both).
  ``max_tool_calling_iterations`` bounds the turns; ``environment_factory`` builds environments.
- OpenRLHF (agent mode, ``openrlhf/utils/agent.py`` + ``samples_generator.py``, 3c3be62):
  ``--train.agent_func_path`` names the agent; the sequence is the whole transcript,
  ``action_ranges`` mark each sampled action, ``action_mask`` is 1 on them and is shifted by one
  (``action_mask[1:]``: aligned with next-token log-probs); the reward is the sum of the step
  rewards, one scalar per episode.

``native_mask(framework, episode)`` builds each framework's mask in its own layout; the tests
map it back onto the transcript (it equals ``masks.correct_mask``) and run TRL's own
``_tool_call_loop`` against ``trl_layout``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from roll_viz.core.agentic.episode import Episode


@dataclass(frozen=True)
class Layout:
    """One episode in a framework's layout.

    Attributes:
        prompt_ids: the tokens before the region the mask covers (empty when it covers all).
        ids: the tokens the mask covers.
        mask: the framework's mask over ``ids`` (1 = trained).
        offset: where ``ids[0]`` sits in the transcript (the mask of ``ids[i]`` is the mask of
            transcript position ``offset + i``; OpenRLHF's shift makes it 1).
    """

    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    mask: tuple[int, ...]
    offset: int


def _first_sampled(episode: Episode) -> int:
    position = 0
    for seg in episode.segments:
        if seg.sampled:
            return position
        position += len(seg.token_ids)
    return position


def _model_flags(episode: Episode) -> list[int]:
    return [int(s.role == "assistant" and s.sampled) for s in episode.segments for _ in s.token_ids]


def verl_layout(episode: Episode) -> Layout:
    """The verl agent loop: ``prompts`` | ``responses`` with ``response_mask`` (1 = LLM tokens)."""
    start, ids = _first_sampled(episode), episode.token_ids
    return Layout(ids[:start], ids[start:], tuple(_model_flags(episode)[start:]), start)


def trl_layout(episode: Episode) -> Layout:
    """TRL: ``prompt_ids`` | ``completion_ids`` with ``tool_mask`` (0 = tool result)."""
    start, ids = _first_sampled(episode), episode.token_ids
    flags = [int(s.role != "tool") for s in episode.segments for _ in s.token_ids]
    return Layout(ids[:start], ids[start:], tuple(flags[start:]), start)


def roll_layout(episode: Episode) -> Layout:
    """ROLL's trajectory mode: the whole row, ``response_mask`` 1 on each turn's response."""
    return Layout((), episode.token_ids, tuple(_model_flags(episode)), 0)


def openrlhf_layout(episode: Episode) -> Layout:
    """OpenRLHF's agent mode: ``action_mask`` over the sequence, shifted by one."""
    return Layout(episode.token_ids[:1], episode.token_ids[1:], tuple(_model_flags(episode)[1:]), 1)


@dataclass(frozen=True)
class MultiTurnConvention:
    """One framework's multi-turn conventions.

    Attributes:
        mask_key: the native name of the per-token loss mask.
        attention_key: the native name of the attention mask (never the loss mask).
        keys: native config keys for multi-turn rollouts -> what they do.
        history: how the history is tokenized (the extension property).
        reward: how rewards reach the tokens.
        credit: the per-turn credit rules it ships (``credit.CREDIT_RULES`` names) and their keys.
        layout: ``layout(episode) -> Layout``.
    """

    mask_key: str
    attention_key: str
    keys: dict[str, str]
    history: str
    reward: str
    credit: dict[str, str]
    layout: Callable[[Episode], Layout]


CONVENTIONS: dict[str, MultiTurnConvention] = {
    "verl": MultiTurnConvention(
        "response_mask",
        "attention_mask",
        {
            "actor_rollout_ref.rollout.multi_turn.enable": "multi-turn tool rollouts",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": "turn cap",
            "actor_rollout_ref.rollout.multi_turn.max_user_turns": "user/tool turn cap",
            "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": (
                "False (default): train on the recorded token ids"
            ),
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode": (
                "strict / ignore_strippable / disable: warn when a re-render differs"
            ),
        },
        "token ids concatenated turn by turn; a final re-render is compared (a warning)",
        "scores on the last response token; one scalar per trajectory",
        {},
        verl_layout,
    ),
    "roll": MultiTurnConvention(
        "response_mask",
        "attention_mask",
        {
            "env_manager_cls": "TrajEnvManager (one row per episode) or StepEnvManager",
            "adv_estimator": "gigpo / step_reinforce / agentic_reinforce / grpo / gae",
            "episode_reward_weight": "GiGPO's weight of A^E (1.0)",
            "step_reward_weight": "GiGPO's weight of A^S, omega (1.0)",
            "step_reward_gamma": "discount of the step returns (0.95)",
        },
        "each turn's prompt_ids and response_ids concatenated as recorded",
        "episode score (sum of the turn rewards) on the last token",
        {"gigpo": "adv_estimator: gigpo (state groups by state_hash, std groups of one -> 0)"},
        roll_layout,
    ),
    "trl": MultiTurnConvention(
        "tool_mask",
        "completion_mask",
        {
            "max_tool_calling_iterations": "turn cap (GRPOConfig)",
            "environment_factory": "builds the environments (GRPOTrainer argument)",
            "mask_truncated_completions": "zeroes completion_mask and tool_mask of cut rows",
        },
        "prompt + completion + tool suffix concatenated as ids (no re-tokenisation)",
        "reward functions score the whole completion; one scalar per sample",
        {},
        trl_layout,
    ),
    "openrlhf": MultiTurnConvention(
        "action_mask",
        "attention_mask",
        {"--train.agent_func_path": "the agent script (agent mode)"},
        "observation + action + feedback ids concatenated (feedback tokenized alone)",
        "sum of the step rewards; one scalar per episode",
        {},
        openrlhf_layout,
    ),
}


def native_mask(framework: str, episode: Episode) -> Layout:
    """``framework``'s layout and mask of ``episode`` (KeyError names the known ones)."""
    if framework not in CONVENTIONS:
        raise KeyError(
            f"no multi-turn convention for {framework!r}; known: {', '.join(CONVENTIONS)}"
        )
    return CONVENTIONS[framework].layout(episode)
