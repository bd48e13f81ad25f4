"""The Self-test page's checks, run live on the current batch.

Each check compares against hand values written as literals (the seed example, T1-T14 of the
algorithms notes) or an exact enumeration: for the full-vocabulary KL, the categorical that the
stored top-K log-probs define (top-K tokens plus one "rest" bucket).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import EXAMPLE_REWARDS, one_thread
from roll_viz.analysis.local_global import framework_config
from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.kl import KL_ESTIMATORS, token_kl
from roll_viz.core.records import Batch, Rollout, meta_dict

# ---------------------------------------------------------------------------------------------
# Self-test checks (the Self-test page and the unit tests run these same functions)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one named self-test check.

    Attributes:
        name: short title shown on the page.
        passed: whether every comparison was within tolerance.
        detail: the numbers behind the verdict (expected, got, max error, counts, ...).
        description: what exactly is compared, in plain language.
        summary: the one number that decides it, for a one-line display.
    """

    name: str
    passed: bool
    detail: dict = field(default_factory=dict)
    description: str = ""
    summary: str = ""


#: Tolerance for hand values printed to 9 decimals in docs/reference-values.md.
HAND_TOL = 2e-8
#: Response lengths of the T4/T5 whitening example.
WHITEN_LENGTHS = (3, 2, 4)
#: Second group of the T14 two-group example.
SECOND_GROUP = (1.0, 2.0, 3.0)


def seed_cases() -> tuple[tuple[str, str, dict, str, tuple[float, ...]], ...]:
    """Every registered dialect's hand-checked seed cases (``SELFTEST.seed``), in registry order.

    Each is (name, dialect, config in the dialect's keys, case, expected per-sample advantages);
    case "one": the seed's group on one token each; "whiten": lengths 3/2/4; "two": T14.
    """
    return tuple(
        (name, fw, dict(config), case, expected)
        for fw, dialect in dialects.DIALECTS.items()
        for name, config, case, expected in dialect.SELFTEST.seed
    )


#: The seed cases of the shipped dialects (as ``seed_cases()`` returned them at import).
SEED_CASES = seed_cases()


#: KL(p || q) for p = [0.6, 0.3, 0.1], q = [0.4, 0.4, 0.2] (algorithms.md T7).
T7_P = (0.6, 0.3, 0.1)
T7_Q = (0.4, 0.4, 0.2)
T7_KL = 0.087659725


def _no_kl(framework: str, config: Mapping[str, object]) -> dict:
    """The dialect config with gamma 1 and no KL anywhere near the rewards."""
    cfg, _ = framework_config(framework, {"gamma": 1.0, "beta": 0.0, "kl_in_reward": False})
    cfg.update(config)
    return cfg


def _seed_batch(case: str) -> tuple[Batch, Tensor]:
    """The seed example as a Batch; returns (batch, (B,) row of each expected value)."""
    if case == "one":
        scores = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
        mask = torch.ones(3, 1, dtype=torch.float64)
        ids = torch.zeros(3, dtype=torch.long)
    elif case == "whiten":
        scores = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
        width = max(WHITEN_LENGTHS)
        mask = (torch.arange(width)[None, :] < torch.tensor(WHITEN_LENGTHS)[:, None]).double()
        ids = torch.zeros(3, dtype=torch.long)
    elif case == "two":
        scores = torch.tensor(EXAMPLE_REWARDS + SECOND_GROUP, dtype=torch.float64)
        mask = torch.ones(6, 1, dtype=torch.float64)
        ids = torch.tensor([0, 0, 0, 1, 1, 1])
    else:
        raise ValueError(f"unknown seed case {case!r}")
    labels = tuple(range(int(ids.max()) + 1))
    return Batch(scores=scores, response_mask=mask, group_ids=ids, group_labels=labels), mask


def check_seed_case(
    name: str, framework: str, config: Mapping, case: str, expected: Sequence[float]
) -> CheckResult:
    """The seed's 8.2/6.5/9.1 example in one dialect against its hand value (every valid token).

    Args:
        name: display name of the case.
        framework: the dialect.
        config: the dialect's estimator settings (its own keys).
        case: "one" (one group, one token each), "whiten" (lengths 3/2/4) or "two" (T14).
        expected: (B,) hand-computed advantage of each sample.

    Returns:
        The check; ``detail`` holds expected and computed per-sample values and the max error.
    """
    batch, mask = _seed_batch(case)
    want = torch.tensor(expected, dtype=torch.float64)
    try:
        adv = pipeline.run(batch, framework, _no_kl(framework, config)).advantages.double()
    except ValueError as err:
        return CheckResult(f"seed example · {name}", False, {"error": str(err)})
    target = want[:, None] * mask
    err = float((adv - target).abs().max())
    got = [round(float(v), 9) for v in adv[:, 0]]
    return CheckResult(
        name=f"seed example · {name}",
        passed=err <= HAND_TOL,
        summary=f"max error {err:.1e} (tolerance {HAND_TOL:.0e})",
        detail={"expected": list(expected), "got": got, "max abs error": err},
        description=(
            f"rewards {', '.join(map(str, EXAMPLE_REWARDS))} through {framework}'s pipeline; "
            "every valid token must carry the hand value from docs/reference-values.md."
        ),
    )


def check_every_position(response_mask: Tensor, framework: str) -> CheckResult:
    """The seed group placed at every row of the current batch's mask, in one dialect.

    The current (B, T) mask rows are regrouped into groups of three (rows reused cyclically
    to fill the last group); group j gets the rewards rotated by j, so each reward visits every
    slot. Group normalization must put the hand value (T1, the dialect's eps) on every valid
    token of every row and exactly 0 on padding.

    Args:
        response_mask: (B, T) float mask of the current batch.
        framework: the dialect.

    Returns:
        The check; ``detail`` has the rows and valid tokens checked and the max errors.
    """
    config, hand = dialects.get(framework).SELFTEST.group_norm
    n_rows = response_mask.shape[0]
    n_groups = max(1, math.ceil(n_rows / 3))
    rows = torch.arange(3 * n_groups) % n_rows
    mask = response_mask[rows].double()
    base = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
    hand_t = torch.tensor(hand, dtype=torch.float64)
    slot = (torch.arange(3)[None, :] + torch.arange(n_groups)[:, None]) % 3  # (groups, 3)
    scores = base[slot].reshape(-1)
    expected = hand_t[slot].reshape(-1)
    ids = torch.arange(n_groups).repeat_interleave(3)
    batch = Batch(
        scores=scores,
        response_mask=mask,
        group_ids=ids,
        group_labels=tuple(range(n_groups)),
    )
    name = f"seed example at every position · {framework}"
    try:
        adv = pipeline.run(batch, framework, _no_kl(framework, config)).advantages.double()
    except ValueError as err:
        return CheckResult(name, False, {"error": str(err)})
    valid = mask > 0
    err = float((adv - expected[:, None])[valid].abs().max()) if bool(valid.any()) else 0.0
    leak = float(adv[~valid].abs().max()) if bool((~valid).any()) else 0.0
    return CheckResult(
        name=name,
        passed=err <= HAND_TOL and leak == 0.0,
        summary=f"{int(valid.sum())} tokens, max error {err:.1e}, padding max {leak:.1e}",
        detail={
            "rows": int(mask.shape[0]),
            "valid tokens checked": int(valid.sum()),
            "max abs error": err,
            "max |advantage| on padding": leak,
        },
        description=(
            "The current batch's response mask, regrouped in threes, each group given 8.2/6.5/"
            "9.1 in rotated order: every valid token must equal the hand value, padding 0."
        ),
    )


def coarse_categoricals(rollout: Rollout) -> tuple[Tensor, Tensor, Tensor]:
    """Policy and reference categoricals over the policy's top-K tokens plus one "rest" bucket.

    The rollout stores top-K log-probs, not full logits; lumping every other token into one
    bucket gives, for each position, an exact categorical that both models assign.

    Args:
        rollout: the sampled rollout.

    Returns:
        (p, q, valid): p and q are (N, K+1) probabilities at the N valid response positions
        (float64, rows sum to 1); valid is the (B, T) bool mask they come from.
    """
    valid = rollout.response_mask > 0
    p_top = rollout.topk_logprobs.double()[valid].exp()  # (N, K)
    q_top = rollout.topk_ref_logprobs.double()[valid].exp()
    p_rest = (1.0 - p_top.sum(-1, keepdim=True)).clamp(min=0.0)
    q_rest = (1.0 - q_top.sum(-1, keepdim=True)).clamp(min=0.0)
    p = torch.cat([p_top, p_rest], -1)
    q = torch.cat([q_top, q_rest], -1)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True), valid


def categorical_kl_checks(p: Tensor, q: Tensor) -> dict[str, Tensor]:
    """Exact KL(p || q) by enumeration and E_p of the pipeline's k1 and k3 estimators.

    Args:
        p: (N, C) policy probabilities (rows sum to 1).
        q: (N, C) reference probabilities (rows sum to 1).

    Returns:
        ``exact``, ``e_k1``, ``e_k3``, each (N,).
    """
    support = p > 0
    logp = torch.where(support, p.clamp(min=1e-300).log(), torch.zeros_like(p))
    logq = torch.where(support, q.clamp(min=1e-300).log(), torch.zeros_like(q))
    exact = (p * (logp - logq)).where(support, torch.zeros_like(p)).sum(-1)
    mask = support.double()
    e_k1 = (p * token_kl(logp, logq, mask, "k1")).sum(-1)
    e_k3 = (p * token_kl(logp, logq, mask, "k3")).sum(-1)
    return {"exact": exact, "e_k1": e_k1, "e_k3": e_k3}


def check_kl_estimators(rollout: Rollout | None) -> CheckResult:
    """E_p[k1] = E_p[k3] = exact KL, on T7's categorical and on the rollout's positions.

    Args:
        rollout: the current rollout, or None (then only the T7 categorical is checked).

    Returns:
        The check; ``detail`` has the T7 numbers, positions checked, the max errors and the
        largest amount by which the coarse KL exceeds the stored full-vocabulary ``exact_kl``.
    """
    t7 = categorical_kl_checks(
        torch.tensor([T7_P], dtype=torch.float64), torch.tensor([T7_Q], dtype=torch.float64)
    )
    detail: dict[str, object] = {
        "T7 exact KL (hand 0.087659725)": round(float(t7["exact"][0]), 9),
        "T7 E_p[k1]": round(float(t7["e_k1"][0]), 9),
        "T7 E_p[k3]": round(float(t7["e_k3"][0]), 9),
    }
    t7_err = max(abs(float(t7[k][0]) - T7_KL) for k in ("exact", "e_k1", "e_k3"))
    passed = t7_err <= 1e-8
    if rollout is not None and bool((rollout.response_mask > 0).any()):
        p, q, valid = coarse_categoricals(rollout)
        res = categorical_kl_checks(p, q)
        est_err = float(
            torch.maximum(
                (res["e_k1"] - res["exact"]).abs(), (res["e_k3"] - res["exact"]).abs()
            ).max()
        )
        stored = rollout.exact_kl.double()[valid]
        excess = float((res["exact"] - stored).max())
        tol = 1e-4 + 1e-3 * float(stored.abs().max())
        detail.update(
            {
                "positions checked": int(valid.sum()),
                "max |E_p[k] - enumerated KL|": est_err,
                "mean enumerated top-K+rest KL": float(res["exact"].mean()),
                "mean stored exact_kl (full vocabulary)": float(stored.mean()),
                "max (top-K+rest KL - exact_kl), must be <= tol": excess,
                "tol": tol,
            }
        )
        passed = passed and est_err <= 1e-9 and excess <= tol
        summary = (
            f"T7 error {t7_err:.1e}; {int(valid.sum())} positions, estimator error "
            f"{est_err:.1e}, top-K KL minus exact_kl at most {excess:.1e}"
        )
    else:
        summary = f"T7 error {t7_err:.1e}"
    return CheckResult(
        name="E_p[k1] = E_p[k3] = exact KL",
        passed=passed,
        summary=summary,
        detail=detail,
        description=(
            "The rollout keeps each position's top-K log-probs, not the full logits. For every "
            "response position both models' distributions are reduced to the policy's top-K "
            "tokens plus one 'all other tokens' bucket; on that categorical the pipeline's k1 "
            "and k3 estimators, averaged under the policy, must equal the enumerated KL "
            "exactly. Lumping tokens can only lose information, so that KL may not exceed the "
            "full-vocabulary exact_kl the sampler stored. Also T7: p=[0.6,0.3,0.1], "
            "q=[0.4,0.4,0.2] gives 0.087659725."
        ),
    )


def check_identical_policy(rollout: Rollout | None, batch: Batch) -> CheckResult:
    """KL = 0 exactly for an identical policy.

    With ``policy_mode == "identical"`` the stored exact_kl and every token KL estimator on the
    rollout must be exactly 0. For a steered rollout the reference log-probs are replaced by the
    policy's own (the identical-policy case by construction) and the same is required.

    Args:
        rollout: the current rollout, or None.
        batch: the current batch (its log-probs are used).

    Returns:
        The check; ``detail`` holds the largest |KL| per estimator.
    """
    mode = meta_dict(rollout).get("policy_mode", "") if rollout is not None else ""
    source = "sampler" if mode == "identical" else "ref = policy"
    if batch.logprobs is None:
        return CheckResult("KL = 0 for an identical policy", True, {"skipped": "no log-probs"})
    mask = batch.response_mask
    ref = batch.ref_logprobs if mode == "identical" else batch.logprobs
    detail: dict[str, object] = {"policy mode": mode or "unknown"}
    worst = 0.0
    for name in KL_ESTIMATORS:
        value = float(token_kl(batch.logprobs, ref, mask, name).abs().max())
        detail[f"max |{name}|"] = value
        worst = max(worst, value)
    if mode == "identical" and rollout is not None:
        value = float(rollout.exact_kl.abs().max())
        detail["max |exact_kl|"] = value
        worst = max(worst, value)
        how = "The rollout was sampled with policy = reference, so its stored values are used."
    else:
        how = (
            "The current rollout is steered, so the reference log-probs are replaced by the "
            "policy's own (an identical policy by construction); choose policy mode "
            "'identical' in the sidebar to check the sampler's own numbers."
        )
    return CheckResult(
        name="KL = 0 for an identical policy",
        passed=worst == 0.0,
        summary=f"largest |KL| {worst:.1e} ({source})",
        detail=detail,
        description="Every token KL estimator (k1, abs, k2, k3) must be exactly 0. " + how,
    )


def with_padding(batch: Batch) -> Batch:
    """A copy of the batch in which every other row loses the second half of its tokens.

    Used by the mask check when the current batch has no padding at all (every response hit
    the length cap), so that padding is still exercised on the real numbers.

    Args:
        batch: the batch.

    Returns:
        The same batch with a new (B, T) response mask (rows 1, 3, 5, ... half as long).
    """
    mask = batch.response_mask.double()
    lengths = mask.sum(-1)
    odd = (torch.arange(mask.shape[0]) % 2 == 1).double()
    keep = torch.where(odd > 0, torch.ceil(lengths / 2), lengths)
    new_mask = mask * (torch.arange(mask.shape[1])[None, :] < keep[:, None]).double()
    values = None if batch.values is None else batch.values.double() * new_mask
    return replace(batch, response_mask=new_mask, values=values)


def _mask_case(batch: Batch, framework: str, cfg: dict, poison_values: bool) -> tuple[float, float]:
    """(max |output| on padding, max change of valid advantages) when padding is poisoned."""
    mask = batch.response_mask.double()
    pad = mask == 0
    values = batch.values if batch.values is not None else torch.zeros_like(mask)
    clean = replace(batch, values=values)
    noise = torch.linspace(3.0, 97.0, mask.numel(), dtype=torch.float64).reshape(mask.shape)

    def dirty(x: Tensor | None, sign: float) -> Tensor | None:
        return None if x is None else torch.where(pad, sign * noise, x.double())

    poisoned = replace(
        clean,
        logprobs=dirty(batch.logprobs, -1.0),
        ref_logprobs=dirty(batch.ref_logprobs, -1.0),
        values=dirty(values, 1.0) if poison_values else values,
    )
    a = pipeline.run(clean, framework, cfg)
    b = pipeline.run(poisoned, framework, cfg)
    on_pad = max(
        float(t[pad].abs().max()) if bool(pad.any()) else 0.0
        for tr in (a, b)
        for t in (tr.kl, tr.token_rewards, tr.advantages, tr.returns)
    )
    valid = ~pad
    change = float((a.advantages - b.advantages)[valid].abs().max()) if bool(valid.any()) else 0.0
    return on_pad, change


def check_masks(batch: Batch) -> CheckResult:
    """Masks never leak: padding is exactly 0 and garbage on padding changes no valid number.

    Each dialect/estimator of a record's ``SELFTEST.masks`` runs twice, once as is and once with the
    padded positions of log-probs, reference log-probs and critic values overwritten with large
    values. Every (B, T) output must be exactly 0 on padding in both runs, and the advantages on
    valid tokens must be identical. The one documented exception is ROLL's GAE, which feeds the
    critic's unmasked values to the recursion (algorithms.md T8): there the padded values are left
    alone, the leak is reported, and the batch's own values must be 0 on padding so the app's
    numbers are unaffected. A batch without any padding is also checked with half of every other row
    masked (``with_padding``).

    Args:
        batch: the current batch (a zero critic is used if it has no values).

    Returns:
        The check; ``detail`` lists the worst padding value and valid-token change per case.
    """
    variants = [("", batch)]
    if not bool((batch.response_mask == 0).any()):
        variants.append((" (extra padding)", with_padding(batch)))
    has_kl = batch.logprobs is not None and batch.ref_logprobs is not None
    detail: dict[str, object] = {}
    passed = True
    for suffix, data in variants:
        pad = data.response_mask == 0
        for fw, dialect in dialects.DIALECTS.items():
            for extra in dialect.SELFTEST.masks:
                generic = {"beta": 0.1, "kl_in_reward": True} if has_kl else {"beta": 0.0}
                cfg, _ = framework_config(fw, generic)
                cfg.update(extra)
                label = f"{fw} {next(iter(extra.values()))}{suffix}"
                unmasked = dialect.GAE_PADDING == "unmasked"  # ROLL reads padded critic values
                roll_gae = unmasked and extra.get(dialect.ESTIMATOR_KEY) == "gae"
                try:
                    on_pad, change = _mask_case(data, fw, cfg, poison_values=not roll_gae)
                    ok = on_pad == 0.0 and change == 0.0
                    text = f"padding max {on_pad:.3g}, valid-token change {change:.3g}"
                    if roll_gae and data.values is not None and bool(pad.any()):
                        own = float(data.values.double()[pad].abs().max())
                        _, leak = _mask_case(data, fw, cfg, poison_values=True)
                        ok = ok and own == 0.0
                        text += (
                            f"; padded critic values in this batch max {own:.3g}; with garbage "
                            f"values on padding ROLL's GAE shifts valid tokens by {leak:.3g} "
                            "(ROLL's documented unmasked-values behaviour, T8)"
                        )
                except ValueError as err:
                    detail[label] = f"not run: {err}"
                    continue
                passed = passed and ok
                detail[label] = text
    n_cases = sum(1 for v in detail.values() if not str(v).startswith("not run"))
    return CheckResult(
        name="masks never leak",
        passed=passed,
        summary=f"{n_cases} dialect/estimator runs, padding and valid tokens checked",
        detail=detail,
        description=(
            "Every dialect and estimator, run on the current batch with KL in the reward: KL, "
            "token rewards, advantages and returns are exactly 0 on padding, and overwriting "
            "the padded log-probs, reference log-probs and critic values with large numbers "
            "changes no advantage on a valid token. Exception, shown with its size: ROLL's GAE "
            "reads the critic's value at the first padded slot (as ROLL does), so there the "
            "check requires the app's critic values to be 0 on padding instead. A batch without "
            "padding is also checked with half of every other row masked."
        ),
    )


@one_thread
def run_self_tests(rollout: Rollout | None, batch: Batch) -> list[CheckResult]:
    """Every self-test check on the current data (the Self-test page and the unit tests).

    Args:
        rollout: the current rollout (None for a batch without one: KL checks shrink).
        batch: the current batch.

    Returns:
        The checks in display order.
    """
    checks = [check_seed_case(*case) for case in seed_cases()]
    checks += [check_every_position(batch.response_mask, fw) for fw in dialects.DIALECTS]
    checks.append(check_kl_estimators(rollout))
    checks.append(check_identical_policy(rollout, batch))
    checks.append(check_masks(batch))
    return checks


def checks_table(checks: Sequence[CheckResult]) -> pd.DataFrame:
    """The checks as a table for display and CSV download.

    Args:
        checks: results of ``run_self_tests``.

    Returns:
        DataFrame with columns check, result ("pass"/"FAIL"), numbers (the detail as text).
    """
    return pd.DataFrame(
        {
            "check": [c.name for c in checks],
            "result": ["pass" if c.passed else "FAIL" for c in checks],
            "numbers": ["; ".join(f"{k}: {v}" for k, v in c.detail.items()) for c in checks],
        }
    )
