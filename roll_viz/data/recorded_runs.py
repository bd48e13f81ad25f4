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
#: the settings the three later demos share (the same prompts, reward and seed as the pair)
_SHARED = (
    'python -m roll_viz train --prompt "Write a fun fact about octopuses." '
    '--prompt "Describe your favourite day." --steps 30 --group-size 4 --max-new-tokens 32 '
    "--reward positive_words --reward-param per_word=0.25 --reward-param cap=10 "
    "--lr 1e-3 --sample-every 5 --seed 0 --model smollm2"
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
    "adaptive_beta": RecordedRun(
        name="adaptive_beta",
        title="beta adapting to a target KL of 0.1 (closed loop)",
        description="ROLL GRPO with the adaptive KL controller acting on each step's real KL "
        "(target 0.1, horizon 10: beta moves by up to 16% a step). While the KL is below the "
        "target beta falls (0.10 to 0.04 by step 5); the KL then passes the target and "
        "overshoots (0.52 at step 15) while beta is still small; beta keeps rising (to 0.88) "
        "until the KL is back at the target (0.08 to 0.17 over steps 25-29), and turns down at "
        "the last step, when the KL dips below it. A closed loop: the KL answers beta.",
        command=_SHARED + " --framework roll --adv-estimator grpo --beta 0.1 --beta-mode adaptive "
        '--target-kl 0.1 --horizon 10 --label "adaptive beta, target KL 0.1"',
    ),
    "grpo_local": RecordedRun(
        name="grpo_local",
        title="GRPO: advantages on each group's scale (local)",
        description="verl GRPO, beta = 0: each prompt's rewards are normalised by its own "
        "group's mean and std. The advantage std is 0.866 at every step where both groups have "
        "spread (each group's advantages have unbiased std 1: sqrt(3/4) over G = 4), whatever "
        "the reward's scale (0.06 at step 0, 5.1 at step 29), and drops to 0.61 (|A| mean 0.36) "
        "when one group scores all-equal: its advantages are 0 (steps 0, 4, 6, 26). With no KL "
        "penalty it also hacks the reward (KL 1.5 at step 29).",
        command=_SHARED + " --framework verl --adv-estimator grpo --beta 0 "
        '--label "GRPO (group scale)"',
    ),
    "rpp_global": RecordedRun(
        name="rpp_global",
        title="REINFORCE++: advantages on the batch's scale (global)",
        description="verl REINFORCE++, beta = 0, the same seed: no per-prompt baseline; "
        "the returns are whitened over the whole batch, so the advantage std is 1.00 at every "
        "step, and a group whose answers all score the same still gets advantages when its "
        "score differs from the batch's: at step 29 both groups are flat (every group "
        "all-equal) and |A| mean is 1.0, where GRPO gives 0. Reward 0.06 to 7.5, KL 1.8 at "
        "step 29.",
        command=_SHARED + " --framework verl --adv-estimator reinforce_plus_plus --beta 0 "
        '--label "REINFORCE++ (batch scale)"',
    ),
    "era_2024": RecordedRun(
        name="era_2024",
        title="GRPO as published (2024)",
        description="The Eras page's 'GRPO as published' in ROLL: group mean and "
        "std, a k3 KL loss with beta 0.04, seq-mean-token-mean, clip 0.2. Steps where one group "
        "scores all-equal keep its answers at advantage 0 (steps 0 and 4: |A| mean 0.375); the "
        "KL loss is small beside the advantages: KL reaches 1.97 at step 16, the reward takes "
        "off at step 24 (2.7) and ends at 7.3, entropy 0.37.",
        command=_SHARED + " --framework roll --beta 0 --era grpo_2024 "
        '--label "GRPO as published (2024)"',
    ),
    "era_2026": RecordedRun(
        name="era_2026",
        title="Defaults of 2026",
        description="The Eras page's 'defaults of 2026' (its ScaleRL / Olmo 3 recipe) in ROLL, "
        "same seed: no KL, "
        "token-mean, clip 0.2 / 0.28, zero-variance groups dropped, group mean with the batch's "
        "std. A flat group is dropped (step 0: the update sees the other group only, |A| mean "
        "0.75); the advantage std moves with the batch (0.31 to 0.97) instead of GRPO's fixed "
        "0.87; the reward takes off three steps sooner (3.8 at step 21, 7.4 by step 26) and at "
        "step 26 every group is flat: no update. KL 1.88, entropy 0.06 at the end.",
        command=_SHARED + " --framework roll --beta 0 --era defaults_2026 "
        '--label "defaults of 2026"',
    ),
}

#: the reward-hacking demonstration: (beta = 0, beta > 0)
HACKING_PAIR = ("hack_beta0", "hack_beta1")
#: beta adapting to a target KL on the real KL of each step (a closed loop)
ADAPTIVE = "adaptive_beta"
#: local (group) against global (batch) advantage scale over steps: (GRPO, REINFORCE++)
LOCAL_GLOBAL_PAIR = ("grpo_local", "rpp_global")
#: two recipes of ``core.pipeline.eras`` trained in ROLL: (GRPO 2024, defaults of 2026 = ScaleRL /
#: Olmo 3)
ERA_PAIR = ("era_2024", "era_2026")


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
