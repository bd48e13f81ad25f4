"""What every dialect shares: the conventions record, the notes, the KL and controller helpers.

Each dialect module (``roll``, ``verl``, ``openrlhf``, ``trl``) composes the shared stage
primitives in its own order and returns a ``Trace`` through ``make_trace``; the helpers here
hold the parts that read the same in all four (the ``viz_`` overrides, the zero-length and
missing-log-prob notes, the adaptive controller applied once) and the translation of the
sidebar's generic knobs (beta, gamma, lam, clip, ...) into a dialect's own keys.

Edge cases every dialect shares (defined behaviour, never a silent NaN; ``run`` also rejects
any non-finite result):
- zero-length response (all-zero mask row): its score still counts in group statistics, but it
  has no token to land on: advantages 0, noted.
- missing logprobs: KL 0 everywhere (noted).
- all-equal group: advantage exactly 0 (the group mean is computed with a refinement pass).

What roll-viz simplifies against the real recipes: one step, one domain, no PPO update (so the
KL loss uses the rollout log-probs), no dynamic sampling or length penalties; missing log-probs
mean policy == reference (KL 0); the adaptive controller is applied once to this batch with
n_steps = batch size (OpenRLHF updates it after the train step from the training KL).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask
from roll_viz.core.pipeline.kl import next_beta, observed_kl, token_kl
from roll_viz.core.records import Batch, Trace

#: Canonical KL estimator names, in the order the pages list them.
CANONICAL_KL = ("k1", "abs", "k2", "k3")

#: The roll-viz extension keys every dialect accepts (None = the framework's own constant).
VIZ_DEFAULTS: dict[str, Any] = {"viz_std_ddof": None, "viz_whiten_ddof": None, "viz_eps": None}
VIZ_CHOICES: dict[str, tuple] = {"viz_std_ddof": (None, 0, 1), "viz_whiten_ddof": (None, 0, 1)}
VIZ_HELP: dict[str, str] = {
    "viz_std_ddof": "roll-viz extension, not a framework option: ddof of the response-level "
    "group/batch std (1 = unbiased like every framework, 0 = biased); None keeps the framework's.",
    "viz_whiten_ddof": "roll-viz extension, not a framework option: ddof of the token-level "
    "advantage whitening variance; None keeps the framework's (OpenRLHF 0, others 1).",
    "viz_eps": "roll-viz extension, not a framework option: eps added to the std before dividing; "
    "None keeps the framework's (ROLL/verl 1e-6, OpenRLHF 1e-9, TRL 1e-4).",
}

#: Generic estimator recipes, in the order the pages list them (each dialect's ``RECIPES``
#: gives its closest settings for the ones it can run).
RECIPE_NAMES = (
    "grpo",
    "dr_grpo (no std)",
    "liteppo (group mean, batch std)",
    "rloo",
    "reinforce++",
    "reinforce++ baseline",
    "gae",
)

#: The generic knobs of the sidebar (names of every dialect's ``ALIASES``).
GENERIC_KNOBS = ("estimator", "gamma", "lam", "beta", "kl_estimator", "kl_in_reward", "clip")
GENERIC_KNOBS += ("whiten",)


def kl_names(kl_canon: Mapping[str, str]) -> dict[str, str | None]:
    """Canonical KL name -> a dialect's own (its first name for it; None: it has none).

    Args:
        kl_canon: the dialect's own KL names -> canonical, preferred name first.
    """
    out: dict[str, str | None] = dict.fromkeys(CANONICAL_KL)
    for own, canonical in kl_canon.items():
        if out[canonical] is None:
            out[canonical] = own
    return out


def num(x: float) -> str:
    """Compact number for notes (``:g`` without exponent padding): 1e-06 -> 1e-6, 0.0001, 0.2."""
    return re.sub(r"e([+-])0(\d)", r"e\1\2", f"{x:g}")


class Conventions:
    """The framework's constants with the viz_ overrides applied, plus notes about overrides."""

    def __init__(self, cfg: dict[str, Any], std_ddof: int, eps: float, whiten_ddof: int | None):
        self.std_ddof = std_ddof if cfg["viz_std_ddof"] is None else int(cfg["viz_std_ddof"])
        self.eps = eps if cfg["viz_eps"] is None else float(cfg["viz_eps"])
        self.whiten_ddof = whiten_ddof
        if whiten_ddof is not None and cfg["viz_whiten_ddof"] is not None:
            self.whiten_ddof = int(cfg["viz_whiten_ddof"])
        self.notes: list[str] = []
        if self.std_ddof != std_ddof:
            self.notes.append(
                f"roll-viz override viz_std_ddof={self.std_ddof}: "
                f"{'biased' if self.std_ddof == 0 else 'unbiased'} reward std "
                f"(the framework uses ddof={std_ddof})"
            )
        if self.eps != eps:
            self.notes.append(
                f"roll-viz override viz_eps={num(self.eps)} (the framework uses {num(eps)})"
            )
        if whiten_ddof is None and cfg["viz_whiten_ddof"] is not None:
            self.notes.append("viz_whiten_ddof has no effect: this dialect never whitens")
        elif self.whiten_ddof != whiten_ddof:
            self.notes.append(
                f"roll-viz override viz_whiten_ddof={self.whiten_ddof} "
                f"(the framework uses ddof={whiten_ddof})"
            )

    @staticmethod
    def ddof_word(ddof: int) -> str:
        """'unbiased (n-1)' or 'biased (n)'."""
        return "unbiased (n-1)" if ddof == 1 else "biased (n)"


def base_notes(batch: Batch, lengths: Tensor | None = None) -> list[str]:
    """The notes every dialect starts with: zero-length responses, missing log-probs.

    Args:
        batch: the validated batch.
        lengths: ``batch.response_mask.sum(-1)`` when the caller has it already (else computed).
    """
    notes = []
    if lengths is None:
        lengths = batch.response_mask.sum(-1)
    empty = torch.nonzero(lengths == 0).flatten().tolist()
    if empty:
        notes.append(
            f"zero-length response in sample(s) {empty}: the reward has no token to land on, "
            "advantages are 0 for those rows"
        )
    if batch.logprobs is None:
        notes.append("no logprobs/ref_logprobs given: KL taken as 0 (policy = reference)")
    return notes


def batch_kl(
    batch: Batch, estimator: str, clamp: float | None, log_ratio_clamp: float | None = None
) -> Tensor:
    """(B, T) token KL of the batch (zeros without log-probs)."""
    if batch.logprobs is None:
        return torch.zeros_like(batch.response_mask)
    return token_kl(
        batch.logprobs, batch.ref_logprobs, batch.response_mask, estimator, clamp, log_ratio_clamp
    )


def controller(beta: float, kl: Tensor, mask: Tensor, target, horizon, notes: list) -> float:
    """Next beta from the adaptive controller (fixed when target is None)."""
    if target is None:
        return beta
    observed = observed_kl(kl, mask)
    nxt = next_beta(beta, observed, target, horizon, n_steps=kl.shape[0])
    notes.append(
        f"adaptive KL controller: beta {num(beta)} -> {nxt:.8g} (observed KL {observed:.6g}, "
        f"target {num(target)}, n_steps = batch size {kl.shape[0]}, horizon {num(horizon)})"
    )
    return nxt


def make_trace(
    framework: str, cfg: dict, batch: Batch, masked: tuple[Tensor, ...] = (), **fields
) -> Trace:
    """The Trace of one dialect's run: token tensors masked, notes frozen, config sorted.

    The (B, T) fields come out as ``apply_mask(field, batch.response_mask)``. ``masked`` holds
    tensors the dialect got from a stage as ``apply_mask(x, batch.response_mask)`` (float mask)
    and passes on untouched (``token_rewards``' output, a ``MASKED_OUTPUTS`` estimator's): a
    field that is one of them is already what masking makes of it and is not masked again. A
    field whose storage no other tensor reads (not the batch's, not another field's) is one the
    run built for itself: it is masked in place (``_mask_in_place``), which spares a (B, T)
    allocation. A field passed twice (returns = advantages) is masked once and stays shared.
    """
    mask = batch.response_mask
    keys = ("kl", "token_rewards", "advantages", "returns")
    distinct = {id(fields[key]): fields[key] for key in keys}
    others = [getattr(batch, name) for name in _BATCH_TENSORS]
    others += list((batch.reward_components or {}).values())
    others += [v for k, v in fields.items() if k not in keys]
    owners: dict[int, int] = {}  # storage -> how many distinct tensors read it
    for tensor in [*others, *distinct.values()]:
        if isinstance(tensor, Tensor):
            ptr = tensor.untyped_storage().data_ptr()
            owners[ptr] = owners.get(ptr, 0) + 1
    exact = {id(value) for value in masked} if mask.is_floating_point() else set()
    for key_id, value in distinct.items():
        if key_id in exact:
            continue
        sole = owners[value.untyped_storage().data_ptr()] == 1
        distinct[key_id] = _mask_in_place(value, mask) if sole else apply_mask(value, mask)
    for key in keys:
        fields[key] = distinct[id(fields[key])]
    fields["notes"] = tuple(fields["notes"])
    return Trace(
        framework=framework, config=tuple(sorted(cfg.items())), scores=batch.scores, **fields
    )


#: The Batch fields that hold tensors (reward_components holds a dict of them).
_BATCH_TENSORS = (
    "scores",
    "response_mask",
    "group_ids",
    "logprobs",
    "ref_logprobs",
    "values",
    "baseline_scores",
    "sum_pi_squared",
)


def _mask_in_place(x: Tensor, mask: Tensor) -> Tensor:
    """``apply_mask(x, mask)`` written into ``x`` when ``x`` can take it, else a new tensor.

    In place only for a plain tensor that owns its storage (not a view: ``_base`` is None),
    contiguous, of the mask's float dtype and shape, outside autograd; ``make_trace`` calls it
    only for a tensor whose storage no other tensor of the batch or the Trace reads.
    The values are the same either way: ``0 + x * mask`` in one fused pass.
    """
    if (
        x._base is None
        and x.is_contiguous()
        and x.dtype == mask.dtype
        and mask.is_floating_point()
        and x.shape == mask.shape
        and not x.requires_grad
    ):
        return torch.addcmul(x.new_zeros(()), x, mask, out=x)
    return apply_mask(x, mask)


# ------------------------------------------------------------- generic knobs <-> native keys


def to_widget(generic: str, value: Any) -> Any:
    """A dialect config value -> the generic widget's value (clip 0 = off, a range -> its c)."""
    if generic in {"beta", "gamma", "lam"}:
        return float(value) if value is not None else (0.0 if generic == "beta" else 1.0)
    if generic == "clip":
        if value is None:
            return 0.0
        if isinstance(value, list | tuple):
            return float(max(abs(float(v)) for v in value))
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


def from_widget(generic: str, value: Any, default: Any) -> Any:
    """A generic widget's value -> the dialect config value (shape of the default kept)."""
    if generic == "clip":
        if not value:
            return None
        if isinstance(default, list | tuple):
            return (-float(value), float(value))
        return float(value)
    if generic in {"beta", "gamma", "lam"}:
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


def widgets_to_native(
    defaults: Mapping[str, Any],
    aliases: Mapping[str, str | None],
    choices: Mapping[str, tuple],
    generic: Mapping[str, Any],
) -> dict[str, Any]:
    """The shipped defaults overlaid with the generic widget values the dialect accepts.

    A generic value the dialect does not accept (a knob it has no key for, an estimator or KL
    name of another dialect) is skipped, so the same sidebar drives every dialect.
    """
    config = dict(defaults)
    for name, value in generic.items():
        key = aliases.get(name)
        if key is None:
            continue
        converted = from_widget(name, value, defaults.get(key))
        if key in choices and converted not in choices[key]:
            continue
        config[key] = converted
    return config


def widgets_from_native(
    defaults: Mapping[str, Any], aliases: Mapping[str, str | None]
) -> dict[str, Any]:
    """Generic widget values that reproduce a dialect config (its shipped defaults by default)."""
    out: dict[str, Any] = {}
    for generic, key in aliases.items():
        value = defaults.get(key) if key is not None else None
        out[generic] = to_widget(generic, value)
    return out


def canonical_to_native(
    aliases: Mapping[str, str | None],
    kl_names: Mapping[str, str | None],
    canonical: Mapping[str, object],
    *,
    kl_in_reward_key_inverted: str | None = None,
    clip_as_range: bool = False,
) -> tuple[dict, tuple[str, ...]]:
    """Canonical settings (KL names k1/abs/k2/k3) -> one dialect's keys, and what it lacks.

    Args:
        aliases: the dialect's ``ALIASES``.
        kl_names: the dialect's ``KL_NAMES`` (canonical -> own name, None = has none).
        canonical: beta, gamma, lam, kl_estimator (canonical), kl_in_reward, clip, whiten.
        kl_in_reward_key_inverted: a key that means "KL NOT in the reward" (OpenRLHF
            ``use_loss``); ``kl_in_reward`` then sets it to the negation.
        clip_as_range: a clip c becomes the range (-c, c).

    Returns:
        (config in the dialect's keys, canonical names the dialect has no key for).
    """
    config: dict[str, object] = {}
    ignored: list[str] = []
    for name, value in canonical.items():
        key = aliases.get(name)
        if name == "kl_in_reward" and kl_in_reward_key_inverted is not None:
            config[kl_in_reward_key_inverted] = not value
            continue
        if name == "kl_estimator":
            own = kl_names.get(str(value))
            if own is None or key is None:
                ignored.append(f"kl_estimator={value}")
            else:
                config[key] = own
            continue
        if key is None:
            if value not in (None, False, 1.0) or name in ("beta",):
                ignored.append(name)
            continue
        if name == "clip" and value is not None and clip_as_range:
            value = (-float(value), float(value))
        config[key] = value
    return config, tuple(ignored)


def refuse_row_inputs(sample_mask: Tensor | None, resample: Tensor | None) -> None:
    """The row-level loss inputs one framework alone reads: any other refuses them."""
    if sample_mask is not None:
        raise ValueError("sample_mask: only ROLL has a sample-level mask (sample_level_mask)")
    if resample is not None:
        raise ValueError("resample: only verl resamples the batch's rows (use_pf_ppo)")


def inputs_as_given(
    cfg: Mapping[str, Any],
    notes: list[str],
    inputs: Any,
    sample_mask: Tensor | None,
    resample: Tensor | None,
) -> tuple[Any, dict[str, float]]:
    """``rewrite_loss_inputs`` of a trainer that hands its loss the inputs as they are."""
    refuse_row_inputs(sample_mask, resample)
    return inputs, {}
