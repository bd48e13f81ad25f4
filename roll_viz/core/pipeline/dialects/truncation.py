"""Each framework's options for a truncated answer, under its own keys.

A truncated answer hit the generation cap without EOS. Four policies ship (field-2026-b.md §4,
"Truncation policy as a reward-stage choice"); ``OPTIONS[framework][policy]`` is how that
framework asks for it, or None where it has no option for it (then the reward function has to do
it). Read in each framework's code:

- ROLL (``rlvr_config.py`` ``max_len_mask: bool = False``; ``rlvr_pipeline.py``
  ``get_sample_level_mask``): drops from the loss (``final_response_mask``) every sample whose
  length equals the responses' width, an answer that ends with EOS exactly there included;
  their scores still enter the group normalisation. The overlong penalty is left to the
  reward worker.
- verl (``verl/workers/reward_manager/dapo.py``): the DAPO reward manager adds
  ``min(-(L - (max_resp_len - len)) / len * penalty_factor, 0)``; off by default
  (``enable: False``), DAPO's recipe uses len 4096 of max_resp_len 20480 and penalty_factor 1.
  Older scripts spell the prefix ``reward_model.reward_kwargs``.
- OpenRLHF (``apply_length_penalties``): ``--reward.overlong_buffer_len`` and
  ``--reward.overlong_penalty_factor`` (DAPO's penalty, the excess clamped at the buffer);
  ``--reward.stop_properly_penalty_coef`` multiplies a truncated answer's reward (0 = zero it;
  vLLM's finish reason "length").
- TRL 1.16 (``GRPOTrainer._generate_and_score_completions``): ``mask_truncated_completions``
  zeroes the completion mask of rows whose last id is neither EOS nor pad, after the rewards
  and before the loss (the advantages are computed with them); ``trl.rewards.
  get_soft_overlong_punishment(max_completion_len, soft_punish_cache)`` is DAPO's penalty with
  factor 1, added as one more reward function.
"""

from __future__ import annotations

#: policy -> its words on the page
POLICY_LABELS: dict[str, str] = {
    "zero": "zero reward",
    "keep": "keep the score",
    "soft": "soft overlong penalty",
    "mask": "masked from the loss",
}

_DEFAULT = "the default (no option)"

#: framework -> policy -> the framework's own option (None: it has none)
OPTIONS: dict[str, dict[str, str | None]] = {
    "roll": {
        "zero": None,
        "keep": _DEFAULT,
        "soft": None,
        "mask": "max_len_mask: true",
    },
    "verl": {
        "zero": None,
        "keep": _DEFAULT,
        "soft": "reward.reward_manager.name=dapo with reward.reward_kwargs.overlong_buffer_cfg"
        ".enable=True, .len, .penalty_factor (and reward.reward_kwargs.max_resp_len)",
        "mask": None,
    },
    "openrlhf": {
        "zero": "--reward.stop_properly_penalty_coef 0",
        "keep": _DEFAULT,
        "soft": "--reward.overlong_buffer_len, --reward.overlong_penalty_factor",
        "mask": None,
    },
    "trl": {
        "zero": None,
        "keep": _DEFAULT,
        "soft": "reward_funcs=[..., get_soft_overlong_punishment(max_completion_len, "
        "soft_punish_cache)] (factor 1)",
        "mask": "mask_truncated_completions=True",
    },
}
