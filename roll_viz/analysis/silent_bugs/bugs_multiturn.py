"""Silent bugs of multi-turn episodes: field-2026-b.md section 1 rows 2-6, section 2 items 12-14.

A tool-using episode is one transcript (``episode_sets.TRANSCRIPT``): the prompt, then per turn
the assistant's sampled tokens and the tool's answer. Only the sampled tokens may carry
gradient. Each case writes the buggy mask plainly (a list comprehension over the transcript, as
its thread describes the code) and takes roll-viz's token-mean loss on it
(``core.agentic.masks.grad_coefficients``: d L / d log pi at the first step) beside the right
mask (``masks.rule_mask(batch, "correct")``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from roll_viz.analysis.episode_sets import (
    EOS,
    HISTORY,
    HISTORY_TRANSCRIPT,
    TRANSCRIPT,
    Rows,
    make_episode,
)
from roll_viz.analysis.silent_bugs.bug_record import Outcome, SilentBug, num, series
from roll_viz.core.agentic import masks
from roll_viz.core.agentic.credit import CreditParams, credit, turn_index_bias, turn_index_demo

#: the episode's per-token advantage (one outcome, broadcast: the mask is the lesson here)
ADVANTAGE = 1.0


def _roles(rows: Rows) -> list[tuple[str, int, bool]]:
    """(role, turn, sampled) of every token of the transcript."""
    return [(role, turn, sampled) for role, turn, sampled, tokens in rows for _ in tokens]


@dataclass(frozen=True)
class Side:
    """One mask's gradient at the first step: d L / d log pi per token and what it lands on.

    Attributes:
        grad: (T,) ``masks.grad_coefficients`` of the token-mean loss over the mask.
        tokens: tokens in the mask.
        context_tokens: tokens in the mask that the sampler did not write.
        context_share: share of sum |grad| on those tokens.
    """

    grad: torch.Tensor
    tokens: int
    context_tokens: int
    context_share: float


def _side(batch: masks.TranscriptBatch, mask: torch.Tensor) -> Side:
    adv = torch.full(batch.valid.shape, ADVANTAGE, dtype=torch.float64)
    grad = masks.grad_coefficients(adv, mask)[0]
    context = mask[0] & ~batch.sampled[0]
    total = float(grad.abs().sum())
    return Side(
        grad=grad,
        tokens=int(mask.sum()),
        context_tokens=int(context.sum()),
        context_share=float(grad.abs()[context].sum()) / total if total else 0.0,
    )


def _losses(rows, wrong_mask: list[float]) -> tuple[Side, Side, list[str]]:
    """roll-viz's correct mask and the buggy one, the same token-mean loss on each."""
    episode, pieces = make_episode(rows)
    batch = masks.batch_episodes([episode])
    right = _side(batch, masks.rule_mask(batch, "correct"))
    wrong = _side(batch, torch.tensor([wrong_mask]) > 0)
    return right, wrong, pieces


def _grad_outcome(right, wrong, pieces, wrong_value, right_value, formula) -> Outcome:
    return Outcome(
        wrong=wrong_value,
        right=right_value,
        labels=tuple(f"{i}:{p!r}" for i, p in enumerate(pieces)),
        wrong_series=series(0.0 - wrong.grad),
        right_series=series(0.0 - right.grad),
        series_title="push on each token's log-prob (-d loss / d log pi)",
        formula=formula,
    )


# ------------------------------------------------ TRL #5144 / PR #4975: tool output trained on


def wrong_tool_mask(rows=TRANSCRIPT) -> list[float]:
    """TRL's Liger loss path before PR #4975: ``completion_mask`` alone, ``tool_mask`` ignored.

    Every token after the prompt is a completion token, the tool's answer included.
    """
    return [1.0 if turn >= 0 else 0.0 for _role, turn, _sampled in _roles(rows)]


def _tool_mask() -> Outcome:
    right, wrong, pieces = _losses(TRANSCRIPT, wrong_tool_mask())
    n, extra = wrong.tokens, wrong.context_tokens
    return _grad_outcome(
        right,
        wrong,
        pieces,
        wrong.context_share,
        right.context_share,
        f"completion tokens after the prompt: {n} (of which {extra} are the tool's answer)\n"
        f"token-mean: every trained token gets A / {n} = {num(ADVANTAGE / n)}\n"
        f"share of the gradient on tool output: {extra} / {n} = {num(wrong.context_share)}\n"
        f"with tool_mask: {right.tokens} sampled tokens, each A / {right.tokens} = "
        f"{num(ADVANTAGE / right.tokens)}; share on tool output = 0",
    )


# --------------------------------------------------- NeMo RL PR #2176: history turns trained on


def wrong_history(rows=HISTORY_TRANSCRIPT) -> list[float]:
    """NeMo RL before PR #2176: every ``role == "assistant"`` message is trained on.

    The assistant message of the earlier conversation is part of the prompt, not a sample.
    """
    return [1.0 if role == "assistant" else 0.0 for role, _turn, _sampled in _roles(rows)]


def _history() -> Outcome:
    right, wrong, pieces = _losses(HISTORY_TRANSCRIPT, wrong_history())
    return _grad_outcome(
        right,
        wrong,
        pieces,
        float(wrong.context_tokens),
        float(right.context_tokens),
        f"assistant messages: {len(HISTORY[3])} history tokens + {right.tokens} sampled = "
        f"{wrong.tokens} trained\n"
        f"the history tokens get A / {wrong.tokens} = {num(ADVANTAGE / wrong.tokens)} each: "
        f"{num(wrong.context_share)} of the gradient pushes text the policy never sampled\n"
        f"sampled only: {right.tokens} tokens, history tokens trained = 0",
    )


# ------------------------------------------------------ ms-swift PR #7838: only the last turn


def wrong_last_turn(rows=TRANSCRIPT) -> list[float]:
    """ms-swift without an explicit ``loss_mask``: only the last assistant message is a label."""
    last = max(turn for role, turn, _sampled, _tokens in rows if role == "assistant")
    return [1.0 if role == "assistant" and turn == last else 0.0 for role, turn, _ in _roles(rows)]


def _last_turn() -> Outcome:
    right, wrong, pieces = _losses(TRANSCRIPT, wrong_last_turn())
    roles = _roles(TRANSCRIPT)
    first = [i for i, (role, turn, _) in enumerate(roles) if role == "assistant" and turn == 0]
    wrong_push = 0.0 - float(wrong.grad[first].sum())
    right_push = 0.0 - float(right.grad[first].sum())
    return _grad_outcome(
        right,
        wrong,
        pieces,
        wrong_push,
        right_push,
        f"turn 1 (the tool call) has {len(first)} sampled tokens\n"
        f"last turn only: {wrong.tokens} tokens trained, turn 1's push = {num(wrong_push)}\n"
        f"every sampled turn: {right.tokens} tokens, each A / {right.tokens}: turn 1's push = "
        f"{len(first)} x {num(ADVANTAGE / right.tokens)} = {num(right_push)}",
    )


# ------------------------------------------------------------- TRL #4974: pad == EOS, EOS masked


def wrong_pad_eos(rows=TRANSCRIPT, pad: str = EOS) -> list[float]:
    """TRL's multi-turn mask with padding inferred from ``pad_token_id`` (pad == eos here).

    ``mask = completion & (ids != pad_token_id)``: the sampled EOS of every turn reads as padding.
    """
    out = []
    for _role, _turn, sampled, tokens in rows:
        out.extend(1.0 if sampled and t != pad else 0.0 for t in tokens)
    return out


def _pad_eos() -> Outcome:
    right, wrong, pieces = _losses(TRANSCRIPT, wrong_pad_eos())
    eos = [i for i, p in enumerate(pieces) if p == EOS]
    wrong_push = 0.0 - float(wrong.grad[eos].sum())
    right_push = 0.0 - float(right.grad[eos].sum())
    return _grad_outcome(
        right,
        wrong,
        pieces,
        wrong_push,
        right_push,
        f"the transcript has {len(eos)} sampled EOS tokens (one per turn)\n"
        f"pad == eos: mask = ids != pad  ->  {wrong.tokens} tokens trained, EOS push = 0: the "
        "policy is never taught to stop a turn\n"
        f"right: {right.tokens} tokens, EOS push = {len(eos)} x {num(ADVANTAGE / right.tokens)} "
        f"= {num(right_push)}",
    )


# ---------------------------------------------- TRL #4974: the loss mask used as attention mask


def wrong_attention(rows=TRANSCRIPT) -> list[int]:
    """Tokens each position may attend to when ``completion_mask`` is the attention mask.

    The prompt is attended; after it, only tokens the loss mask keeps: the tool's answer is a
    hole every later token is blind to.
    """
    flags = [turn < 0 or sampled for _role, turn, sampled in _roles(rows)]
    return [sum(flags[: i + 1]) for i in range(len(flags))]


def right_attention(rows=TRANSCRIPT) -> list[int]:
    """Causal attention over the whole transcript: position i sees tokens 0..i."""
    episode, _ = make_episode(rows)
    valid = masks.batch_episodes([episode]).valid[0]
    return [int(v) for v in torch.cumsum(valid.long(), 0).tolist()]


def _attention() -> Outcome:
    wrong, right = wrong_attention(), right_attention()
    _, pieces = make_episode(TRANSCRIPT)
    answer = pieces.index("=17")
    tool = [i for i, (role, _t, _s) in enumerate(_roles(TRANSCRIPT)) if role == "tool"]
    return Outcome(
        wrong=float(wrong[answer]),
        right=float(right[answer]),
        labels=tuple(f"{i}:{p!r}" for i, p in enumerate(pieces)),
        wrong_series=series([float(v) for v in wrong]),
        right_series=series([float(v) for v in right]),
        series_title="tokens each position attends to",
        formula=f"the answer token '=17' is at position {answer}: causally it sees "
        f"{right[answer]} tokens\nloss mask as attention mask: the tool's {len(tool)} tokens "
        f"(positions {tool[0]}-{tool[-1]}) are masked out, so it sees {wrong[answer]}\n"
        "its log-prob is computed without the tool's result: the gradient trains an answer the "
        "model could not have derived",
    )


# ---------------------------------------- verl #7244: per-turn-index baselines under a stop

#: the group: episodes per stopping turn n = 1, 2, 3 (P = 1/2, 1/4, 1/4), a format reward per
#: tool call, the same outcome whatever the stop
BIAS_COUNTS = (2, 1, 1)
BIAS_REWARD = 0.5
BIAS_OUTCOME = 1.0


def _bias_group():
    n = len(BIAS_COUNTS)
    return turn_index_demo(BIAS_COUNTS, (BIAS_REWARD,) * n, (BIAS_OUTCOME,) * n, task="bias")


def wrong_turn_index(counts=BIAS_COUNTS, reward=BIAS_REWARD, outcome=BIAS_OUTCOME) -> list[float]:
    """Per-turn-index baselines, summed (MT-GRPO style, verl RFC #7244): A_0 per episode.

    b_k = the mean turn-k reward over the episodes that reached turn k; A_0 = sum over the
    episode's own turns of (r_k - b_k) + (O - mean O). The number of baseline terms is the
    episode's own number of turns.
    """
    stops = [n for n, c in enumerate(counts, start=1) for _ in range(c)]
    rewards = [[reward] * n for n in stops]
    b = []
    for k in range(max(stops)):
        reached = [r[k] for r in rewards if len(r) > k]
        b.append(sum(reached) / len(reached))
    return [sum(r[k] - b[k] for k in range(len(r))) + outcome - outcome for r in rewards]


def _per_turn(values: list[float], stops: list[int]) -> float:
    """Mean advantage of the longest stop minus the shortest's, per extra turn."""
    by: dict[int, list[float]] = {}
    for v, n in zip(values, stops, strict=True):
        by.setdefault(n, []).append(v)
    low, high = min(by), max(by)
    return (sum(by[high]) / len(by[high]) - sum(by[low]) / len(by[low])) / (high - low)


def _turn_index() -> Outcome:
    group = _bias_group()
    stops = [e.n_turns for e in group]
    wrong = wrong_turn_index()
    # roll-viz: one baseline for the whole episode (G - mean G), the unbiased comparison
    params = CreditParams(scale_by_std=False)
    right = [a[0] for a in credit("episode_grpo", group, params).turn_advantages]
    exact = turn_index_bias(
        [c / sum(BIAS_COUNTS) for c in BIAS_COUNTS],
        (BIAS_REWARD,) * len(BIAS_COUNTS),
        (BIAS_OUTCOME,) * len(BIAS_COUNTS),
    )
    return Outcome(
        wrong=_per_turn(wrong, stops),
        right=_per_turn(right, stops),
        labels=tuple(f"ep {i + 1}: {n} turns" for i, n in enumerate(stops)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="first-turn advantage of each episode",
        formula=f"returns G = 0.5 n + 1 for n = {stops}; mean G = "
        f"{num(sum(0.5 * n + 1 for n in stops) / len(stops))}\n"
        f"per-turn-index: b_k = 0.5 for every k, so A_0 = sum_k (0.5 - 0.5) + (1 - 1) = 0 "
        f"whatever n: {num(_per_turn(wrong, stops))} per extra turn\n"
        f"G - mean G: {num(_per_turn(right, stops))} per extra turn (one more format reward)\n"
        f"exactly, over P(n) = 1/2, 1/4, 1/4: bias per extra turn = "
        + ", ".join(num(x) for x in exact.per_extra_turn)
        + " (= -E[r])",
    )


# ----------------------------------------------------------------------------- the registry

BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="tool-mask",
        short="Tool output trained",
        title="The loss path that ignores the tool mask",
        thread="huggingface/trl#5144, huggingface/trl#4975",
        question="A two-turn episode: 8 sampled tokens, and the tool's 2-token answer between "
        "the turns. TRL's Liger loss path ignored tool_mask. With the mask applied, what share "
        "of the gradient lands on the tool's text?",
        choices=(
            "0: the tool wrote it, the policy did not sample it",
            "1/5: 2 of the 10 completion tokens",
            "1/2: one turn of two",
        ),
        answer=0,
        quantity="share of |gradient| on tokens the tool wrote",
        batch=(
            ("transcript", "system, user | assistant 4 | tool 2 | assistant 4"),
            ("advantage", "A = 1 on every trained token (token-mean)"),
        ),
        wrong_label="completion_mask only (Liger path)",
        right_label="roll-viz: masks.rule_mask('correct'), token-mean",
        explanation="Training finishes and the loss looks normal, but the model is taught to "
        "write the environment's text, and every sampled token's weight drops from 1/8 to 1/10.",
        compute=_tool_mask,
    ),
    SilentBug(
        id="history-turns",
        short="History turns trained",
        title="Every assistant message trained, the history's too",
        thread="NVIDIA-NeMo/RL#2176",
        question="The prompt carries an earlier conversation with a 4-token assistant message; "
        "the policy then samples 8 tokens. NeMo RL masked by role == 'assistant'. How many of "
        "the history's tokens should be trained?",
        choices=("0: the history is prompt", "4: it is an assistant message", "12: all of them"),
        answer=0,
        quantity="trained tokens that the policy did not sample",
        batch=(
            ("transcript", "system | history (assistant) 4 | user | turn 1: 4 | tool | turn 2: 4"),
        ),
        wrong_label="mask = role == 'assistant'",
        right_label="roll-viz: sampled tokens only",
        explanation="A history turn is prompt: its log-probs are not the policy's samples, so "
        "pushing them up is supervised fine-tuning on old text, weighted by this episode's "
        "advantage.",
        compute=_history,
    ),
    SilentBug(
        id="last-turn",
        short="Only the last turn",
        title="Only the last assistant turn in the loss",
        thread="modelscope/ms-swift#7838",
        question="Two assistant turns: the tool call, then the answer. Without an explicit "
        "loss_mask, ms-swift trained the last one only. How much push should the tool call "
        "(turn 1) get?",
        choices=("None", "Half of the answer's", "The same per token as the answer"),
        answer=2,
        quantity="total push on turn 1's tokens",
        batch=(("transcript", "assistant 4 (tool call) | tool 2 | assistant 4 (answer)"),),
        wrong_label="labels on the last assistant message",
        right_label="roll-viz: every sampled turn",
        explanation="The reward depended on the tool call, but only the final answer is "
        "trained: the policy never learns which call led to it.",
        compute=_last_turn,
    ),
    SilentBug(
        id="pad-eos",
        short="pad == EOS",
        title="pad == EOS: the end of every turn masked",
        thread="huggingface/trl#4974",
        question="The tokenizer's pad token is its EOS. The mask drops tokens equal to "
        "pad_token_id. How much push should the two sampled EOS tokens get?",
        choices=("None", "Half as much as the other tokens", "As much as every other token"),
        answer=2,
        quantity="total push on the sampled EOS tokens",
        batch=(("transcript", "assistant 4 ending in EOS | tool 2 | assistant 4 ending in EOS"),),
        wrong_label="mask = completion & (ids != pad_token_id)",
        right_label="roll-viz: the sampled EOS is a sampled token",
        explanation="Stopping is an action: with its EOS masked the policy is never rewarded "
        "for ending a turn, and turns grow until max_tokens.",
        compute=_pad_eos,
    ),
    SilentBug(
        id="mask-attention",
        short="Mask as attention",
        title="The loss mask used as the attention mask",
        thread="huggingface/trl#4974",
        question="The completion mask (0 on the tool's answer) was also passed as the "
        "attention mask. How many tokens should the final answer '=17' attend to (itself "
        "included)?",
        choices=(
            "16: every token up to itself",
            "8: the sampled tokens only",
            "14: all but the tool's 2 tokens",
        ),
        answer=0,
        quantity="tokens the answer token attends to",
        batch=(("transcript", "prompt 7 | assistant 4 | tool 2 | assistant 4"),),
        wrong_label="attention_mask = completion_mask",
        right_label="roll-viz: causal attention over the transcript",
        explanation="The loss mask says where the gradient goes; the attention mask says what "
        "each token may read. With holes in it, the answer is scored without the tool's result.",
        compute=_attention,
    ),
    SilentBug(
        id="turn-index-bias",
        short="Per-turn-index baseline",
        title="Per-turn-index baselines when the policy decides when to stop",
        thread="verl-project/verl#7244",
        question="Every tool call earns a format reward of 0.5 and every episode ends right "
        "(outcome 1); episodes stop after 1, 2 or 3 turns. Against one baseline for the whole "
        "episode (G - mean G), what does one more turn add to an episode's advantage?",
        choices=(
            "0: the outcome is the same",
            "+0.5: one more format reward",
            "+1: one more outcome",
        ),
        answer=1,
        quantity="change of the first-turn advantage per extra turn",
        batch=(
            ("episodes", "4 of one task: 2 stop after 1 turn, 1 after 2, 1 after 3"),
            ("rewards", "0.5 per turn (format), outcome 1 for all"),
        ),
        wrong_label="sum of per-turn-index baselines (MT-GRPO style)",
        right_label="roll-viz: credit('episode_grpo', scale_by_std=False)",
        explanation="Each turn index gets its own baseline, so an episode's baseline has as many "
        "terms as it took turns: an action of the policy. The extra turn's reward is cancelled "
        "by its own baseline, a hidden -E[r] per extra turn that no reward designer chose.",
        compute=_turn_index,
    ),
)
