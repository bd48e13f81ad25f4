"""Presets of an era: "GRPO as published (2024)" and "defaults of 2026", as each dialect says them.

Plain data: the era's recipe in words here; each dialect's record says it in its own keys
(``Dialect.ERAS[key]``: the native config, reward stage and loss together, that
``resolve_config`` accepts, and notes where the dialect cannot say a setting or says it
differently). Nothing is faked: a setting a dialect lacks stays at the dialect's nearest native
option and the note says what differs.

- **GRPO as published** (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): group mean and group
  std, the KL in the loss (beta 0.04, the k3 estimator), each answer's token mean averaged over
  answers (seq-mean-token-mean), PPO clip 0.2 on both sides.
- **Defaults of 2026** (DAPO arXiv 2503.14476, Dr. GRPO arXiv 2503.20783, ScaleRL arXiv
  2510.13786, Olmo 3 arXiv 2512.13961): no KL, token mean over the batch, clip-higher (0.2 below,
  0.28 above), zero-variance groups filtered out (dynamic sampling), group mean with the batch's
  std (ScaleRL's batch-level advantage normalisation, LitePPO).

Zero-variance filtering is a data-loader step in every framework (verl
``algorithm.filter_groups``, OpenRLHF ``--algo.dynamic_filtering_enable``, ROLL
``query_filter_config``), outside the calculator's config: ``filter_zero_variance`` says the era
drops such groups before batching (exact equality of the rewards), which the analysis applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from roll_viz.core.pipeline import dialects


@dataclass(frozen=True)
class EraPreset:
    """One era's recipe; each dialect's record says it in its own keys (``Dialect.ERAS``).

    Attributes:
        key: short name ("grpo_2024", "defaults_2026"), the key of every ``Dialect.ERAS``.
        label: display name.
        short: column tag in tables ("2024", "2026").
        recipe: the settings in words, one per item.
        sources: papers / threads the recipe comes from.
        filter_zero_variance: drop the groups whose rewards are all equal before batching.
    """

    key: str
    label: str
    short: str
    recipe: tuple[str, ...]
    sources: str
    filter_zero_variance: bool = False

    @property
    def configs(self) -> MappingProxyType:
        """Dialect -> native config (its own keys; reward stage and loss together)."""
        return MappingProxyType(
            {fw: d.ERAS[self.key].config for fw, d in dialects.DIALECTS.items()}
        )

    @property
    def notes(self) -> MappingProxyType:
        """Dialect -> what it cannot express of the era or expresses differently."""
        return MappingProxyType({fw: d.ERAS[self.key].notes for fw, d in dialects.DIALECTS.items()})

    def config(self, framework: str) -> dict[str, Any]:
        """The era's native config for one dialect (a copy).

        Raises:
            ValueError: an unknown dialect.
        """
        return dict(dialects.get(framework).ERAS[self.key].config)

    def dialect_notes(self, framework: str) -> tuple[str, ...]:
        """What this dialect cannot say of the era's recipe (empty when it says all of it)."""
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
)

DEFAULTS_2026 = EraPreset(
    key="defaults_2026",
    label="Defaults of 2026",
    short="2026",
    recipe=(
        "no KL",
        "token mean over the batch",
        "clip-higher: 0.2 below, 0.28 above",
        "zero-variance groups filtered",
        "group mean, batch std",
    ),
    sources="DAPO (arXiv 2503.14476), Dr. GRPO (arXiv 2503.20783), ScaleRL (arXiv 2510.13786), "
    "Olmo 3 (arXiv 2512.13961)",
    filter_zero_variance=True,
)

#: The era presets by key, oldest first.
ERAS: MappingProxyType = MappingProxyType({e.key: e for e in (GRPO_2024, DEFAULTS_2026)})


def check_eras() -> None:
    """Every dialect says every era, and accepts its config (raises otherwise)."""
    for fw, dialect in dialects.DIALECTS.items():
        if set(dialect.ERAS) != set(ERAS):
            raise ValueError(f"{fw}: ERAS has {sorted(dialect.ERAS)}, not {sorted(ERAS)}")
        for era in ERAS.values():
            dialects.resolve_config(fw, era.config(fw))
