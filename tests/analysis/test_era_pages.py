"""Each page's era numbers: read off the EraRun the Eras page draws, checked by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from roll_viz.analysis import era_diff, era_pages, group_health
from roll_viz.core.pipeline import FRAMEWORKS
from roll_viz.core.pipeline.eras import ERAS


@pytest.fixture(scope="module")
def demo():
    return group_health.demo_batch()


@pytest.mark.parametrize("page", list(era_pages.PAGE_QUANTITIES))
def test_every_page_gets_its_quantities_for_every_recipe(demo, page):
    diff = era_diff.diff_eras(demo, "trl")
    table = era_pages.page_numbers(diff, page, demo.response_mask)
    assert list(table["quantity"]) == list(era_pages.PAGE_QUANTITIES[page])
    assert [c for c in table.columns if c not in ("quantity", "what it is")] == [
        e.label for e in ERAS.values()
    ]
    answers = era_pages.page_answers(diff, page)
    assert len(answers) == demo.scores.shape[0]
    for column in era_pages.PAGE_ANSWERS[page]:
        for era in ERAS.values():
            assert f"{column} [{era.short}]" in answers.columns


def test_samples_numbers_by_hand(demo):
    """2026 drops the all-good and all-bad groups (exact equality); 2024 keeps all 12 answers."""
    diff = era_diff.diff_eras(demo, "verl")
    table = era_pages.page_numbers(diff, "samples", demo.response_mask).set_index("quantity")
    old, new = ERAS["grpo_2024"].label, ERAS["defaults_2026"].label
    assert table.loc["answers in the loss", old] == "12"
    assert table.loc["answers in the loss", new] == "6"  # the near-flat shaped group stays
    assert table.loc["tokens in the loss", old] == str(int(demo.response_mask.sum()))
    kept = demo.response_mask[6:].sum()
    assert table.loc["tokens in the loss", new] == str(int(kept))
    assert table.loc["groups filtered", old] == "none"


def test_max_abs_advantage_is_the_kept_tokens(demo):
    diff = era_diff.diff_eras(demo, "trl")
    table = era_pages.page_numbers(diff, "advantages", demo.response_mask).set_index("quantity")
    for er in diff.runs.values():
        keep = (demo.response_mask > 0) & er.kept[:, None]
        want = float(er.advantages[keep].abs().max())
        assert float(table.loc["max |A|", er.era.label]) == pytest.approx(want, rel=1e-3)
    assert table.loc["std level", ERAS["defaults_2026"].label] == "batch"
    assert table.loc["std level", ERAS["grpo_2024"].label] == "group"
    for key in ("prime_rl", "tinker", "deepseek_v32"):
        assert table.loc["std level", ERAS[key].label] == "none"


def test_framework_losses_has_every_dialect(demo):
    table = era_pages.framework_losses(demo)
    assert isinstance(table, pd.DataFrame)
    assert list(table["dialect"]) == list(FRAMEWORKS)
    for fw in FRAMEWORKS:
        diff = era_diff.diff_eras(demo, fw)
        row = table.set_index("dialect").loc[fw]
        assert row["loss [2024]"] == pytest.approx(diff.runs["grpo_2024"].loss)
        assert row["KL term [ScaleRL]"] == 0.0
        assert row["loss [Tinker]"] == pytest.approx(diff.runs["tinker"].loss)


def test_framework_losses_of_the_picked_recipes(demo):
    table = era_pages.framework_losses(demo, eras=("tinker", "defaults_2026"))
    tags = sorted({c.split("[")[1].rstrip("]") for c in table.columns if "[" in c})
    assert tags == ["ScaleRL", "Tinker"]
