"""Recorded runs: committed, compact, load at once, and reproduce from their command.

Each ``RECORDED[name].command`` is run through the CLI's own parser: its settings are the
recording's header settings (the model aside), and the same command on the tiny model, with
fewer steps, writes a run of the same shape (same metric keys, samples at the same cadence, beta
moving only when adaptive). The curves themselves belong to the bundled model and are not
compared.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time

import pytest

from roll_viz.cli.train import build_parser, settings_from_args
from roll_viz.cli.train import main as cli_main
from roll_viz.data import recorded_runs as recorded
from roll_viz.lm.runfile import TrainRun

NAMES = list(recorded.RECORDED)
#: a recording stays small enough to commit and to parse at once
MAX_BYTES = 200_000
#: fewer steps than the recording would be honest only if the description says so
MIN_STEPS = 20


def _argv(name: str) -> list[str]:
    words = shlex.split(recorded.RECORDED[name].command)
    assert words[:4] == ["python", "-m", "roll_viz", "train"], words[:4]
    return words[4:]


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_recording_is_committed_compact_and_loads_at_once(name):
    path = recorded.RECORDED_DIR / f"{name}.jsonl"
    assert path.is_file(), f"{name}.jsonl is not committed"
    assert path.stat().st_size < MAX_BYTES, path.stat().st_size
    recorded.load_recorded.cache_clear()
    start = time.perf_counter()
    run = recorded.load_recorded(name)
    assert time.perf_counter() - start < 1.0
    assert run.recorded
    assert len(run.steps) >= MIN_STEPS
    assert [r.step for r in run.steps] == list(range(len(run.steps)))
    if len(run.steps) < run.settings.steps:  # a partial recording says so in its description
        assert f"{len(run.steps)} of {run.settings.steps}" in recorded.RECORDED[name].description


@pytest.mark.parametrize("name", NAMES)
def test_the_command_gives_the_recorded_settings(name):
    run = recorded.load_recorded(name)
    args = build_parser().parse_args(_argv(name))
    assert args.model == "smollm2"
    settings = settings_from_args(args, run.settings.model)
    assert dataclasses.replace(settings, label=run.settings.label) == run.settings


@pytest.mark.parametrize("name", NAMES)
def test_the_command_reproduces_the_shape_on_the_tiny_model(name, tmp_path):
    out = tmp_path / "run.jsonl"
    argv = _with(_with(_argv(name), "--model", "tiny"), "--steps", "3")
    argv = _with(argv, "--sample-every", "2")
    assert cli_main([*argv, "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "step", "step", "step", "end"]
    tiny = TrainRun.from_jsonl(out.read_text())
    rec = recorded.load_recorded(name)
    # same settings apart from the model, the step count and the sampling cadence
    assert dataclasses.replace(
        tiny.settings, model=rec.settings.model, steps=rec.settings.steps, sample_every=5
    ) == dataclasses.replace(rec.settings, label=tiny.settings.label)
    # the same metrics per step, samples every k steps and at the last one
    assert set(tiny.steps[0].metrics) == set(rec.steps[0].metrics)
    assert tiny.sampled_steps() == [0, 2]
    assert rec.sampled_steps()[:2] == [0, 5]
    assert len(tiny.steps[0].samples.responses) == len(rec.steps[0].samples.responses)
    betas = tiny.series("beta")
    if rec.settings.beta_mode == "adaptive":
        assert betas[1] == pytest.approx(tiny.series("next_beta")[0])
        assert betas[1] != betas[0]  # the controller moved beta on the real KL
        assert len(set(rec.series("beta"))) > 10
    else:
        assert len(set(betas)) == 1
        assert len(set(rec.series("beta"))) == 1
