"""Recorded training runs shipped with the app: real-model runs made by the app's own trainer.

Each file in ``roll_viz/data/recorded_runs/`` is a run file of ``roll_viz.lm.runfile`` (JSONL,
schema ``roll-viz.train/1``: header with the settings, one line per step with its metrics,
samples with token data every few steps, an end line), written by ``python -m roll_viz train``
on the bundled SmolLM2-135M on CPU. The command that made each one is in ``RECORDED[name].command``.

A class opens them at once (no model, no waiting): ``load_recorded(name)`` returns a
``TrainRun`` marked ``recorded=True``; the Training page addresses them from the URL
(``?run=<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from roll_viz.lm.runfile import TrainRun

RECORDED_DIR = Path(__file__).with_name("recorded_runs")


@dataclass(frozen=True)
class RecordedRun:
    """One shipped run.

    Attributes:
        name: URL name (the file stem).
        title: what it shows, for the picker.
        description: what to look for, one or two sentences.
        command: the CLI command that produced it.
    """

    name: str
    title: str
    description: str
    command: str


_COMMON = (
    'python -m roll_viz train --prompt "Write a fun fact about octopuses." '
    '--prompt "Describe your favourite day." --steps 30 --group-size 4 --max-new-tokens 32 '
    "--reward positive_words --reward-param per_word=0.25 --reward-param cap=10 "
    "--framework roll --adv-estimator grpo --lr 1e-3 --sample-every 5 --seed 0 --model smollm2"
)

RECORDED: dict[str, RecordedRun] = {
    "hack_beta0": RecordedRun(
        name="hack_beta0",
        title="Reward hacking, beta = 0",
        description="A reward that counts positive words, no KL penalty: the policy is free to "
        "drift from the reference, and it does.",
        command=_COMMON + " --beta 0",
    ),
    "hack_beta1": RecordedRun(
        name="hack_beta1",
        title="Same reward, beta = 1 (KL in the reward)",
        description="The same run, same seed, with beta = 1 on the per-token KL in the token "
        "rewards (ROLL add_token_level_kl): the penalty holds the policy near the reference.",
        command=_COMMON + " --beta 1.0",
    ),
}

#: the reward-hacking demonstration: (beta = 0, beta > 0)
HACKING_PAIR = ("hack_beta0", "hack_beta1")


def available() -> list[str]:
    """Names of the recorded runs whose file is present, in RECORDED order."""
    return [n for n in RECORDED if (RECORDED_DIR / f"{n}.jsonl").is_file()]


@lru_cache(maxsize=8)
def load_recorded(name: str) -> TrainRun:
    """The recorded run ``name`` (see RECORDED), marked recorded.

    Raises:
        KeyError: unknown name.
        FileNotFoundError: the file is missing.
    """
    if name not in RECORDED:
        raise KeyError(f"unknown recorded run {name!r}; choose from {sorted(RECORDED)}")
    text = (RECORDED_DIR / f"{name}.jsonl").read_text(encoding="utf-8")
    return TrainRun.from_jsonl(text, recorded=True)
