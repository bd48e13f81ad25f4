"""The loss options and behaviour samplers the Update and Training pages offer, in one table.

``LOSS_OPTIONS``: per framework, the loss options that read more than log-probs (each dialect
record's ``LOSS_OPTIONS``), under the name shown and put in links (the framework's own key and
value), mapped to the loss keys they set.
ROLL ``topr`` reads the scores, ``difficulty_loss_weight`` each sample's difficulty, the
corrections (verl ``loss_mode: bypass_mode``, OpenRLHF ``is_correction_*``, TRL
``vllm_importance_sampling_*``) the sampler's log-probs mu. ``DEFAULT_OPTION`` keeps every
loss key at the framework's shipped default.

``SAMPLERS``: who draws the training tokens (the behaviour policy mu). ``fp32`` is the trainer's
own float32 path (mu = pi_old exactly); ``bf16`` / ``int8`` decode with those weights (the
adapter merged in); ``top_p`` draws from the nucleus and reports its processed log-probs. A
top-k sampler is not offered for training: the decode loop draws with top-p only (the Update
page scores top-k processed log-probs on an existing batch). ``lm.behaviour_sampler`` draws a
training step with them; the Update page scores an existing batch with the ``lm.behaviour``
sources of the same names.
"""

from __future__ import annotations

from typing import Any

from roll_viz.core.pipeline import dialects

#: per framework, the options its dialect record offers (``Dialect.LOSS_OPTIONS``)
LOSS_OPTIONS: dict[str, dict[str, dict[str, Any]]] = {
    name: dialect.LOSS_OPTIONS for name, dialect in dialects.DIALECTS.items()
}
DEFAULT_OPTION = "shipped defaults"
#: every option a link may carry (the ones of another framework fall back to the default)
OPTION_IDS = (DEFAULT_OPTION, *sorted({k for opts in LOSS_OPTIONS.values() for k in opts}))

#: the samplers a training run may draw its tokens with, the trainer's own path first
SAMPLERS = ("fp32", "bf16", "int8", "top_p")
SAMPLER_LABELS = {
    "fp32": "fp32 = the trainer (mu = pi_old)",
    "bf16": "bf16 decode (adapter merged)",
    "int8": "int8 decode (adapter merged, CPU)",
    "top_p": "top-p 0.9 draws, processed log-probs",
}
#: the nucleus of the processed sampler (the run's own top_p when smaller)
SAMPLER_TOP_P = 0.9


def options_for(framework: str) -> dict[str, dict[str, Any]]:
    """The loss options offered for one framework (its record's), the shipped defaults first."""
    dialect = dialects.DIALECTS.get(framework)
    return {DEFAULT_OPTION: {}, **(dialect.LOSS_OPTIONS if dialect else {})}


def option_keys(framework: str, option: str) -> dict[str, Any]:
    """The loss keys ``option`` sets for ``framework`` (a copy; {} for the defaults).

    Raises:
        ValueError: the option is not offered for that framework.
    """
    offered = options_for(framework)
    if option not in offered:
        label = dialects.get(framework).LABEL if framework in dialects.DIALECTS else framework
        raise ValueError(f"loss option {option!r} is not one of {label}'s: {sorted(offered)}")
    return dict(offered[option])
