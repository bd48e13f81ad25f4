r"""``python -m roll_viz train``: train a LoRA policy on the given prompts, one JSON line per step.

Output (stdout, or ``--out FILE``) is the run file of ``roll_viz.lm.train`` (schema
``roll-viz.train/1``): a header line with the settings, one ``step`` line per step as it finishes
(metrics always; samples with token data every ``--sample-every`` steps and at the last step), and
an ``end`` line. The app opens the same file (Training page, "Open a run file").

Example::

    python -m roll_viz train --prompt "Write a fun fact about octopuses." --steps 30 \\
        --framework roll --adv-estimator grpo --reward positive_words \\
        --reward-param per_word=0.25 --reward-param cap=10 --beta 0 --lr 5e-4 --out run.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from roll_viz.core import pipeline
from roll_viz.core.pipeline.eras import ALIASES, ERAS
from roll_viz.lm.loss_options import DEFAULT_OPTION, OPTION_IDS, SAMPLERS
from roll_viz.lm.models import ModelNotFoundError, load_models
from roll_viz.lm.runfile import MAX_LAG, OLD_POLICIES, RewardChoice, TrainRun, TrainSettings
from roll_viz.lm.train import Trainer
from roll_viz.lm.update import MAX_EPOCHS
from roll_viz.rewards import EXTRA_REWARDS, REWARD_FNS


def _value(text: str) -> Any:
    """A --config / --reward-param value: JSON (numbers, true/false, null, lists) else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str] | None, flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"{flag} expects KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        out[key.strip()] = _value(text.strip())
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the tests)."""
    p = argparse.ArgumentParser(
        prog="python -m roll_viz train",
        description="Live RL training (LoRA) on your prompts; prints one JSON line per step.",
    )
    p.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable)")
    p.add_argument("--steps", type=int, default=20, help="training steps N")
    p.add_argument("--group-size", type=int, default=4, help="samples per prompt G")
    p.add_argument(
        "--pods-m",
        type=int,
        default=0,
        help="PODS: train on the m of the G rollouts with the largest reward variance (0 = all)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--framework", choices=pipeline.FRAMEWORKS, default="roll")
    p.add_argument(
        "--adv-estimator",
        default="grpo",
        help="advantage estimator in the framework's own name (roll: gae|reinforce|grpo, verl: "
        "grpo|rloo|reinforce_plus_plus|..., openrlhf: group_norm|rloo|..., trl: group|batch|none)",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="any other key of the framework's dialect config (repeatable), e.g. kl_penalty=k3",
    )
    p.add_argument(
        "--reward", choices=sorted([*REWARD_FNS, *EXTRA_REWARDS]), default="target_length"
    )
    p.add_argument("--reward-param", action="append", metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--beta", type=float, default=0.0, help="initial KL coefficient")
    p.add_argument("--beta-mode", choices=("fixed", "adaptive"), default="fixed")
    p.add_argument("--target-kl", type=float, default=0.05)
    p.add_argument("--horizon", type=float, default=100.0)
    p.add_argument("--lr", type=float, default=5e-4, help="LoRA learning rate")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha", type=float, default=16.0)
    p.add_argument("--clip-eps", type=float, default=0.2)
    p.add_argument(
        "--ppo-epochs",
        type=int,
        default=1,
        choices=range(1, MAX_EPOCHS + 1),
        help=f"passes over each batch, 1 to {MAX_EPOCHS} (lm.update.MAX_EPOCHS)",
    )
    p.add_argument("--sample-every", type=int, default=5, help="write samples every k steps")
    p.add_argument(
        "--era",
        choices=(*ERAS, *ALIASES),
        default=None,
        help="start from a recipe of record's config for the framework (core.pipeline.eras; "
        "prime_rl and scalerl_olmo3 also drop zero-variance groups; defaults_2026 is "
        "scalerl_olmo3); --config and --adv-estimator override",
    )
    p.add_argument(
        "--filter-zero-variance",
        action="store_true",
        help="drop the groups whose rewards are all equal before the advantages",
    )
    p.add_argument(
        "--loss-option",
        default=DEFAULT_OPTION,
        help=f"a loss option of the framework (lm.loss_options): {', '.join(OPTION_IDS)}",
    )
    p.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default="fp32",
        help="who draws the tokens (the behaviour policy mu); fp32 = the trainer itself",
    )
    p.add_argument(
        "--staleness",
        type=int,
        choices=range(MAX_LAG + 1),
        default=0,
        help="the sampler's lag k: step s samples with the adapter of step s - k (async)",
    )
    p.add_argument(
        "--old-policy",
        choices=OLD_POLICIES,
        default="recomputed",
        help="pi_old in the loss: recomputed at the sampler's weights, current (pi_theta) or mu",
    )
    p.add_argument("--label", default="")
    p.add_argument("--model", default=None, help="model spec (default: ROLL_VIZ_MODEL/bundled)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--out", default=None, help="write the JSONL here instead of stdout")
    return p


def settings_from_args(args: argparse.Namespace, model: str) -> Any:
    """TrainSettings from parsed arguments (ValueError on a bad combination)."""
    era = ERAS[args.era] if args.era else None
    config = era.config(args.framework) if era else {}
    config.update(_pairs(args.config, "--config"))
    est_key = pipeline.ESTIMATOR_KEY[args.framework]
    if era is None or args.adv_estimator != build_parser().get_default("adv_estimator"):
        config[est_key] = args.adv_estimator
    reward = RewardChoice.single(args.reward, **_pairs(args.reward_param, "--reward-param"))
    return TrainSettings.flat(
        prompts=tuple(args.prompt),
        group_size=args.group_size,
        pods_m=args.pods_m,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        steps=args.steps,
        reward=reward,
        framework=args.framework,
        config=config,
        beta_mode=args.beta_mode,
        beta=args.beta,
        target_kl=args.target_kl,
        horizon=args.horizon,
        lr=args.lr,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        clip_eps=args.clip_eps,
        ppo_epochs=args.ppo_epochs,
        sample_every=args.sample_every,
        model=model,
        label=args.label,
        loss_option=args.loss_option,
        sampler=args.sampler,
        staleness=args.staleness,
        old_policy=args.old_policy,
        filter_zero_variance=args.filter_zero_variance or bool(era and era.filter_zero_variance),
    )


def main(argv: list[str]) -> int:
    """Run the training loop, streaming JSON lines; returns the exit code (1 on a failed step)."""
    args = build_parser().parse_args(argv)
    try:
        bundle_spec = args.model
        bundle = load_models(bundle_spec, device=args.device, dtype=args.dtype)
        settings = settings_from_args(args, bundle.spec)
    except (ValueError, ModelNotFoundError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
    try:
        head = TrainRun(settings=settings, model=bundle.name, label=args.label)
        out.write(json.dumps(head.header_json(), ensure_ascii=False) + "\n")
        out.flush()
        trainer = Trainer(bundle, settings)
        status, message = "done", ""
        for step in range(settings.steps):
            keep = step % settings.sample_every == 0 or step == settings.steps - 1
            try:
                record = trainer.run_step(keep_samples=keep)
            except Exception as err:  # keep the steps done; say why it stopped
                status, message = "error", f"step {step}: {type(err).__name__}: {err}"
                sys.stderr.write(f"error: {message}\n")
                break
            out.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            out.flush()
        end = {"type": "end", "status": status, "message": message}
        out.write(json.dumps(end) + "\n")
        out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    return 0 if status == "done" else 1
