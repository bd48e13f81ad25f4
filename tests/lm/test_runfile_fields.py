"""Run files with the loss option, sampler and zero-variance filter: round trip, old files, CLI."""

from __future__ import annotations

import json

import pytest

from roll_viz.cli.train import build_parser, settings_from_args
from roll_viz.core.pipeline.eras import DEFAULTS_2026, GRPO_2024
from roll_viz.lm.loss_options import DEFAULT_OPTION
from roll_viz.lm.runfile import StepRecord, TrainRun, TrainSettings, loss_config

NEW = dict(
    framework="openrlhf",
    config={"advantage_estimator": "group_norm"},
    loss_option="is_correction_level: seq",
    sampler="int8",
    filter_zero_variance=True,
)


def test_round_trip_with_the_new_fields():
    s = TrainSettings.flat(prompts=("a",), **NEW)
    run = TrainRun(settings=s, steps=(StepRecord(step=0, metrics={"delta_abs_mean": 0.1}),))
    back = TrainRun.from_jsonl(run.to_jsonl())
    assert back.settings == s
    assert back.settings.loss_option == "is_correction_level: seq"
    assert back.settings.sampler == "int8"
    assert back.settings.filter_zero_variance is True
    assert back.steps[0].metrics["delta_abs_mean"] == 0.1


def test_an_old_run_file_without_the_fields_loads_with_the_defaults():
    s = TrainSettings.flat(prompts=("a",))
    header = TrainRun(settings=s).header_json()
    for key in ("loss_option", "sampler", "filter_zero_variance"):
        header["settings"].pop(key)
    text = json.dumps(header) + "\n"
    back = TrainRun.from_jsonl(text)
    assert back.settings == s
    assert back.settings.loss_option == DEFAULT_OPTION
    assert back.settings.sampler == "fp32"
    assert back.settings.filter_zero_variance is False


def test_the_option_sets_its_keys_in_the_loss_config():
    s = TrainSettings.flat(prompts=("a",), **NEW)
    assert loss_config(s, 0.0)["is_correction_level"] == "seq"
    plain = TrainSettings.flat(prompts=("a",), framework="openrlhf", config={})
    assert "is_correction_level" not in loss_config(plain, 0.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sampler": "fp8"}, "sampler must be one of"),
        ({"loss_option": "pg_variant: topr"}, "loss_option must be one of"),  # ROLL's, not verl's
        ({"loss_option": "nonsense"}, "loss_option must be one of"),
    ],
)
def test_bad_values_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        TrainSettings.flat(prompts=("a",), framework="verl", config={}, **change)


def test_cli_era_presets():
    p = build_parser()
    base = ["--prompt", "a", "--framework", "roll"]
    new = settings_from_args(p.parse_args([*base, "--era", "defaults_2026"]), "tiny")
    assert dict(new.config) == DEFAULTS_2026.config("roll")
    assert new.filter_zero_variance is True
    old = settings_from_args(p.parse_args([*base, "--era", "grpo_2024"]), "tiny")
    assert dict(old.config) == GRPO_2024.config("roll")
    assert old.filter_zero_variance is False
    mixed = settings_from_args(
        p.parse_args([*base, "--era", "grpo_2024", "--config", "kl_loss_coef=0.1",
                      "--sampler", "bf16", "--loss-option", "pg_variant: topr"]),
        "tiny",
    )  # fmt: skip
    assert dict(mixed.config)["kl_loss_coef"] == 0.1
    assert mixed.sampler == "bf16"
    assert mixed.loss_option == "pg_variant: topr"
    lagged = settings_from_args(
        p.parse_args([*base, "--staleness", "2", "--old-policy", "current"]), "tiny"
    )
    assert (lagged.staleness, lagged.old_policy) == (2, "current")
    assert TrainSettings.from_json(lagged.to_json()) == lagged  # the run file keeps them
