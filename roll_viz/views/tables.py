"""Tables the pages show and download: samples, rewards, group statistics, tokens, KL summary."""

from __future__ import annotations

import math

import pandas as pd
from torch import Tensor

from roll_viz.core.records import Rollout, Trace, trace_to_dict
from roll_viz.core.records import subsample_rollout as subsample_rollout  # the pages call it here
from roll_viz.views.text import sample_labels


def trace_to_plain(trace: Trace) -> dict:
    """A JSON-able dict of a Trace (tensors as nested lists): ``records.trace_to_dict``.

    Args:
        trace: any Trace.

    Returns:
        Field name -> plain Python value.
    """
    return trace_to_dict(trace)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def samples_table(rollout: Rollout, scores: Tensor | None = None) -> pd.DataFrame:
    """One row per sample: prompt, sample, response, finish reason, length, (raw) reward.

    Args:
        rollout: the batch.
        scores: (B,) raw rewards, or None to leave the column out.

    Returns:
        DataFrame with columns sample, prompt_id, prompt, response, finish_reason, tokens,
        mean_logprob, mean_ref_logprob[, reward].
    """
    mask = rollout.response_mask
    lengths = mask.sum(-1)
    denom = lengths.clamp(min=1)
    rows = {
        "sample": sample_labels(rollout),
        "prompt_id": rollout.group_ids.tolist(),
        "prompt": [rollout.prompts[g] for g in rollout.group_ids.tolist()],
        "response": list(rollout.responses),
        "finish_reason": list(rollout.finish_reasons),
        "tokens": lengths.long().tolist(),
        "mean_logprob": ((rollout.logprobs * mask).sum(-1) / denom).tolist(),
        "mean_ref_logprob": ((rollout.ref_logprobs * mask).sum(-1) / denom).tolist(),
    }
    if scores is not None:
        rows["reward"] = scores.tolist()
    return pd.DataFrame(rows)


def rewards_table(rollout: Rollout, trace: Trace) -> pd.DataFrame:
    """One row per sample: raw score, baseline, scale, processed reward.

    Args:
        rollout: the batch (for labels).
        trace: the pipeline's trace of that batch.

    Returns:
        DataFrame with columns sample, prompt_id, raw_reward, baseline, scale, processed_reward,
        change.
    """
    return pd.DataFrame(
        {
            "sample": sample_labels(rollout),
            "prompt_id": rollout.group_ids.tolist(),
            "raw_reward": trace.scores.tolist(),
            "baseline": trace.baseline.tolist(),
            "scale": trace.scale.tolist(),
            "processed_reward": trace.rewards.tolist(),
            "change": (trace.rewards - trace.scores).tolist(),
        }
    )


def group_table(rollout: Rollout, scores: Tensor) -> pd.DataFrame:
    """One row per prompt: n, mean, unbiased std (NaN for n = 1), population std, min, max.

    Args:
        rollout: the batch.
        scores: (B,) raw rewards.

    Returns:
        DataFrame with columns prompt_id, prompt, n, mean, std_unbiased, std_population, min, max.
    """
    rows = []
    gids = rollout.group_ids
    values = scores.double()
    for p, prompt in enumerate(rollout.prompts):
        x = values[gids == p]
        n = int(x.numel())
        rows.append(
            {
                "prompt_id": p,
                "prompt": prompt,
                "n": n,
                "mean": float(x.mean()) if n else math.nan,
                "std_unbiased": float(x.std(correction=1)) if n > 1 else math.nan,
                "std_population": float(x.std(correction=0)) if n else math.nan,
                "min": float(x.min()) if n else math.nan,
                "max": float(x.max()) if n else math.nan,
            }
        )
    return pd.DataFrame(rows)


def token_table(
    rollout: Rollout,
    trace: Trace | None = None,
    values: Tensor | None = None,
    compare: dict[str, Trace] | None = None,
) -> pd.DataFrame:
    """One row per valid response token of every sample (long format, for CSV).

    Args:
        rollout: the batch.
        trace: its trace (adds kl, token_reward, return, advantage), or None.
        values: (B, T) critic values used by GAE, or None.
        compare: more traces (label -> Trace) whose advantages become columns ``A_<label>``.

    Returns:
        DataFrame with columns sample, b, t, token, token_id, logprob, ref_logprob, exact_kl,
        entropy[, kl, token_reward, return, advantage][, value][, A_<label>...].
    """
    labels = sample_labels(rollout)
    mask = rollout.response_mask.bool()
    b_idx, t_idx = mask.nonzero(as_tuple=True)  # valid (b, t) pairs, row-major like a loop

    keep = mask.numpy()

    def at(x: Tensor) -> list[float]:
        # numpy boolean indexing: row-major like nonzero(), and no torch thread pool per call.
        return x.detach().double().numpy()[keep].tolist()

    b_list, t_list = b_idx.tolist(), t_idx.tolist()
    rows: dict[str, list] = {
        "sample": [labels[b] for b in b_list],
        "b": b_list,
        "t": t_list,
        "token": [
            rollout.tokens[b][t] if t < len(rollout.tokens[b]) else ""
            for b, t in zip(b_list, t_list, strict=True)
        ],
        "token_id": rollout.token_ids[b_idx, t_idx].tolist(),
        "logprob": at(rollout.logprobs),
        "ref_logprob": at(rollout.ref_logprobs),
        "exact_kl": at(rollout.exact_kl),
        "entropy": at(rollout.entropy),
    }
    if trace is not None:
        rows["kl"] = at(trace.kl)
        rows["token_reward"] = at(trace.token_rewards)
        rows["return"] = at(trace.returns)
        rows["advantage"] = at(trace.advantages)
    if values is not None:
        rows["value"] = at(values)
    for label, other in (compare or {}).items():
        rows[f"A_{label}"] = at(other.advantages)
    return pd.DataFrame(rows)


def kl_summary_table(rollout: Rollout, estimates: dict[str, Tensor]) -> pd.DataFrame:
    """Per sample: token-mean of each KL estimator next to the exact full-vocabulary KL.

    Args:
        rollout: the batch.
        estimates: estimator name -> (B, T) per-token estimate.

    Returns:
        DataFrame with columns sample, tokens, exact_kl, then one column per estimator.
    """
    mask = rollout.response_mask
    denom = mask.sum(-1).clamp(min=1)
    rows = {
        "sample": sample_labels(rollout),
        "tokens": mask.sum(-1).long().tolist(),
        "exact_kl": ((rollout.exact_kl * mask).sum(-1) / denom).tolist(),
    }
    for name, est in estimates.items():
        rows[name] = ((est * mask).sum(-1) / denom).tolist()
    return pd.DataFrame(rows)
