"""The recipes of record: "GRPO as published (2024)" and the frameworks of record of 2026.

Plain data: each recipe in words here (``recipe``, ``sources``, ``std_level``); each dialect's
record says it in its own keys (``Dialect.ERAS[key]``, kept in ``dialects/<framework>_eras.py``:
the native config, reward stage and loss together, that ``resolve_config`` accepts, and notes
where the dialect cannot say a setting or says it differently). Nothing is faked: a setting a
dialect lacks stays at the dialect's nearest native option and the note says what differs.

The frameworks of record dropped the std: prime-rl and Tinker (their code) and DeepSeek-V3.2
(secondary summaries: no trainer is published) subtract the group mean alone; ScaleRL keeps a
batch std. "Defaults of 2026", roll-viz's one preset before, is an alias of the closest record,
ScaleRL / Olmo 3 (``ALIASES``), so links, run commands and code that name it keep working; the
group std of GRPO, roll-viz's default, is now the minority choice (``std_note``).

Zero-variance filtering is a data-loader step in every framework (verl
``algorithm.filter_groups``, OpenRLHF ``--algo.dynamic_filtering_enable``, ROLL
``query_filter_config``), outside the calculator's config: ``filter_zero_variance`` says the
recipe drops such groups before batching (exact equality of the rewards), which the analysis
applies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from roll_viz.core.pipeline import dialects

#: where the divisor of A = (r - mean) / std comes from, in a recipe's words
STD_LEVELS = ("group", "batch", "none")


@dataclass(frozen=True)
class EraPreset:
    """One recipe of record; each dialect's record says it in its own keys (``Dialect.ERAS``).

    Attributes:
        key: short name ("grpo_2024", "prime_rl", ...), the key of every ``Dialect.ERAS``.
        label: display name.
        short: column tag in tables ("2024", "prime-rl", ...), unique among the records.
        recipe: the settings in words, one per item.
        sources: code, papers and threads the recipe comes from (secondary ones said so).
        std_level: where the advantage's divisor comes from ("group", "batch" or "none").
        filter_zero_variance: drop the groups whose rewards are all equal before batching.
    """

    key: str
    label: str
    short: str
    recipe: tuple[str, ...]
    sources: str
    std_level: str
    filter_zero_variance: bool = False

    @property
    def configs(self) -> MappingProxyType:
        """Dialect -> native config (its own keys; reward stage and loss together)."""
        return MappingProxyType(
            {fw: d.ERAS[self.key].config for fw, d in dialects.DIALECTS.items()}
        )

    @property
    def notes(self) -> MappingProxyType:
        """Dialect -> what it cannot express of the recipe or expresses differently."""
        return MappingProxyType({fw: d.ERAS[self.key].notes for fw, d in dialects.DIALECTS.items()})

    def config(self, framework: str) -> dict[str, Any]:
        """The recipe's native config for one dialect (a copy).

        Raises:
            ValueError: an unknown dialect.
        """
        return dict(dialects.get(framework).ERAS[self.key].config)

    def dialect_notes(self, framework: str) -> tuple[str, ...]:
        """What this dialect cannot say of the recipe (empty when it says all of it)."""
        return tuple(dialects.get(framework).ERAS[self.key].notes)


GRPO_2024 = EraPreset(
    key="grpo_2024",
    label="GRPO as published (2024)",
    short="2024",
    recipe=(
        "group mean and group std",
        "KL in the loss: beta 0.04, k3",
        "seq-mean-token-mean",
        "clip 0.2 on both sides",
    ),
    sources="Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300)",
    std_level="group",
)

PRIME_RL = EraPreset(
    key="prime_rl",
    label="prime-rl",
    short="prime-rl",
    recipe=(
        "reward minus the group mean, no std",
        "no KL to a reference",
        "token mean over the batch's loss tokens",
        "DPPO mask: a token whose p - p_mu leaves [-0.2, 0.2] on its advantage's side is "
        "dropped; ratio pi / mu; 1e-3 x log^2(pi / mu) to the sampler",
        "zero-advantage tokens filtered",
    ),
    sources="prime-rl's code (PrimeIntellect-ai/prime-rl, Aug 2026): orchestrator/algo/grpo.py, "
    "trainer/rl/loss.py default_loss_fn and compute_loss, DefaultLossConfig (dppo_mask_low / "
    "high 0.2, adv_tau 1, kl_tau 1e-3), TrainConfig.filter_zero_advantages (true)",
    std_level="none",
    filter_zero_variance=True,
)

TINKER = EraPreset(
    key="tinker",
    label="Tinker",
    short="Tinker",
    recipe=(
        "reward minus the group mean, no std",
        "no KL (kl_penalty_coef 0)",
        "importance_sampling loss: -sum of (pi / mu) x A over every token, no clip, no division",
        "zero-variance groups kept (remove_constant_reward_groups false)",
    ),
    sources="tinker-cookbook's code (thinking-machines-lab, Aug 2026): rl/data_processing.py "
    "compute_advantages, rl/train.py Config (loss_fn importance_sampling, kl_penalty_coef 0, "
    "remove_constant_reward_groups false); issue #579 / PR #589 (mean-centred, no std, after "
    "Dr. GRPO)",
    std_level="none",
)

DEEPSEEK_V32 = EraPreset(
    key="deepseek_v32",
    label="DeepSeek-V3.2",
    short="V3.2",
    recipe=(
        "reward minus the group mean, no std",
        "KL in the loss: k3 times pi / pi_old (the unbiased estimate); beta 0.04 here, "
        "DeepSeekMath's (the summaries give no value)",
        "seq-mean-token-mean (GRPO's objective)",
        "clip 0.2 on both sides (DeepSeekMath's; the summaries give none)",
        "off-policy sequence masking, keep routing, keep sampling mask",
    ),
    sources="DeepSeek-V3.2 (arXiv 2512.02556) as secondary summaries report it (TRL issue "
    "#4637, blog summaries): DeepSeek publishes no trainer code",
    std_level="none",
)

SCALERL_OLMO3 = EraPreset(
    key="scalerl_olmo3",
    label="ScaleRL / Olmo 3",
    short="ScaleRL",
    recipe=(
        "no KL",
        "token mean over the batch",
        "clip-higher: 0.2 below, 0.28 above (DAPO, Olmo 3; ScaleRL's own loss is CISPO)",
        "zero-variance groups filtered",
        "group mean, batch std (ScaleRL; Olmo 3 drops the std: reward minus the group mean)",
    ),
    sources="ScaleRL (arXiv 2510.13786), Olmo 3 (arXiv 2512.13961; rlvrbook ch. 8), DAPO "
    "(arXiv 2503.14476), Dr. GRPO (arXiv 2503.20783)",
    std_level="batch",
    filter_zero_variance=True,
)

#: Old key -> the record it names now: "defaults of 2026" is the closest record, ScaleRL / Olmo 3.
ALIASES: MappingProxyType = MappingProxyType({"defaults_2026": SCALERL_OLMO3.key})
#: The record "defaults of 2026" names (the Training page's recorded pair, ``--era``).
DEFAULTS_2026 = SCALERL_OLMO3


class RecipeBook(Mapping):
    """The recipes of record by key, oldest first; an alias (``ALIASES``) looks up its record.

    Iterating, ``len`` and ``items`` see the records only; ``book["defaults_2026"]`` is the
    ScaleRL / Olmo 3 record, so a name from an older link or run command still resolves.
    """

    def __init__(self, records: tuple[EraPreset, ...], aliases: Mapping[str, str]) -> None:
        self._records = MappingProxyType({r.key: r for r in records})
        self._aliases = aliases

    def __getitem__(self, key: str) -> EraPreset:
        return self._records[self._aliases.get(key, key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


#: The recipes of record by key (GRPO as published first, then the frameworks of record).
ERAS = RecipeBook((GRPO_2024, PRIME_RL, TINKER, DEEPSEEK_V32, SCALERL_OLMO3), ALIASES)


#: Said beside every comparison of the recipes (field-2026-b section 4, "Drop the std").
STD_MINORITY = (
    "The std is now the minority choice: Tinker, prime-rl, DeepSeek-V3.2 and Olmo 3 subtract "
    "the group mean alone, ScaleRL keeps a batch std, and only GRPO as published divides by the "
    "group std, as roll-viz's default (ROLL grpo) does."
)


def std_note(keys: tuple[str, ...] | None = None) -> str:
    """How the picked recipes divide the advantage, then ``STD_MINORITY``.

    Args:
        keys: recipes to count (default every record; aliases resolve, repeats count once).
    """
    picked = {ERAS[k].key: ERAS[k] for k in (tuple(ERAS) if keys is None else keys)}
    words = {"none": "no std", "batch": "the batch std", "group": "the group std"}
    parts = []
    for level in ("none", "batch", "group"):
        names = [r.label for r in picked.values() if r.std_level == level]
        if names:
            parts.append(f"{len(names)} with {words[level]} ({', '.join(names)})")
    return f"Of these {len(picked)} recipes: " + "; ".join(parts) + ". " + STD_MINORITY


def check_eras() -> None:
    """Every dialect says every record and accepts its config; every alias names a record.

    Raises:
        ValueError: naming the dialect, recipe or alias at fault.
    """
    for alias, key in ALIASES.items():
        if key not in ERAS or alias in tuple(ERAS):
            raise ValueError(f"alias {alias!r} must name a record, not {key!r}")
    shorts = [e.short for e in ERAS.values()]
    if len(set(shorts)) != len(shorts) or any(e.std_level not in STD_LEVELS for e in ERAS.values()):
        raise ValueError(f"tags must be unique and std levels in {STD_LEVELS}")
    for fw, dialect in dialects.DIALECTS.items():
        if set(dialect.ERAS) != set(ERAS):
            raise ValueError(f"{fw}: ERAS has {sorted(dialect.ERAS)}, not {sorted(ERAS)}")
        for era in ERAS.values():
            dialects.resolve_config(fw, era.config(fw))
