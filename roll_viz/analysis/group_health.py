"""Group health: how many prompt groups can teach anything, and what each zero-variance policy does.

A group method learns from the differences inside a prompt's group. A group whose answers all
got the same reward (all right, all wrong) has advantage 0 under GRPO: no policy gradient, yet
its tokens may still sit in the loss's denominator and its KL term may still pull (TRL#7068).
``group_health`` counts the all-good / all-bad / mixed groups (and, where the reward has
components, each reward function's std next to the combined std, ms-swift#4570);
``zero_variance_policies`` runs the policies the frameworks ship on the same batch and reports the
loss, its denominator and the gradient that still flows:

- keep (A = 0): TRL GRPOTrainer, ROLL/verl/OpenRLHF without filtering;
- drop before batching, exact equality: verl ``filter_groups`` (``np.std(metric) == 0``),
  OpenRLHF ``dynamic_filtering`` (keep 0 < mean < 1), DAPO's dynamic sampling;
- drop before batching, std <= eps: ROLL ``query_filter`` ``std_filter`` (``torch.std <=
  std_threshold``); TRL logs ``frac_reward_zero_std`` with ``isclose(std, 0)``;
- mask in the loss with the denominator unchanged: the per-token loss of those rows times 0,
  divided by every token as before;
- mask in the loss with the denominator recomputed: ROLL ``difficulty_mask`` into
  ``final_response_mask`` (its token count is the divisor), which for a token-mean loss equals
  dropping the rows.

The loss is TRL's (``dapo``: sum over the global token count, ``beta * k3`` added per token),
on policy (the first update: pi = pi_old).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.ops import group_stats
from roll_viz.core.pipeline import policy_loss, run
from roll_viz.core.records import Batch

STATUSES: tuple[str, ...] = ("all-good", "all-bad", "flat", "mixed", "single")


@dataclass(frozen=True)
class GroupHealth:
    """How many groups can give a learning signal.

    Attributes:
        counts: status -> number of groups ("all-good", "all-bad", "flat": all equal but neither
            the batch's best nor worst reward, "mixed", "single": a group of one).
        near_flat: mixed groups whose std is <= eps (not exactly equal: shaped rewards); a
            "std <= eps" filter treats them as zero-variance, an exact-equality filter does not.
        groups: one row per prompt: prompt, n, mean, std, status, and "std <name>" per reward
            component.
        components: names of the reward components (empty when the reward has none).
        eps: the threshold used for ``near_flat``.
    """

    counts: dict[str, int]
    near_flat: int
    groups: pd.DataFrame
    components: tuple[str, ...]
    eps: float

    @property
    def n_groups(self) -> int:
        """All groups, singletons included."""
        return int(sum(self.counts.values()))

    @property
    def no_signal(self) -> int:
        """Groups whose GRPO advantages are all 0 (every answer scored the same)."""
        return self.counts["all-good"] + self.counts["all-bad"] + self.counts["flat"]


def group_health(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
    components: Mapping[str, Tensor] | None = None,
    eps: float = 1e-4,
    solved_at: float | None = None,
) -> GroupHealth:
    """Classify each prompt group by the spread of its rewards.

    Args:
        scores: (B,) combined response rewards.
        group_ids: (B,) long prompt index 0..P-1.
        prompts: (P,) display names (default "prompt 0", ...).
        components: reward function name -> (B,) its scores, or None.
        eps: std threshold of a "std <= eps" filter (default TRL's 1e-4).
        solved_at: an answer counts as right when its reward >= this; None = a flat group is
            all-good when its reward is the batch's best, all-bad when it is the worst.

    Returns:
        GroupHealth.
    """
    scores = scores.to(torch.float64)
    group_ids = group_ids.to(torch.long)
    n_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    names = list(prompts) if prompts is not None else [f"prompt {p}" for p in range(n_groups)]
    comps = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in (components or {}).items()}
    best, worst = (float(scores.max()), float(scores.min())) if scores.numel() else (0.0, 0.0)
    counts = dict.fromkeys(STATUSES, 0)
    near_flat = 0
    rows = []
    for g in range(n_groups):
        idx = torch.nonzero(group_ids == g).flatten()
        if idx.numel() == 0:
            continue
        xs = scores[idx]
        n = int(idx.numel())
        std = float(xs.std()) if n > 1 else float("nan")
        flat = n > 1 and float(xs.max()) == float(xs.min())
        if n == 1:
            status = "single"
        elif solved_at is not None:
            right = xs >= solved_at
            status = (
                "all-good"
                if bool(right.all())
                else "all-bad"
                if not bool(right.any())
                else ("mixed")
            )
            if status == "mixed" and flat:
                status = "flat"
        elif flat:
            value = float(xs[0])
            status = "all-good" if value == best else "all-bad" if value == worst else "flat"
        else:
            status = "mixed"
        if status == "mixed" and std <= eps:
            near_flat += 1
        counts[status] += 1
        row = {"prompt": names[g], "n": n, "mean": float(xs.mean()), "std": std, "status": status}
        for name, values in comps.items():
            row[f"std {name}"] = float(values[idx].std()) if n > 1 else float("nan")
        rows.append(row)
    return GroupHealth(
        counts=counts,
        near_flat=near_flat,
        groups=pd.DataFrame(rows),
        components=tuple(comps),
        eps=eps,
    )


# ---------------------------------------------------------------------- zero-variance policies

POLICIES: tuple[tuple[str, str], ...] = (
    ("keep (A = 0)", "TRL GRPOTrainer; ROLL, verl, OpenRLHF without a filter"),
    ("drop, exact equality", "verl filter_groups, OpenRLHF dynamic_filtering, DAPO"),
    ("drop, std <= eps", "ROLL query_filter std_filter"),
    ("mask, same denominator", "per-token loss x 0, divided by every token as before"),
    ("mask, new denominator", "ROLL difficulty_mask (final_response_mask)"),
)


@dataclass(frozen=True)
class PolicyOutcome:
    """What the zero-variance policies do to one batch's loss.

    Attributes:
        table: one row per policy: policy, where it ships, zero-variance groups it sees, rows and
            tokens in the loss (the denominator), loss, |policy gradient| and |KL gradient| (sums
            of |d loss / d logp| over tokens) on the zero-variance groups (std <= eps) and on the
            others, and the scale
            of the other groups' policy gradient relative to "keep".
        grads: policy -> (B, T) d loss / d logp_t (0 on dropped / masked tokens).
        flat_rows: (B,) bool: the rows of exactly-flat groups.
        near_rows: (B,) bool: the rows of groups with std <= eps.
    """

    table: pd.DataFrame
    grads: dict[str, Tensor]
    flat_rows: Tensor
    near_rows: Tensor


def _loss(batch: Batch, adv: Tensor, rows: Tensor, beta: float, cfg: dict):
    """TRL's loss on the given rows (on policy), its gradient with and without the KL term."""
    kw = {
        "logprobs": batch.logprobs[rows],
        "old_logprobs": batch.logprobs[rows],
        "advantages": adv[rows],
        "response_mask": batch.response_mask[rows],
        "ref_logprobs": batch.ref_logprobs[rows],
    }
    with_kl = policy_loss("trl", {**cfg, "beta": beta}, **kw)
    without = policy_loss("trl", {**cfg, "beta": 0.0}, **kw)
    return with_kl, without


def _summary_row(
    name: str,
    rows_in: Tensor,
    grad: Tensor,
    grad0: Tensor,
    base0: Tensor,
    near: Tensor,
    total: float,
    tokens: float,
    seen: int,
) -> dict[str, Any]:
    """One policy's row: its loss, denominator and gradient sizes in and outside flat groups.

    ``grad`` / ``grad0``: per-token gradient coefficients with and without the KL term;
    ``base0``: the keep policy's without KL (the other groups' reference scale).
    """
    g_kl = grad - grad0
    others = ~near
    policy_others = float(grad0[others].abs().sum())
    base_others = float(base0[others].abs().sum())
    return {
        "policy": name,
        "where": dict(POLICIES)[name],
        "zero-variance groups seen": seen,
        "rows in the loss": int(rows_in.sum()),
        "tokens in the denominator": tokens,
        "loss": total,
        "|policy grad|, zero-variance groups": float(grad0[near].abs().sum()),
        "|KL grad|, zero-variance groups": float(g_kl[near].abs().sum()),
        "|policy grad|, other groups": policy_others,
        "|KL grad|, other groups": float(g_kl[others].abs().sum()),
        "other groups' gradient scale": policy_others / base_others if base_others else 1.0,
    }


def zero_variance_policies(
    batch: Batch, beta: float = 0.04, eps: float = 1e-4, config: Mapping | None = None
) -> PolicyOutcome:
    """The zero-variance policies side by side on one batch (TRL's GRPO loss, on policy).

    Args:
        batch: scores, response_mask, group_ids, logprobs and ref_logprobs (the policy's and
            the reference's log-probs of the sampled tokens).
        beta: KL coefficient (k3 added per token).
        eps: std threshold of the "std <= eps" policy.
        config: further TRL keys (e.g. loss_type); its advantages use scale_rewards=group.

    Returns:
        PolicyOutcome.

    Raises:
        ValueError: the batch has no log-probs.
    """
    if batch.logprobs is None or batch.ref_logprobs is None:
        raise ValueError("logprobs: zero_variance_policies needs logprobs and ref_logprobs")
    cfg = dict(config or {})
    mask = batch.response_mask.to(torch.float64)
    adv = run(batch, "trl", {}).advantages
    stats = group_stats(batch.scores.to(torch.float64), batch.group_ids, ddof=1)
    flat = (stats.count > 1) & (stats.std == 0)
    near = (stats.count > 1) & (stats.std <= eps)
    every = torch.ones_like(flat)
    keep, keep0 = _loss(batch, adv, every, beta, cfg)
    n_tokens = float(mask.sum())

    def summarise(name, rows_in, grad, grad0, total, tokens, seen):
        base = keep0.per_token["grad_coef"]
        return _summary_row(name, rows_in, grad, grad0, base, near, total, tokens, seen)

    n_flat = int(torch.unique(batch.group_ids[flat]).numel())
    n_near = int(torch.unique(batch.group_ids[near]).numel())
    rows, grads = [], {}
    g_keep = keep.per_token["grad_coef"]
    grads["keep (A = 0)"] = g_keep
    rows.append(
        summarise(
            "keep (A = 0)",
            every,
            g_keep,
            keep0.per_token["grad_coef"],
            keep.total.item(),
            n_tokens,
            0,
        )
    )
    for name, dropped, seen in (
        ("drop, exact equality", flat, n_flat),
        ("drop, std <= eps", near, n_near),
    ):
        kept = ~dropped
        grad = torch.zeros_like(mask)
        grad0 = torch.zeros_like(mask)
        total = 0.0
        if bool(kept.any()):
            res, res0 = _loss(batch, adv, kept, beta, cfg)
            grad[kept] = res.per_token["grad_coef"]
            grad0[kept] = res0.per_token["grad_coef"]
            total = res.total.item()
        grads[name] = grad
        rows.append(summarise(name, kept, grad, grad0, total, float(mask[kept].sum()), seen))
    on = (~near).to(torch.float64)[:, None]
    w = keep.per_token["loss_weight"]
    kl_tok = keep.per_token.get("kl", torch.zeros_like(mask))
    total_same = float((w * on * (keep.per_token["pg_loss"] + beta * kl_tok)).sum())
    grads["mask, same denominator"] = g_keep * on
    rows.append(
        summarise(
            "mask, same denominator",
            ~near,
            g_keep * on,
            keep0.per_token["grad_coef"] * on,
            total_same,
            n_tokens,
            n_near,
        )
    )
    name = "mask, new denominator"
    new = rows[2] | {"policy": name, "where": dict(POLICIES)[name]}
    grads["mask, new denominator"] = grads["drop, std <= eps"]
    rows.append(new)
    return PolicyOutcome(table=pd.DataFrame(rows), grads=grads, flat_rows=flat, near_rows=near)


def demo_batch(seed: int = 0) -> Batch:
    """A small batch with an all-good, an all-bad, a near-flat (shaped) and a mixed group.

    The shaped group failed everywhere and carries only a length term of a millionth per token
    (std 5.8e-7: zero for a "std <= eps" filter, not for an exact one); log-probs are drawn
    around -1.5 with a reference 0.2 nats away, so the KL term has a gradient everywhere.
    """
    gen = torch.Generator().manual_seed(seed)
    scores = torch.tensor(
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, -4e-6, -4e-6, -3e-6, 1.0, 0.0, 1.0], dtype=torch.float64
    )
    lengths = torch.tensor([3, 4, 2, 4, 3, 4, 4, 4, 3, 2, 4, 3])
    T = int(lengths.max())
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    lp = -1.5 + 0.5 * torch.randn((12, T), generator=gen, dtype=torch.float64)
    ref = lp + 0.2 * torch.randn((12, T), generator=gen, dtype=torch.float64)
    return Batch(
        scores=scores,
        response_mask=mask,
        group_ids=torch.arange(4).repeat_interleave(3),
        group_labels=("all right", "all wrong", "all wrong, shaped", "mixed"),
        logprobs=lp,
        ref_logprobs=ref,
    )
