"""``python -m roll_viz sample``: sample a group per prompt with the real model, print JSON."""

from __future__ import annotations

import argparse
import json
import sys

from roll_viz.core.records import rollout_to_dict
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import DEFAULT_SERVED_NAME, HttpEngine
from roll_viz.lm.engine_rollout import engine_sample
from roll_viz.lm.models import ModelNotFoundError, load_models
from roll_viz.lm.request import DEFAULT_INSTRUCTION, POLICY_MODES, SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.rewards import REWARD_FNS, RewardSpec, score_rollout


def main(argv: list[str]) -> int:
    """``python -m roll_viz sample --prompt TEXT ...``: print one JSON object, return exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m roll_viz sample",
        description="Sample a group of answers per prompt and print one JSON object.",
    )
    parser.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable)")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt G")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--policy", choices=POLICY_MODES, default="identical")
    parser.add_argument(
        "--instruction", default=DEFAULT_INSTRUCTION, help="steered policy's hidden text"
    )
    parser.add_argument(
        "--reward", choices=sorted(REWARD_FNS), default=None, help="toy reward to score"
    )
    parser.add_argument(
        "--model", default=None, help="model spec (default: ROLL_VIZ_MODEL or bundled)"
    )
    parser.add_argument(
        "--engine", default=None, help="sample on a vLLM server, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--engine-model", default=DEFAULT_SERVED_NAME, help="its served name")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args(argv)
    try:
        cfg = SamplingConfig(
            prompts=tuple(args.prompt),
            group_size=args.group_size,
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            policy_mode=args.policy,
            instruction=args.instruction,
        )
        engine = None
        if args.engine:
            engine = HttpEngine(args.engine, args.engine_model)
            engine.probe()
        bundle = load_models(args.model, device=args.device, dtype=args.dtype)
        rollout = sample(bundle, cfg) if engine is None else engine_sample(bundle, engine, cfg)
    except (ValueError, ModelNotFoundError, EngineError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    rewards = None
    if args.reward:
        rewards = score_rollout(rollout, RewardSpec(terms=((args.reward, 1.0, ()),)))
    sys.stdout.write(
        json.dumps(rollout_to_dict(rollout, rewards, args.reward or ""), ensure_ascii=False) + "\n"
    )
    return 0
