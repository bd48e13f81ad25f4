"""``python -m roll_viz serve [SCRIPT] [streamlit flags]``: the server, warm before anyone comes.

``streamlit run app.py`` imports torch, transformers and peft inside the first student's page
run, and those imports hold the interpreter for long stretches (C extensions loading): every
other page and the server's health answer waited 0.4-1.2 s (``churn_load``'s
``warmup_health_max_ms``). ``serve`` imports them first, then starts Streamlit in the same
process, so the first page finds them loaded. ``make run`` uses it. SCRIPT defaults to the
router (``app.py`` at the repository root); the rest goes to ``streamlit run`` unchanged.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import time
from pathlib import Path

MODEL_STACK = ("torch", "transformers", "peft")
ROUTER = Path(__file__).resolve().parents[2] / "app.py"


def warm_imports() -> float:
    """Import the model stack (torch, transformers, peft); returns the seconds it took."""
    t0 = time.perf_counter()
    for name in MODEL_STACK:  # imported by name: this is the timed start-up work itself
        importlib.import_module(name)
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    """Warm the imports, then run Streamlit on SCRIPT (returns Streamlit's exit code)."""
    if argv and argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0
    script = ROUTER
    if argv and argv[0].endswith(".py"):
        script, argv = Path(argv[0]), argv[1:]
    if not script.is_file():
        print(f"error: no app script {script.name}: run from a roll-viz checkout", file=sys.stderr)
        return 2
    seconds = warm_imports()
    print(f"roll-viz: model stack imported in {seconds:.1f} s; starting the server", flush=True)
    # ``python -m streamlit run SCRIPT ...`` in this process (the cli layer drives Streamlit's own
    # command line; it does not use Streamlit's API)
    sys.argv = ["streamlit", "run", str(script), *argv]
    try:
        runpy.run_module("streamlit", run_name="__main__", alter_sys=True)
    except SystemExit as done:  # click ends with SystemExit; hand its code on
        return done.code if isinstance(done.code, int) else 0
    return 0
