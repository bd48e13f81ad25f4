"""``python -m roll_viz serve [SCRIPT] [streamlit flags]``: the server, warm before anyone comes.

``streamlit run app.py`` imports torch, transformers and peft inside the first student's page
run, and those imports hold the interpreter for long stretches (C extensions loading): every
other page and the server's health answer waited 0.4-1.2 s (``churn_load``'s
``warmup_health_max_ms``). ``serve`` imports them first, then starts Streamlit in the same
process, so the first page finds them loaded. ``make run`` uses it. SCRIPT defaults to the
router (``app.py`` at the repository root); the rest goes to ``streamlit run`` unchanged.

Before the server starts it prints two addresses: the one for this computer (the projector) and
the one phones on the same network open (``lm.network.network_ip``, as the Lesson page's QR code
uses), or says plainly that this computer has no network address. So that the printed port is
the server's, the port is pinned to 8501 when neither ``--server.port`` nor
``STREAMLIT_SERVER_PORT`` sets one (Streamlit would otherwise move to a free port without a word
when 8501 is taken; pinned, it says the port is in use).
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
import time
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager  # noqa: TID251  (see router_owns_the_pages)

from roll_viz.lm import network

MODEL_STACK = ("torch", "transformers", "peft")
ROUTER = Path(__file__).resolve().parents[2] / "app.py"


def warm_imports() -> float:
    """Import the model stack (torch, transformers, peft); returns the seconds it took."""
    t0 = time.perf_counter()
    for name in MODEL_STACK:  # imported by name: this is the timed start-up work itself
        importlib.import_module(name)
    return time.perf_counter() - t0


def flag(argv: list[str], name: str) -> str | None:
    """The value of a Streamlit flag (``--name=value`` or ``--name value``), else its env var."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return os.environ.get("STREAMLIT_" + name.upper().replace(".", "_")) or None


def address_lines(argv: list[str], lan_ip: str | None) -> list[str]:
    """What ``serve`` prints before the server starts: this computer's and the phones' address.

    Args:
        argv: the flags for ``streamlit run``.
        lan_ip: this machine's network address (``network.network_ip()``), None when offline.
    """
    port = flag(argv, "server.port") or str(network.DEFAULT_PORT)
    bound = flag(argv, "server.address")
    here = f"roll-viz: on this computer (the projector): http://localhost:{port}"
    if bound and network.is_loopback(bound):
        return [
            here,
            f"roll-viz: phones cannot reach this server: it listens on {bound} only (start it "
            "without --server.address, or with --server.address=0.0.0.0)",
        ]
    if bound and bound not in {"0.0.0.0", "::"}:  # one address given: the one everyone uses
        url = f"http://{network.host_port(bound, int(port))}"
        return [f"roll-viz: on this computer and on phones: {url}"]
    if lan_ip is None:
        return [
            here,
            "roll-viz: phones: this computer has no network address, so no phone can reach it: "
            "connect it to the classroom network or a phone's hotspot, then open the Lesson "
            'page again (docs/lessons.md, "Classroom network")',
        ]
    return [
        here,
        f"roll-viz: phones on the same network:       http://{lan_ip}:{port} (the Lesson "
        "page's QR code uses it)",
    ]


def router_owns_the_pages() -> None:
    """Tell Streamlit before its first session that ``pages/`` is not its old multipage folder.

    Streamlit 1.67 decides at its first session whether a folder named ``pages`` beside the
    entry script makes this an old-style app, and then runs that session's first script through
    its legacy runner: a first visit to ``/Update`` got a "Page not found" dialog over the page
    (and ``/vote`` ran without the router). The router's ``st.navigation`` owns the pages, so the
    answer is no, given here once for the process. ``ui.guard`` covers ``streamlit run app.py``.
    """
    PagesManager.uses_pages_directory = False


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
    if flag(argv, "server.port") is None:
        argv = [*argv, f"--server.port={network.DEFAULT_PORT}"]  # the port printed is the port
    seconds = warm_imports()
    print(f"roll-viz: model stack imported in {seconds:.1f} s; starting the server", flush=True)
    for line in address_lines(argv, network.network_ip()):
        print(line, flush=True)
    router_owns_the_pages()
    # ``python -m streamlit run SCRIPT ...`` in this process (the cli layer drives Streamlit's own
    # command line; it does not use Streamlit's API)
    sys.argv = ["streamlit", "run", str(script), *argv]
    try:
        runpy.run_module("streamlit", run_name="__main__", alter_sys=True)
    except SystemExit as done:  # click ends with SystemExit; hand its code on
        return done.code if isinstance(done.code, int) else 0
    return 0
