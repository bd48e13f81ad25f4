"""Formulas with a selected token's numbers substituted (LaTeX strings for ``st.latex``).

Every formula is the one the dialect applied: its epsilon, its estimator, its gamma and lam.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.kl import next_beta
from roll_viz.core.records import Trace
from roll_viz.views.text import fmt, term


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
    if eps is not None:
        return float(eps)
    dialect = dialects.DIALECTS.get(trace.framework)
    return dialect.STD_EPS if dialect is not None else 1e-6


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
    dialect = dialects.DIALECTS.get(trace.framework)
    return dialect.estimator_name(dict(trace.config)) if dialect is not None else "?"


def _return_estimators(trace: Trace) -> tuple[str, ...]:
    """The dialect's estimators built from the discounted reward-to-go of the token rewards."""
    dialect = dialects.DIALECTS.get(trace.framework)
    return dialect.RETURN_ESTIMATORS if dialect is not None else ()


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
    dialect = dialects.DIALECTS.get(trace.framework)
    padding = dialect.GAE_PADDING if dialect is not None else None
    if padding == "carry":
        later = [i for i in range(t + 1, width) if bool(valid[i])]
        if not later:
            return 0.0, 0.0, ""
        return float(values[b, later[0]]), float(raw[b, later[0]]), ""
    nxt = t + 1
    if nxt >= width:
        return 0.0, 0.0, ""
    if bool(valid[nxt]):
        return float(values[b, nxt]), float(raw[b, nxt]), ""
    if padding != "unmasked":
        return 0.0, 0.0, ""
    next_value = float(values[b, nxt])
    delta = reward + gamma * next_value - float(values[b, t])
    gl = gamma * _lam(trace)
    leaked = (float(raw[b, t]) - delta) / gl if gl > 0 else 0.0
    return next_value, leaked, "ROLL: the padded slots' values leak in"


def _token_reward_formula(trace: Trace, r_t: float, kl_t: float, *, at_last: bool) -> Formula:
    """Token t's reward: the response reward on the last token, minus beta * KL when in reward."""
    beta = float(trace.beta)
    if not trace.kl_in_reward:
        note = " (the response reward sits on the last token)" if at_last else ""
        return Formula("token reward" + note, r"r_t", rf"r_t = {fmt(r_t)}", r_t)
    if at_last:
        return Formula(
            "token reward (last token: reward minus KL penalty)",
            r"r_t = \tilde r - \beta\,\mathrm{KL}_t",
            rf"r_t = {fmt(r_t + beta * kl_t)} - {fmt(beta)} \cdot {term(kl_t)} = {fmt(r_t)}",
            r_t,
        )
    return Formula(
        "token reward (KL penalty only)",
        r"r_t = -\beta\,\mathrm{KL}_t",
        rf"r_t = -{fmt(beta)} \cdot {term(kl_t)} = {fmt(r_t)}",
        r_t,
    )


def _final_formula(
    trace: Trace, pre: float, adv: float, mask: Tensor, values: Tensor | None, *, whitened: bool
) -> Formula:
    """The last step: the advantage as is, or the batch whitening that turned ``pre`` into it."""
    if math.isclose(pre, adv, rel_tol=1e-6, abs_tol=1e-9):
        return Formula("advantage", r"A_t", rf"A_t = {fmt(adv)}", adv)
    raw_all = trace.returns - (values if values is not None else 0.0) if whitened else trace.returns
    fit = whitening_fit(raw_all, trace.advantages, mask)
    if fit is None:
        return Formula(
            "final advantage (after the dialect's last step)", r"A_t", rf"A_t = {fmt(adv)}", adv
        )
    mean, k = fit
    return Formula(
        "whitening over all valid tokens of the batch",
        r"A_t = \dfrac{x_t - \mu}{\sigma}",
        rf"A_t = \dfrac{{{fmt(pre)} - {term(mean)}}}{{{fmt(1.0 / k)}}} = {fmt(adv)}",
        adv,
    )


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
    steps.append(_token_reward_formula(trace, r_t, kl_t, at_last=t == last))
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
    elif estimator in _return_estimators(trace):
        ret = float(trace.returns[b, t])
        steps.append(
            return_formula(r_t, gamma, float(trace.returns[b, nxt]) if has_next else 0.0, ret)
        )
        pre = ret
        if estimator == "remax":
            pre = ret - baseline
    else:
        pre = adv
    steps.append(_final_formula(trace, pre, adv, mask, values, whitened="gae" in estimator))
    return steps


def simulated_betas(
    beta: float, observed_kl: float, target: float, horizon: float, n_steps: int, steps: int
) -> list[float]:
    """Beta over ``steps`` updates of the adaptive (Ziegler) controller at a constant observed KL.

    Each step: beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon)
    (``roll_viz.core.pipeline.kl.next_beta``).

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
    out = [float(beta)]
    for _ in range(int(steps)):
        out.append(float(next_beta(out[-1], observed_kl, target, horizon, n_steps)))
    return out
