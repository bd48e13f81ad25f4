"""Pure helpers behind the stage pages: tables for display/CSV and formulas with numbers.

Nothing here imports Streamlit or plotly. The tables are pandas DataFrames built from the records
(``Rollout``, ``Trace``), one row per sample or per token; the formulas are LaTeX strings with the
selected token's actual numbers substituted, e.g. for ROLL's GRPO on the seed example
``A = (8.2 - 7.933) / (1.320 + 1e-6) = 0.202``.

What roll-viz simplifies here: the formulas read every number from the Trace (and the Batch's
critic values), so they show what the dialect computed; where a dialect whitens advantages at the
end, the whitening's mean and scale are recovered from the trace by an exact affine fit over the
valid tokens rather than recomputed with the dialect's ddof/eps conventions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.records import Rollout, Trace

#: eps each framework adds to the group/batch std (used when the config's viz_eps is None).
STD_EPS = {"roll": 1e-6, "verl": 1e-6, "openrlhf": 1e-9, "trl": 1e-4}

#: Estimators whose advantage is built from the discounted reward-to-go of the token rewards.
RETURN_ESTIMATORS = {
    "roll": ("reinforce", "grpo"),
    "verl": ("reinforce_plus_plus", "remax"),
    "openrlhf": ("reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo"),
    "trl": (),
}

#: Display of whitespace inside tokens.
WHITESPACE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}


# ---------------------------------------------------------------------------------------------
# Small utilities
# ---------------------------------------------------------------------------------------------
def visible_whitespace(token: str) -> str:
    """A token with spaces, newlines and tabs shown as visible marks (middle dot, return arrow).

    Args:
        token: the raw display string of one token.

    Returns:
        The same text with whitespace replaced; an empty token becomes the empty-set sign.
    """
    if token == "":
        return "\u2205"
    return "".join(WHITESPACE.get(ch, ch) for ch in token)


def sample_labels(rollout: Rollout) -> list[str]:
    """One label per row b: "p<prompt>/s<sample within group>" (e.g. "p0/s2").

    Args:
        rollout: the batch.

    Returns:
        (B,) labels, in row order.
    """
    out: list[str] = []
    seen: dict[int, int] = {}
    for gid in rollout.group_ids.tolist():
        g = seen.get(gid, 0)
        seen[gid] = g + 1
        out.append(f"p{gid}/s{g}")
    return out


def subsample_rollout(rollout: Rollout, group_size: int) -> Rollout:
    """Keep the first ``group_size`` samples of every prompt (emulates a smaller G).

    Args:
        rollout: the full batch; rows of one prompt are contiguous.
        group_size: samples to keep per prompt, 1 <= group_size <= rollout.group_size.

    Returns:
        A new Rollout with P * group_size rows (trailing all-padding columns kept).
    """
    full = rollout.group_size
    if not 1 <= group_size <= full:
        raise ValueError(f"group_size must be in [1, {full}], got {group_size}")
    if group_size == full:
        return rollout
    keep: list[int] = []
    seen: dict[int, int] = {}
    for b, gid in enumerate(rollout.group_ids.tolist()):
        if seen.get(gid, 0) < group_size:
            keep.append(b)
        seen[gid] = seen.get(gid, 0) + 1
    idx = torch.tensor(keep, dtype=torch.long)

    def take(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.index_select(0, idx)

    return replace(
        rollout,
        group_ids=take(rollout.group_ids),
        responses=tuple(rollout.responses[b] for b in keep),
        token_ids=take(rollout.token_ids),
        tokens=tuple(rollout.tokens[b] for b in keep),
        response_mask=take(rollout.response_mask),
        logprobs=take(rollout.logprobs),
        ref_logprobs=take(rollout.ref_logprobs),
        exact_kl=take(rollout.exact_kl),
        entropy=take(rollout.entropy),
        topk_ids=take(rollout.topk_ids),
        topk_logprobs=take(rollout.topk_logprobs),
        topk_ref_logprobs=take(rollout.topk_ref_logprobs),
        finish_reasons=tuple(rollout.finish_reasons[b] for b in keep),
        features=take(rollout.features),
    )


def trace_to_plain(trace: Trace) -> dict:
    """A JSON-able dict of a Trace (tensors as nested lists). Fallback for calculator.trace_to_dict.

    Args:
        trace: any Trace.

    Returns:
        Field name -> plain Python value.
    """
    out: dict = {}
    for name in trace.__dataclass_fields__:
        value = getattr(trace, name)
        if isinstance(value, Tensor):
            out[name] = value.tolist()
        elif name == "running" and value is not None:
            out[name] = {"mean": value.mean, "var": value.var, "count": value.count}
        elif name == "config":
            out[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in value}
        else:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def fmt(x: float, digits: int = 3) -> str:
    """A number for formulas: fixed decimals, scientific below 1e-3, "NaN"/"inf" spelled out."""
    x = float(x)
    if math.isnan(x):
        return r"\mathrm{NaN}"
    if math.isinf(x):
        return r"\infty" if x > 0 else r"-\infty"
    if x != 0 and abs(x) < 10 ** (-digits):
        mantissa, exponent = f"{x:.0e}".split("e")
        return (
            f"{mantissa}\\cdot 10^{{{int(exponent)}}}"
            if mantissa not in {"1", "-1"}
            else (f"{'-' if mantissa == '-1' else ''}10^{{{int(exponent)}}}")
        )
    text = f"{x:.{digits}f}"
    return "0" if text in {f"{0:.{digits}f}", f"-{0:.{digits}f}"} else text


def term(x: float, digits: int = 3) -> str:
    """``fmt`` with parentheses around negative numbers (for use after an operator)."""
    text = fmt(x, digits)
    return f"({text})" if text.startswith("-") else text


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


# ---------------------------------------------------------------------------------------------
# Formulas with numbers
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Formula:
    """One step of a derivation, ready for st.latex.

    Attributes:
        title: plain-language name of the step.
        symbolic: the formula with symbols.
        numeric: the same formula with the numbers substituted and its result.
        value: the result (for tests).
    """

    title: str
    symbolic: str
    numeric: str
    value: float


def std_eps(trace: Trace) -> float:
    """The eps the trace's dialect added to the std (viz_eps when set, else the framework's)."""
    config = dict(trace.config)
    eps = config.get("viz_eps")
    return float(eps) if eps is not None else STD_EPS.get(trace.framework, 1e-6)


def normalized_reward_formula(
    score: float, baseline: float, scale: float, eps: float, result: float | None = None
) -> Formula:
    """``(s - mean) / (std + eps)`` with numbers (GRPO's group z-score, any mean/std source).

    Args:
        score: the raw reward s.
        baseline: the mean subtracted.
        scale: std + eps (as in Trace.scale); 1.0 means no division.
        eps: the eps inside ``scale``.
        result: the value to show (default: computed from the inputs).

    Returns:
        The Formula; ``value`` is the normalized reward.
    """
    if result is None:
        result = (score - baseline) / scale
    if scale == 1.0:
        return Formula(
            "baseline subtracted",
            r"\tilde r = s - b",
            rf"\tilde r = {fmt(score)} - {term(baseline)} = {fmt(result)}",
            float(result),
        )
    std = scale - eps
    return Formula(
        "normalized reward",
        r"\tilde r = \dfrac{s - \mu}{\sigma + \varepsilon}",
        rf"\tilde r = \dfrac{{{fmt(score)} - {term(baseline)}}}{{{fmt(std)} + {fmt(eps)}}}"
        rf" = {fmt(result)}",
        float(result),
    )


def return_formula(reward: float, gamma: float, next_return: float, result: float) -> Formula:
    """``R_t = r_t + gamma * R_{t+1}`` with numbers."""
    return Formula(
        "return (reward-to-go)",
        r"R_t = r_t + \gamma\, R_{t+1}",
        rf"R_t = {fmt(reward)} + {fmt(gamma, 2)} \cdot {term(next_return)} = {fmt(result)}",
        float(result),
    )


def gae_formulas(
    reward: float,
    value: float,
    next_value: float,
    next_advantage: float,
    gamma: float,
    lam: float,
) -> tuple[Formula, Formula]:
    """GAE at one token: the TD error and the backward recursion, with numbers.

    Args:
        reward: r_t.
        value: V_t.
        next_value: V_{t+1} (0 after the last token).
        next_advantage: A_{t+1} before any whitening (0 after the last token).
        gamma: discount.
        lam: GAE lambda.

    Returns:
        (delta formula, advantage formula).
    """
    delta = reward + gamma * next_value - value
    adv = delta + gamma * lam * next_advantage
    return (
        Formula(
            "TD error",
            r"\delta_t = r_t + \gamma V_{t+1} - V_t",
            rf"\delta_t = {fmt(reward)} + {fmt(gamma, 2)} \cdot {term(next_value)}"
            rf" - {term(value)} = {fmt(delta)}",
            float(delta),
        ),
        Formula(
            "GAE recursion",
            r"A_t = \delta_t + \gamma\lambda\, A_{t+1}",
            rf"A_t = {fmt(delta)} + {fmt(gamma, 2)} \cdot {fmt(lam, 2)}"
            rf" \cdot {term(next_advantage)} = {fmt(adv)}",
            float(adv),
        ),
    )


def whitening_fit(raw: Tensor, final: Tensor, mask: Tensor) -> tuple[float, float] | None:
    """Recover ``final = (raw - mean) * k`` over valid tokens (exact for affine whitening).

    Args:
        raw: (B, T) values before whitening.
        final: (B, T) values after whitening.
        mask: (B, T) 1.0 on valid tokens.

    Returns:
        (mean, k), or None when there are fewer than 2 distinct raw values or the map is not affine.
    """
    m = mask.bool()
    x = raw[m].double()
    y = final[m].double()
    if x.numel() < 2 or float(x.std()) == 0.0:
        return None
    xc = x - x.mean()
    k = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    if k == 0.0:
        return None
    mean = float(x.mean() - y.mean() / k)
    if not torch.allclose((x - mean) * k, y, atol=1e-6, rtol=1e-5):
        return None
    return mean, k


def _estimator(trace: Trace) -> str:
    config = dict(trace.config)
    for key in ("adv_estimator", "advantage_estimator"):
        if key in config:
            return str(config[key])
    if trace.framework == "trl":
        return "grpo"
    return "?"


def _gamma(trace: Trace) -> float:
    return float(dict(trace.config).get("gamma", 1.0))


def _lam(trace: Trace) -> float:
    config = dict(trace.config)
    return float(config.get("lambd", config.get("lam", 1.0)))


def _gae_next(
    trace: Trace,
    values: Tensor,
    raw: Tensor,
    mask: Tensor,
    b: int,
    t: int,
    reward: float,
    gamma: float,
) -> tuple[float, float, str]:
    """(V_{t+1}, A_{t+1}, note) exactly as the dialect's GAE recursion used them at (b, t).

    verl carries values/advantages through masked tokens (the next VALID token); OpenRLHF masks
    values (0 after the last token); ROLL passes unmasked values, so the last valid token
    bootstraps from the first padded slot and the padded slots' advantage leaks back (T8): that
    carried A_{t+1} is recovered from the trace as (A_t - delta_t) / (gamma lam).
    """
    width = mask.shape[1]
    valid = mask[b].bool()
    if trace.framework == "verl":
        later = [i for i in range(t + 1, width) if bool(valid[i])]
        if not later:
            return 0.0, 0.0, ""
        return float(values[b, later[0]]), float(raw[b, later[0]]), ""
    nxt = t + 1
    if nxt >= width:
        return 0.0, 0.0, ""
    if bool(valid[nxt]):
        return float(values[b, nxt]), float(raw[b, nxt]), ""
    if trace.framework != "roll":
        return 0.0, 0.0, ""
    next_value = float(values[b, nxt])
    delta = reward + gamma * next_value - float(values[b, t])
    gl = gamma * _lam(trace)
    leaked = (float(raw[b, t]) - delta) / gl if gl > 0 else 0.0
    return next_value, leaked, "ROLL: the padded slots' values leak in"


def token_formulas(
    trace: Trace, b: int, t: int, mask: Tensor, values: Tensor | None = None
) -> list[Formula]:
    """The derivation of the advantage of token (b, t), step by step, with the trace's numbers.

    Steps shown when they apply: the response-level baseline/normalization, the token reward
    (score on the last token, minus beta * KL), the return or GAE recursion, the whitening, and the
    final advantage.

    Args:
        trace: the pipeline's trace.
        b: sample row.
        t: token position (must be a valid response token of row b).
        mask: (B, T) response mask of the batch.
        values: (B, T) critic values of the batch (GAE), or None.

    Returns:
        The steps, in order; the last one's ``value`` equals ``trace.advantages[b, t]``.
    """
    steps: list[Formula] = []
    estimator = _estimator(trace)
    score = float(trace.scores[b])
    baseline = float(trace.baseline[b])
    scale = float(trace.scale[b])
    if baseline != 0.0 or scale != 1.0:
        processed = (score - baseline) / scale
        steps.append(normalized_reward_formula(score, baseline, scale, std_eps(trace), processed))
    valid = mask[b].bool()
    last = int(valid.nonzero().max()) if bool(valid.any()) else t
    r_t = float(trace.token_rewards[b, t])
    kl_t = float(trace.kl[b, t])
    beta = float(trace.kl_coef)
    if trace.kl_in_reward:
        if t == last:
            steps.append(
                Formula(
                    "token reward (last token: reward minus KL penalty)",
                    r"r_t = \tilde r - \beta\,\mathrm{KL}_t",
                    rf"r_t = {fmt(r_t + beta * kl_t)} - {fmt(beta)} \cdot {term(kl_t)}"
                    rf" = {fmt(r_t)}",
                    r_t,
                )
            )
        else:
            steps.append(
                Formula(
                    "token reward (KL penalty only)",
                    r"r_t = -\beta\,\mathrm{KL}_t",
                    rf"r_t = -{fmt(beta)} \cdot {term(kl_t)} = {fmt(r_t)}",
                    r_t,
                )
            )
    else:
        steps.append(
            Formula(
                "token reward"
                + (" (the response reward sits on the last token)" if t == last else ""),
                r"r_t",
                rf"r_t = {fmt(r_t)}",
                r_t,
            )
        )
    gamma = _gamma(trace)
    nxt = t + 1
    has_next = nxt < mask.shape[1] and bool(mask[b, nxt])
    adv = float(trace.advantages[b, t])
    if "gae" in estimator:
        v = values if values is not None else torch.zeros_like(trace.advantages)
        raw = trace.returns - v
        next_value, next_adv, note = _gae_next(trace, v, raw, mask, b, t, r_t, gamma)
        delta_f, adv_f = gae_formulas(r_t, float(v[b, t]), next_value, next_adv, gamma, _lam(trace))
        if note:
            adv_f = replace(adv_f, title=f"{adv_f.title} ({note})")
        steps.extend((delta_f, adv_f))
        pre = float(raw[b, t])
    elif estimator in RETURN_ESTIMATORS.get(trace.framework, ()):
        ret = float(trace.returns[b, t])
        steps.append(
            return_formula(r_t, gamma, float(trace.returns[b, nxt]) if has_next else 0.0, ret)
        )
        pre = ret
        if estimator == "remax":
            pre = ret - baseline
    else:
        pre = adv
    if not math.isclose(pre, adv, rel_tol=1e-6, abs_tol=1e-9):
        if "gae" in estimator:
            raw_all = trace.returns - (values if values is not None else 0.0)
        else:
            raw_all = trace.returns
        fit = whitening_fit(raw_all, trace.advantages, mask)
        if fit is not None:
            mean, k = fit
            steps.append(
                Formula(
                    "whitening over all valid tokens of the batch",
                    r"A_t = \dfrac{x_t - \mu}{\sigma}",
                    rf"A_t = \dfrac{{{fmt(pre)} - {term(mean)}}}{{{fmt(1.0 / k)}}} = {fmt(adv)}",
                    adv,
                )
            )
        else:
            steps.append(
                Formula(
                    "final advantage (after the dialect's last step)",
                    r"A_t",
                    rf"A_t = {fmt(adv)}",
                    adv,
                )
            )
    else:
        steps.append(Formula("advantage", r"A_t", rf"A_t = {fmt(adv)}", adv))
    return steps


def beta_schedule(
    beta: float, observed_kl: float, target: float, horizon: float, n_steps: int, steps: int
) -> list[float]:
    """Beta over ``steps`` updates of the adaptive (Ziegler) controller at a constant observed KL.

    Each step: beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon)
    (``roll_viz.core.pipeline.kl.next_kl_coef``).

    Args:
        beta: starting coefficient.
        observed_kl: the KL the controller sees at every step (this batch's).
        target: target KL (> 0).
        horizon: controller horizon (> 0).
        n_steps: samples per update (the batch size B).
        steps: how many updates to simulate.

    Returns:
        steps + 1 values, beta_0 first.
    """
    from roll_viz.core.pipeline.kl import next_kl_coef

    out = [float(beta)]
    for _ in range(int(steps)):
        out.append(float(next_kl_coef(out[-1], observed_kl, target, horizon, n_steps)))
    return out
