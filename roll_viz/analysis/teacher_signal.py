"""Teacher as reference on one batch: the OPD signal per token and per answer, beside the reward's.

``teacher_signal`` takes a batch's student log-probs, a teacher's log-probs of the same tokens
(``lm.teacher``, or the committed recording of a preset) and the advantages the reward gives
(the sidebar's dialect), and returns ROLL's OPD advantages (``core.pipeline.opd``: pure, the
teacher's KL only, or mixed, the reward's advantages minus it) with tables a page draws: one row
per answer (reward, mean reward advantage, mean OPD advantage, summed reverse KL, the token the
teacher disliked most) and one row per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.pipeline.opd import OPDResult, opd_advantages

F64 = torch.float64


@dataclass(frozen=True)
class TeacherSignal:
    """The teacher's signal on one batch.

    Attributes:
        opd: ROLL's OPD result (per-token weighted KL and advantages).
        reward_advantages: (B, T) the reward's advantages it is compared with.
        answers: one row per answer: sample, prompt, reward, "A reward" and "A teacher" (token
            means), "reverse KL" (sum over the answer), "worst token" (largest KL) and its KL.
        tokens: one row per valid token: sample, position, token, student and teacher
            log-prob, the KL estimate, the exact KL (when known), "A reward", "A teacher".
    """

    opd: OPDResult
    reward_advantages: Tensor
    answers: pd.DataFrame
    tokens: pd.DataFrame


def teacher_signal(
    student_logprobs: Tensor,
    teacher_logprobs: Tensor,
    response_mask: Tensor,
    reward_advantages: Tensor,
    scores: Tensor,
    group_ids: Tensor,
    *,
    tokens: Sequence[Sequence[str]] | None = None,
    prompts: Sequence[str] | None = None,
    exact_kl: Tensor | None = None,
    kl_penalty: str = "kl",
    coef: float = 1.0,
    mixed: bool = False,
) -> TeacherSignal:
    """OPD advantages from the teacher next to the reward's, with the tables to show them.

    Args:
        student_logprobs: (B, T) the student's log-probs of its sampled tokens.
        teacher_logprobs: (B, T) the teacher's log-probs of the same tokens.
        response_mask: (B, T) 1.0 on response tokens.
        reward_advantages: (B, T) the reward's advantages (the plain RL signal).
        scores: (B,) the answers' rewards.
        group_ids: (B,) prompt index per answer.
        tokens: (B,) display strings of each answer's valid tokens.
        prompts: (P,) prompt texts.
        exact_kl: (B, T) exact KL(student || teacher) per position, if scored.
        kl_penalty: ROLL's estimator name ("kl", "abs", "mse", "k3").
        coef: ROLL ``opd_kl_coef``.
        mixed: ROLL ``use_opd`` (reward advantages minus the KL) instead of ``is_pure_opd``.

    Returns:
        TeacherSignal.
    """
    mask = response_mask.to(F64)
    reward_adv = reward_advantages.to(F64) * mask
    opd = opd_advantages(
        student_logprobs,
        {"teacher": (teacher_logprobs, coef)},
        mask,
        kl_penalty=kl_penalty,
        rl_advantages=reward_adv if mixed else None,
    )
    counts = mask.sum(-1).clamp_min(1.0)
    gids = group_ids.tolist()
    n_groups = max(gids) + 1 if gids else 0
    names = list(prompts) if prompts is not None else [f"prompt {g}" for g in range(n_groups)]
    answer_rows, token_rows = [], []
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        toks = list(tokens[b]) if tokens is not None else [str(t) for t in range(n)]
        kl_b = opd.kl[b, :n]
        worst = int(kl_b.argmax()) if n else -1
        answer_rows.append(
            {
                "sample": b,
                "prompt": names[gids[b]],
                "reward": float(scores[b]),
                "A reward": float(reward_adv[b].sum() / counts[b]),
                "A teacher": float(opd.advantages[b].sum() / counts[b]),
                "reverse KL": float(kl_b.sum()),
                "worst token": toks[worst] if 0 <= worst < len(toks) else "",
                "its KL": float(kl_b[worst]) if n else 0.0,
            }
        )
        for t in range(n):
            token_rows.append(
                {
                    "sample": b,
                    "position": t,
                    "token": toks[t] if t < len(toks) else "",
                    "log p student": float(student_logprobs[b, t]),
                    "log p teacher": float(teacher_logprobs[b, t]),
                    f"KL ({kl_penalty})": float(opd.kl[b, t]),
                    "exact KL": float(exact_kl[b, t]) if exact_kl is not None else float("nan"),
                    "A reward": float(reward_adv[b, t]),
                    "A teacher": float(opd.advantages[b, t]),
                }
            )
    return TeacherSignal(opd, reward_adv, pd.DataFrame(answer_rows), pd.DataFrame(token_rows))
