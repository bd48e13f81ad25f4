"""TRL's own GRPO loss, called live: ``GRPOTrainer._compute_loss`` on a stand-in trainer.

The stand-in ``self`` carries the attributes ``GRPOTrainer.__init__`` sets from a real
``GRPOConfig`` (defaults of the installed trl, then the options), a single-process accelerator,
and a ``_get_per_token_logps_and_entropies`` that returns the chosen log-probs and entropies
instead of running a model. The vLLM importance-sampling ratio is computed by the block of
``GRPOTrainer._generate_and_score_completions`` that computes it, read from the installed
source and executed on the chosen tensors (``vllm_is_ratio``). Used by
``tests/peers/make_vectors.py`` and, live, by ``tests/core/test_peer_vectors.py``.
"""

from __future__ import annotations

import copy
import inspect
import math
import tempfile
import textwrap
import warnings
from collections import defaultdict
from functools import cache
from types import SimpleNamespace

import torch

PREFIX = "GRPOConfig."
#: How TRL reads each name: a GRPOConfig field (all of them here), set on ``self`` as well.
SELF_FIELDS = (
    "loss_type",
    "beta",
    "importance_sampling_level",
    "top_entropy_quantile",
    "off_policy_mask_threshold",
    "use_vllm",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "max_completion_length",
    "entropy_coef",
    "use_adaptive_entropy",
)


@cache
def _base_config():
    """The installed trl's GRPOConfig defaults (built once; 4 CPU s of imports)."""
    from trl import GRPOConfig

    with warnings.catch_warnings():  # transformers' deprecation notes about unused fields
        warnings.simplefilter("ignore", FutureWarning)
        return GRPOConfig(output_dir=tempfile.gettempdir(), report_to=[], use_cpu=True)


class _Accelerator:
    """One process: gather / reduce / pad are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        """Identity."""
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        """Identity."""
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        """Identity."""
        return x


def config(opts: dict):
    """A GRPOConfig copy with ``opts`` (``GRPOConfig.<field>`` keys) set."""
    args = copy.copy(_base_config())
    for key, value in opts.items():
        assert key.startswith(PREFIX), key
        field = key[len(PREFIX) :]
        assert hasattr(args, field), field
        setattr(args, field, value)
    return args


@cache
def _is_ratio_source() -> str:
    """The vLLM IS-ratio block of ``_generate_and_score_completions``, dedented."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    lines = src.splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if "if self.use_vllm and self.vllm_importance_sampling_correction:" in line
    )
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (
        not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent
    ):
        end += 1
    return textwrap.dedent("\n".join(lines[start:end]))


def vllm_is_ratio(stand_in, old, mu, mask) -> torch.Tensor:
    """TRL's ``importance_sampling_ratio`` for sampler log-probs ``mu`` (its own code)."""
    scope = {
        "self": stand_in,
        "old_per_token_logps": old,
        "sampling_per_token_logps": mu,
        "completion_mask": mask,
        "tool_mask": None,
        "torch": torch,
        "math": math,
    }
    exec(compile(_is_ratio_source(), "grpo_trainer.py(is-ratio block)", "exec"), scope)
    return scope["vllm_importance_sampling_ratio"]


def stand_in(args, lp: torch.Tensor, entropy: torch.Tensor):
    """A GRPOTrainer stand-in for ``_compute_loss``: attributes as ``__init__`` sets them."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    s = SimpleNamespace(args=args)
    for f in SELF_FIELDS:
        setattr(s, f, getattr(args, f))
    s.epsilon_low = args.epsilon
    s.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    s._entropy_bonus_enabled = s.entropy_coef != 0.0 or s.use_adaptive_entropy
    s._last_world_entropy = float("inf")  # __init__: the adaptive controller's first step
    s._entropy_window_stats = None
    s.aux_loss_enabled = False
    s.current_gradient_accumulation_steps = 1
    s.model = SimpleNamespace(training=True)
    s.accelerator = _Accelerator()
    s._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    s._get_per_token_logps_and_entropies = lambda *a, **k: (lp, entropy, None)
    s.get_high_entropy_mask = lambda e, m, t: GRPOTrainer.get_high_entropy_mask(s, e, m, t)
    s.get_off_policy_mask = GRPOTrainer.get_off_policy_mask
    s.get_gamma_weights = GRPOTrainer.get_gamma_weights
    return s


def trl_loss(case, lp: torch.Tensor, opts: dict, steps: int = 1):
    """(loss, metrics) of ``GRPOTrainer._compute_loss`` on a case (row advantages (B,)).

    ``GRPOConfig.use_vllm: True`` makes the case's ``mu`` the sampler log-probs: their ratio
    comes from TRL's own block (``vllm_is_ratio``) and goes in ``inputs`` as TRL's generation
    step puts it there.
    """
    from trl.trainer.grpo_trainer import GRPOTrainer

    args = config(opts)
    s = stand_in(args, lp, case.entropy)
    mask = case.mask
    B, T = mask.shape
    adv_rows = case.adv.sum(-1) / mask.sum(-1).clamp(min=1)  # (B,): the row case is constant
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv_rows,
        "old_per_token_logps": case.old,
        "ref_per_token_logps": case.ref,
        "num_items_in_batch": mask.sum(),
    }
    if args.use_vllm:
        inputs["sampling_per_token_logps"] = case.mu
        if args.vllm_importance_sampling_correction:
            inputs["importance_sampling_ratio"] = vllm_is_ratio(s, case.old, case.mu, mask)
    for _ in range(steps - 1):  # earlier optimizer steps on the same batch (adaptive entropy)
        GRPOTrainer._compute_loss(s, None, inputs)
        s._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    loss = GRPOTrainer._compute_loss(s, None, inputs)
    metrics = {k: v[-1] for k, v in s._metrics["train"].items() if v}
    return loss, metrics


@cache
def _advantage_source() -> str:
    """The advantage block of ``_generate_and_score_completions`` (aggregation, baseline,
    scaling, NaN handling), dedented."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    lines = inspect.getsource(GRPOTrainer._generate_and_score_completions).splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if 'if self.multi_objective_aggregation == "sum_then_normalize":' in line
    )
    end = next(
        i
        for i in range(start, len(lines))
        if "advantages = torch.nan_to_num(advantages" in lines[i]
    )
    return textwrap.dedent("\n".join(lines[start : end + 1]))


def trl_advantages(rewards_per_func: torch.Tensor, num_generations: int, opts: dict):
    """TRL's (B,) advantages for (B, K) rewards of K reward functions, groups consecutive."""
    import trl.trainer.grpo_trainer as grpo

    args = config(opts)
    K = rewards_per_func.shape[1]
    weights = args.reward_weights if args.reward_weights is not None else [1.0] * K
    s = SimpleNamespace(
        multi_objective_aggregation=args.multi_objective_aggregation,
        scale_rewards=args.scale_rewards,
        reward_weights=torch.tensor(weights, dtype=rewards_per_func.dtype),
        reward_funcs=[None] * K,
    )
    scope = dict(vars(grpo))
    scope.update(
        self=s,
        rewards_per_func=rewards_per_func,
        num_generations=num_generations,
        unscorable_mask=torch.isnan(rewards_per_func).all(dim=1),
        device="cpu",
    )
    exec(compile(_advantage_source(), "grpo_trainer.py(advantage block)", "exec"), scope)
    return scope["advantages"]
