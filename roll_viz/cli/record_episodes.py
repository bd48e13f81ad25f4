"""``python -m roll_viz episodes``: multi-turn episodes against the toy tools, as JSON.

Samples G episodes per task with the real model (``lm.episodes``: in-process, or through a vLLM
server with ``--engine``) and prints the ``roll-viz.episodes/1`` JSON of
``data.recorded_episodes`` (or writes it with ``--out``). The shipped presets were recorded with
``python -m roll_viz episodes --preset NAME --out roll_viz/data/recorded_episodes/NAME.json``
(the defaults: G = 4, 3 turns, temperature 0.7, seed 0). The file also keeps each transcript
re-encoded from its text by the model's chat template, plain and with earlier ``<think>`` blocks
stripped (``lm.transcript.reencode``), so a page shows the extension property with no model.

``--preset NAME`` takes the preset's tasks and tokens per turn (``PRESETS``); ``--task`` names
tasks instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from roll_viz.data.recorded_episodes import RECORDED_EPISODES, episodes_to_json
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import DEFAULT_SERVED_NAME, HttpEngine
from roll_viz.lm.episodes import EpisodeRequest, engine_episodes, sample_episodes
from roll_viz.lm.models import ModelNotFoundError, load_models
from roll_viz.lm.toy_tools import TASKS
from roll_viz.lm.transcript import reencode

#: the shipped presets: their tasks and tokens per turn (each 2 tasks x G = 4 x 3 turns, seed 0,
#: T = 0.7; thinking first needs more tokens per turn)
PRESETS = {
    "calculator": (("calc-1", "calc-2"), 24),
    "lookup": (("lookup-1", "lookup-2"), 24),
    "guess": (("guess-1", "guess-2"), 24),
    "think": (("think-1", "think-2"), 40),
}


def main(argv: list[str]) -> int:
    """``python -m roll_viz episodes --task ID ...``: print or write one JSON object."""
    parser = argparse.ArgumentParser(
        prog="python -m roll_viz episodes",
        description="Sample G multi-turn episodes per toy-tool task and print one JSON object.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None)
    parser.add_argument("--task", action="append", choices=sorted(TASKS), help="repeatable")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-turn-tokens", type=int, default=None, help="24, or the preset's")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="model spec (default: bundled)")
    parser.add_argument("--engine", default=None, help="a vLLM server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--engine-model", default=DEFAULT_SERVED_NAME, help="its served name")
    parser.add_argument("--out", default=None, help="write the JSON here instead of stdout")
    args = parser.parse_args(argv)
    preset_tasks, preset_tokens = PRESETS.get(args.preset or "", ((), 24))
    tasks = tuple(args.task or preset_tasks)  # none: the request says so
    command = "python -m roll_viz " + " ".join(["episodes", *argv])
    try:
        request = EpisodeRequest(
            tasks=tasks,
            group_size=args.group_size,
            max_turns=args.max_turns,
            max_turn_tokens=args.max_turn_tokens or preset_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
        )
        bundle = load_models(args.model, device="cpu" if args.engine is None else None)
        start = time.perf_counter()
        if args.engine:
            engine = HttpEngine(args.engine, args.engine_model)
            engine.probe()
            batch = engine_episodes(bundle, engine, request)
        else:
            batch = sample_episodes(bundle, request)
        seconds = time.perf_counter() - start
        with bundle.lock:
            again = {
                flag: tuple(reencode(bundle.tokenizer, e, flag) for e in batch.episodes)
                for flag in (False, True)
            }
    except (ValueError, ModelNotFoundError, EngineError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    text = episodes_to_json(batch, request, command, seconds, again[False], again[True])
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        known = f" (preset {args.preset!r})" if args.preset in RECORDED_EPISODES else ""
        sys.stderr.write(
            f"wrote {args.out}{known}: {len(batch.episodes)} episodes, {seconds:.1f} s\n"
        )
    else:
        sys.stdout.write(text)
    return 0
