"""The mismatch lab's sequence-level masks: which rows and tokens each threshold removes.

Beside the token-level corrections of ``mismatch.mismatch_lab`` (same batch, same pi_theta, same
PPO-clip token-mean loss), each sequence rule keeps or drops whole responses, under the name of
the framework that ships it (``dialects/sequence_rules``):

- TRL ``off_policy_mask_threshold`` (OPSM, DeepSeek-V3.2): A < 0 and mean log mu - log pi_theta
  above delta;
- TRL ``sequence_mask`` (the product ratio pi_old / mu over the sequence) against verl Geo-RS
  (the geometric mean), at the same [low, high]: the product drifts with length, the mean does
  not;
- verl TRM (``seq_max_k2``): any token's k2 above delta;
- the keep sampling mask (DeepSeek-V3.2), only when mu is a truncated sampler (top-p / top-k):
  pi_old renormalised on the sampler's support. For those sources mu is pi_old's own float32
  distribution renormalised on the support, so log S (the support's mass under pi_old) is d
  itself and the renormalised ratio is exactly 1 on every token;
- last, prime-rl's default loss (``dialects/prime_loss``) for comparison: not a sequence rule but
  its own loss against mu (a DPPO token mask by the advantage's sign, -A pi / mu, kl_tau
  log^2(pi / mu)), with its own loss and gradient instead of the lab's PPO-clip.

``sequence_lab`` returns a ``mismatch.Lab`` whose corrections are these rules (so the page's
figures draw them as they draw the token-level ones) and a per-sequence table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis import mismatch
from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline import sequence_masks as sm
from roll_viz.core.pipeline.dialects import sequence_rules as sr
from roll_viz.core.pipeline.dialects.prime_loss import prime_default_loss

#: the mu sources that draw from a truncated support (the keep sampling mask applies)
TRUNCATED_SOURCES = ("top_p", "top_k")


@dataclass(frozen=True)
class SeqSettings:
    """The sequence rules' thresholds (the lab's defaults, chosen to show removals on bf16).

    Attributes:
        opsm_delta: TRL ``off_policy_mask_threshold`` (TRL's docs give 0.5 as an example; a
            bf16 sampler's sequence KL is about 0.01, so the lab starts at 0.01).
        low: lower bound of the sequence ratio pi_old / mu (product and geometric).
        high: upper bound.
        trm_delta: verl ``rollout_rs_threshold`` of ``seq_max_k2`` (largest token d^2 / 2).
    """

    opsm_delta: float = 0.01
    low: float = 0.8
    high: float = 1.25
    trm_delta: float = 0.02


@dataclass(frozen=True)
class SequenceLab:
    """The sequence rules on one batch.

    Attributes:
        lab: the token-level lab with ``corrections`` / ``results`` / ``table`` replaced by the
            sequence rules' (same delta, mask, logp, ratio and plain loss).
        sequences: one row per response: length, mean A, the statistics each rule compares and
            what each rule does to it ("kept", "removed", or "k tokens" for a token mask).
        rule_names: the rules' labels (columns of ``sequences``), in table order.
    """

    lab: mismatch.Lab
    sequences: pd.DataFrame
    rule_names: tuple[str, ...]


def _label(corr: rc.Correction) -> str:
    return f"{corr.framework}: {corr.name}"


def build_rules(
    lab: mismatch.Lab,
    old: Tensor,
    mu: Tensor,
    advantages: Tensor,
    settings: SeqSettings,
    source: str,
) -> tuple[rc.Correction, ...]:
    """Every sequence rule at the settings (ValueError on a threshold a rule refuses).

    ``old`` and ``mu`` are float64 with 0 off the mask; ``advantages`` (B, T).
    """
    m = lab.mask
    rules = [
        sr.trl_opsm(lab.logp, mu, m, advantages, settings.opsm_delta),
        sr.trl_sequence_product(old, mu, m, settings.low, settings.high),
        sr.verl_geo_rs(old, mu, m, settings.low, settings.high),
        sr.verl_trm(old, mu, m, settings.trm_delta),
    ]
    if source in TRUNCATED_SOURCES:
        # mu = pi_old renormalised on the support (same float32 logits): log S = d
        rules.append(sr.keep_sampling(old, mu, m, lab.delta))
    return tuple(rules)


def _cell(dropped: int, length: int) -> str:
    """A response's fate under one rule: "kept", "removed" (every token) or "k tokens"."""
    if dropped == 0:
        return "kept"
    return "removed" if dropped == length else f"{dropped} tokens"


def _rows_removed(corr: rc.Correction, m: Tensor) -> int:
    dropped = (corr.masked | (m & ~corr.counted)) & m
    full = dropped.sum(-1) == m.sum(-1)
    return int((full & (m.sum(-1) > 0)).sum())


def sequence_lab(
    lab: mismatch.Lab,
    old: Tensor,
    mu: Tensor,
    advantages: Tensor,
    settings: SeqSettings,
    source: str,
) -> SequenceLab:
    """The sequence rules beside the token-level lab (milliseconds for a classroom batch).

    Args:
        lab: ``mismatch.mismatch_lab`` of the same batch (its pi_theta and plain loss).
        old: (B, T) log pi_old.
        mu: (B, T) log mu.
        advantages: (B, T) or (B,) the batch's advantages.
        settings: the thresholds.
        source: the mu source (``lm.rollout.SOURCES`` or the engine).

    Raises:
        ValueError: a threshold a rule refuses (its own message).
    """
    m = lab.mask
    adv = torch.as_tensor(advantages).double()
    if adv.dim() == 1:
        adv = adv[:, None].expand(m.shape)
    adv = torch.where(m, adv, 0.0)
    old64 = torch.where(m, torch.as_tensor(old).double(), 0.0)
    mu64 = torch.where(m, torch.as_tensor(mu).double(), 0.0)
    rules = build_rules(lab, old64, mu64, adv, settings, source)
    results = tuple(rc.lab_loss(lab.logp, old64, adv, m, c, eps=mismatch.EPS_CLIP) for c in rules)
    # prime-rl's default loss beside them: its own loss on pi_theta / mu (a token mask)
    prime, prime_result = prime_default_loss(lab.logp, mu64, adv, m)
    rules, results = (*rules, prime), (*results, prime_result)
    n = int(m.sum())
    rows = []
    for corr, res in zip(rules, results, strict=True):
        rows.append(
            {
                "framework": corr.framework,
                "method": corr.name,
                "config": ", ".join(f"{k}={v}" for k, v in corr.config if v is not None),
                "rows removed": _rows_removed(corr, m),
                "truncated": int(corr.truncated.sum()),
                "masked": int(corr.masked.sum()),
                "kept share": (n - int(corr.masked.sum())) / n if n else math.nan,
                "ESS": rc.effective_sample_size(corr.weights, m),
                "denominator": res.denominator,
                "loss without": lab.plain.loss,
                "loss with": res.loss,
                "|g| without": float(lab.plain.grad.norm()),
                "|g| with": float(res.grad.norm()),
            }
        )
    table = pd.DataFrame(rows)
    log_prod, log_geo = sm.log_sequence_ratios(old64, mu64, m)
    opsm = sm.opsm(adv, lab.logp, mu64, m, settings.opsm_delta)
    trm = sm.trust_region_mask(old64, mu64, m, settings.trm_delta)
    frame = pd.DataFrame(
        {
            "sample": list(range(m.shape[0])),
            "tokens": m.sum(-1).tolist(),
            "mean A": sm.sequence_advantage(adv, m).tolist(),
            "seq KL (mu || pi_theta)": opsm.statistic.tolist(),
            "product pi_old/mu": torch.exp(log_prod).tolist(),
            "geometric pi_old/mu": torch.exp(log_geo).tolist(),
            "max token k2": trm.statistic.tolist(),
        }
    )
    if source in TRUNCATED_SOURCES:  # the keep sampling mask's renormalisation term -log S
        frame["mean -log S"] = ((-lab.delta * m).sum(-1) / m.sum(-1).clamp(min=1)).tolist()
    names = tuple(_label(c) for c in rules)
    for name, corr in zip(names, rules, strict=True):
        dropped = ((corr.masked | (m & ~corr.counted)) & m).sum(-1).tolist()
        lengths = m.sum(-1).tolist()
        frame[name] = [_cell(d, n) for d, n in zip(dropped, lengths, strict=True)]
    return SequenceLab(replace(lab, corrections=rules, results=results, table=table), frame, names)
