"""What a sidebar knob move costs the server on each page: the relay's path against the page path.

``python -m benchmarks.knob_pages`` (or ``--pages rewards update ...``) starts one server (the
tiny model, a free 127.0.0.1 port) and, for each page, one student alone on the default preset:

- path ``relay`` (today's app): ``BURSTS`` bursts of ``BURST`` moves of the sidebar's gamma, each
  a fragment rerun as the browser sends it; after each burst, where the relay's mode asks for it
  ("browser" or "whole", ``relay.move_mode``: read from the relay's own data), the settle
  trigger the browser's relay.js would set after its pause, and the one page run it brings;
- path ``page``: the same moves as whole-page reruns (no fragment id), as before the fragment.

One JSON line per page::

    {"name": "knob_pages", "page": "Rewards", "mode": "browser", "moves": 9,
     "cpu_ms_per_fragment_move": .., "cpu_ms_per_settle": .., "cpu_ms_per_move": ..,
     "cpu_ms_per_page_move": .., "settles": 3, ...}

``cpu_ms_per_move`` is the relay path's whole cost spread over its moves (fragment reruns plus
the settles' page runs); ``cpu_ms_per_page_move`` the page path's. The server process's CPU
(psutil, user + system) is read around each part, caches warmed first with every value; each
move goes to a value that differs from the last (no cache hit for the page's trace). Timings are
printed, never asserted. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks.knob_load import CHOICES, KEY, RELAY, cpu_seconds, relay_mode
from benchmarks.server import health, streamlit_server
from benchmarks.st_client import FINISHED, Session, run_coroutine
from roll_viz import nav

#: the pages a student moves the knobs on: the chain, the probes, the steady ones
PAGES = ("rewards", "kl", "advantages", "local_global", "normalisation", "update", "sensitivity")
BURSTS = 4
BURST = 4
#: modes after which the browser's relay asks for the page's one rerun
SETTLING = ("browser", "whole")


async def _check(res: Any, what: str) -> None:
    if res.status not in FINISHED or res.exceptions or res.error_alerts:
        raise RuntimeError(f"{what}: {res.status} {res.exceptions} {res.error_alerts}")


async def page_cost(base: str, page: str, pid: int | None) -> dict[str, Any]:
    """One student alone on ``page`` (a ``nav`` key): the line for it (no timing check)."""
    path = nav.url_path(page)
    s = Session(base)
    await s.connect()
    try:
        await _check(await s.run(page=path, query=""), f"{page}: open")
        for v in CHOICES:  # warm every value's caches on both paths
            await _check(await s.run(changes={KEY: v}, widgets=s.widgets), f"{page}: warm")
        await _check(await s.run(triggers={RELAY: ("settle", 0)}, widgets=s.widgets), "settle")
        moves, frag_cpu, settle_cpu, settles, modes = 0, 0.0, 0.0, 0, set()
        for burst in range(BURSTS):
            for i in range(BURST):
                value = CHOICES[(burst * BURST + i) % len(CHOICES)]
                c0 = cpu_seconds(pid)
                res = await s.run(changes={KEY: value}, widgets=s.widgets)
                frag_cpu += cpu_seconds(pid) - c0
                await _check(res, f"{page}: move")
                modes.add(relay_mode(res) if res.fragment else "full")
                moves += 1
            if modes & set(SETTLING):
                c0 = cpu_seconds(pid)
                res = await s.run(triggers={RELAY: ("settle", burst + 1)}, widgets=s.widgets)
                settle_cpu += cpu_seconds(pid) - c0
                await _check(res, f"{page}: settle")
                settles += 1
        c0 = cpu_seconds(pid)
        for i in range(moves):
            value = CHOICES[i % len(CHOICES)]
            res = await s.run(changes={KEY: value}, widgets=s.widgets, page_reruns=True)
            await _check(res, f"{page}: page move")
        page_cpu = cpu_seconds(pid) - c0
    finally:
        await s.close()

    def ms(cpu: float, n: int) -> float | None:
        return round(cpu / n * 1000.0, 1) if pid is not None and n else None

    return {
        "name": "knob_pages",
        "page": nav.page(page).title,
        "mode": "/".join(sorted(m or "none" for m in modes)),
        "moves": moves,
        "settles": settles,
        "cpu_ms_per_fragment_move": ms(frag_cpu, moves),
        "cpu_ms_per_settle": ms(settle_cpu, settles),
        "cpu_ms_per_move": ms(frag_cpu + settle_cpu, moves),
        "cpu_ms_per_page_move": ms(page_cpu, moves),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: one JSON line per page, all on one server."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.knob_pages", description=__doc__)
    ap.add_argument("--pages", nargs="+", choices=[p.key for p in nav.PAGES], default=PAGES)
    args = ap.parse_args(argv)
    worst = 0
    with streamlit_server() as srv:
        for page in args.pages:
            line = run_coroutine(page_cost(srv.base, page, srv.pid))
            line["health_after"] = health(srv.base)
            line["server_tracebacks"] = len(srv.tracebacks())
            print(json.dumps(line), flush=True)
            worst = worst or int(bool(line["server_tracebacks"]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
