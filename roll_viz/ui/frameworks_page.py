"""Glue of the Frameworks page: the recipes of record, and what 2026 added in each framework.

``recipes_of_record()`` explains the frameworks of record as named recipes (``core.pipeline.eras``:
GRPO as published, prime-rl, Tinker, DeepSeek-V3.2, ScaleRL / Olmo 3, which "defaults of 2026" now
names), one row each, with the note that the std is now the minority choice; every batch page
diffs them on its own batch (the 'Recipes of record' switch, ``ui.era_compare``).
``additions_2026()`` draws one table (a row per addition, a column per framework, the key or
class as that framework spells it; "-" where it has none the calculator reads) and the links to
the pages that show each addition on the current batch. The names are the ones the calculator's
dialects and the recipes use (``core.pipeline.eras``, ``analysis.group_health``,
``core.pipeline.opd``).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from roll_viz import nav
from roll_viz.core.pipeline.eras import ALIASES, ERAS, STD_MINORITY
from roll_viz.ui.table_fit import table
from roll_viz.ui.widgets import page_link

#: (addition, roll-viz page key, ROLL, verl, OpenRLHF, TRL)
ADDITIONS: tuple[tuple[str, str, str, str, str, str], ...] = (
    (
        "Drop the std: reward minus the group mean (prime-rl, Tinker, DeepSeek-V3.2, Olmo 3)",
        "eras",
        "adv_estimator: reinforce; norm_mean_type: group; norm_std_type: null",
        "norm_adv_by_std_in_grpo: false",
        "--algo.advantage.estimator dr_grpo",
        "scale_rewards='none'",
    ),
    (
        "ScaleRL / Olmo 3, the 'defaults of 2026' (no KL, token mean, clip-higher)",
        "eras",
        "use_kl_loss: false; loss_agg_mode: token-mean; use_pg_clip_range, pg_clip_high: 0.28",
        "use_kl_loss: false; loss_agg_mode: token-mean; clip_ratio_high: 0.28",
        "--algo.kl.init_coef 0; --actor.loss_agg_mode token-mean; "
        "--actor.eps_clip_low_high 0.2 0.28",
        "beta=0.0; loss_type='dapo'; epsilon_high=0.28",
    ),
    (
        "Group health: all-good / all-bad / mixed, per-function std",
        "normalisation",
        "-",
        "-",
        "-",
        "logs frac_reward_zero_std, and rewards/<func>/std per reward function",
    ),
    (
        "Zero-variance policies: drop, mask, keep (TRL#7068)",
        "normalisation",
        "query_filter_config std_filter (std <= std_threshold); difficulty_mask",
        "algorithm.filter_groups (enable, metric; np.std == 0)",
        "--algo.dynamic_filtering_enable, --algo.dynamic_filtering_range",
        "none: keeps the group at A = 0",
    ),
    (
        "Normalisation matrix: mean level x std level",
        "normalisation",
        "norm_mean_type, norm_std_type (group / batch / None)",
        "norm_adv_by_std_in_grpo (False = Dr. GRPO); reinforce_plus_plus_baseline",
        "--algo.advantage.estimator group_norm / dr_grpo / reinforce_baseline",
        "scale_rewards='group' / 'batch' / 'none'",
    ),
    (
        "Sampler \u2260 trainer: correcting for the behaviour policy mu (truncated / masked IS)",
        "mismatch",
        "train_infer_correction: is_weight (weight_type token / sequence, upper_bound), filters",
        "algorithm.rollout_correction: rollout_is (token / sequence), rollout_is_threshold, "
        "rollout_rs, rollout_rs_threshold (decoupled: pi_old vs mu), bypass_mode (pi_old = "
        "mu; the legacy trainer's sets actor loss_mode bypass_mode); geo_mean weighs each row "
        "by the geometric mean of its w",
        "--algo.advantage.is_correction_level / _mode / _gating / _threshold",
        "vllm_importance_sampling_correction, _mode, _clip_min / _clip_max; "
        "off_policy_mask_threshold",
    ),
    (
        "Teacher as reference: on-policy distillation, SDPO",
        "teacher",
        "use_opd (mixed), is_pure_opd, teacher, opd_kl_coef, kl_penalty",
        "-",
        "-",
        "GKDTrainer (lmbda, beta)",
    ),
)
COLUMNS = ("what", "page", "ROLL", "verl", "OpenRLHF", "TRL")
#: the page of the sampler / trainer mismatch (behaviour policy mu != pi_old), when present
MISMATCH = "mismatch"


def additions_table() -> pd.DataFrame:
    """The additions as a table: what, the roll-viz page title, then each framework's names."""
    rows = [
        dict(zip(COLUMNS, (what, nav.page(key).title, *names), strict=True))
        for what, key, *names in ADDITIONS
    ]
    return pd.DataFrame(rows)


def additions_2026() -> None:
    """The section 'What 2026 added': the table and a link to each page that shows it."""
    st.subheader("What 2026 added, in each framework's own names")
    st.markdown(
        "The field's defaults converged (no KL, one token mean over the batch, clip-higher, "
        "zero-variance groups filtered, the batch's std); the questions moved to **group "
        "health** and **normalisation scale**; the sampler is not the trainer (mu \u2260 "
        "pi_old, corrected by truncated or masked importance sampling); the reference can be a "
        "**teacher**. Each row is shown on the current batch on its page; the columns give the "
        "setting under the name each framework uses ('-': no key the calculator reads)."
    )
    table(additions_table(), key="fw_additions")
    cols = st.columns(4)
    links = [
        ("eras", "Eras: the recipes of record"),
        ("normalisation", "Normalisation: health, policies, matrix"),
        ("teacher", "Teacher as reference"),
    ]
    if MISMATCH in nav.BY_KEY:
        links.append((MISMATCH, "Sampler \u2260 trainer: mu vs pi_old and its corrections"))
    for col, (key, label) in zip(cols, links, strict=False):
        with col:
            page_link(key, label)
    st.caption(
        "Every batch page also carries the group-health row and a 'Recipes of record' switch "
        "that shows that page's own number under each recipe you pick."
    )


#: the recipes table's columns
RECIPE_COLUMNS = ("recipe", "advantage divisor", "settings", "sources")
_STD_WORDS = {"group": "group std", "batch": "batch std", "none": "none: r - group mean"}


def recipes_table() -> pd.DataFrame:
    """One row per recipe of record: its label, std level, settings in words and sources."""
    rows = [
        (e.label, _STD_WORDS[e.std_level], "; ".join(e.recipe), e.sources) for e in ERAS.values()
    ]
    return pd.DataFrame(rows, columns=list(RECIPE_COLUMNS))


def recipes_of_record() -> None:
    """The section 'Frameworks of record as recipes': the table, the std note, the link."""
    st.subheader("The frameworks of record, as recipes")
    aliases = ", ".join(f"'{a}' is {ERAS[a].label}" for a in ALIASES)
    st.markdown(
        "One 'defaults of 2026' preset no longer describes the field. Each framework of record "
        "is a named recipe, said in every dialect's own keys (where a dialect cannot say a "
        "setting, the nearest native option and a note: the Eras page). On every batch page "
        "the **Recipes of record** switch (the group-health row) diffs the recipes you pick on "
        f"that page's batch; the Frameworks page adds each recipe's loss in every dialect. Old "
        f"names still resolve ({aliases})."
    )
    st.info(STD_MINORITY, icon=":material/functions:")
    table(recipes_table(), key="fw_recipes")
    page_link("eras", "Every recipe on this batch: the Eras page", icon=":material/history:")
