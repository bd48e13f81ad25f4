"""The classroom benchmark: one run, every figure of issue #12 side by side.

``python -m benchmarks --classroom`` (or ``python -m benchmarks.classroom``) starts one
``streamlit run app.py`` on 127.0.0.1 with the tiny live model, opens the classroom batch
(8 prompts x G = 8 x 128 new tokens, steered policy, KL in the reward: ``CLASSROOM``) in Debian's
Chromium (playwright, imported lazily) and prints one JSON line per measurement::

    {"name": "browser_client_path", "page": "Advantages", "students": 0, "redraw_median_ms": ...}

Every move goes to a value not used before in the run (no cache hit anywhere): sidebar walks
step down from where a block starts, and a block that runs out of range re-opens the page on a
fresh sampling seed (``seeds`` in the line). Lines (``students`` is 0 alone, N under load):

- ``browser_client_path``: the instant component's knob (Advantages: ``rv-gamma``; Local vs
  Global: ``rv-lg-G``) moved by programmatic ``input`` events, one new value each
  (``benchmarks.browser.bench_inputs``). ``redraw_*``: input -> recomputed + redrawn (synchronous);
  ``painted_*``: input -> the frame after (two animation frames, so about 16-33 ms at least at
  60 Hz).
  ``ws_bytes_per_move`` / ``http_bytes_per_move``: websocket frame payloads sent + received
  and HTTP response bytes during the moves, divided by the moves (0 expected: nothing reaches
  the server until release). ``recomputes``: how many times the component recomputed.
  Without the panel on the page the line carries ``"status": "no instant panel on this page
  yet"``.
- ``browser_server_path``: the sidebar slider (Advantages: gamma; Local vs Global: G, which
  resamples the live batch) moved by one key press each. ``run_finished_*``: key release -> the
  rerun finished (the app's script state back to notRunning); ``painted_*``: -> the frame after,
  i.e. the redrawn figure, as the browser suite's "slider-release->redrawn" line measures it.
  ``ws_*_bytes_per_move``: that move's websocket traffic (the rerun request sent, the new page
  received); ``final_value_ok``: the URL ended on the value the walk expected.
- ``server_script_time``: the same moves alone from a websocket protocol client
  (``benchmarks.st_client.Session``, no browser, fresh seeds of its own): rerun request ->
  ``script_finished``, i.e. the server's script time plus localhost transfer, next to the
  browser's figure; ``received_bytes_per_move_by_kind`` splits what one move ships by element
  kind (``plotly_chart``, ``bidi_component`` = the instant panel's payload, ...).
- per N of ``--students``: ``classroom_load`` (``benchmarks.classroom_load``'s line: N simulated
  students on the same server for ``--seconds``: p50/p95/max, reruns/s, errors, isolation) and
  ``classroom_under_load``, which puts side by side the browser student's client-path and
  server-path median/p95 measured WHILE those students ran (after a 2 s ramp: the client path
  first, then server moves until the window closes, so under heavy load only a few fit;
  ``*_moves_under_load`` counts the moves that ended inside the window), the same figures
  alone, and the students' p50/p95 and reruns/s. The client path sends 0 bytes whatever N is:
  its moves never queue on the server (its p95 can still rise when the browser shares the
  CPUs with the server and the students).
- ``sampling``: ``benchmarks.sampling``'s CPU lines on the bundled model (the 2 x 8 x 64 lecture
  request, float and int8 decode; the decode line: 8 rows x 64 tokens, ours vs
  ``model.generate``), unless ``--skip-sampling`` (``--sampling-model`` picks another model).
- ``server``: tracebacks the server logged and its health at the end; ``classroom_done``: wall
  seconds of the whole run. Every line carries ``load1`` and ``t_s`` (seconds since start).

Options: ``--students 5 15 30``, ``--seconds 20`` (load per N), ``--moves 20`` (per path),
``--live 3`` (students switching on live sampling), ``--sampling-runs 3``, ``--skip-sampling``,
``--quick`` (a 2 x 4 x 32 batch, 1 N of 2 students for 6 s, 3 moves, no sampling: the smoke test
``tests/browser/test_bench_classroom.py``). Timings are printed, never asserted. Traffic goes only
to the server's 127.0.0.1 port.

Size: one run measures every figure side by side on one server (browser client path, protocol
client path, the load scenario, the live model); the pieces it drives live in ``browser``,
``st_client``, ``classroom_load`` and ``sampling``, this module only sequences and reports them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from benchmarks import classroom_load, st_client
from benchmarks import sampling as bench_sampling
from benchmarks.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MOVE_DONE_JS,
    MOVE_LATENCY_JS,
    PAGE_TIMEOUT_MS,
    Traffic,
    bench_inputs,
    goto,
    run_mark,
    wait_idle,
)
from benchmarks.server import Server, health, streamlit_server
from roll_viz.lm.models import load_models

#: The classroom batch: 8 prompts x G = 8 x 128 new tokens from the live (tiny) model, steered
#: policy (so the KL is not 0) with the KL in the reward (so beta reaches the advantages).
#: tests/e2e/test_app_e2e.py uses this query too.
CLASSROOM = {
    "live": "true",
    "prompts": "\n".join(f"Question {i}: what is {i} + {i}?" for i in range(1, 9)),
    "G": "8",
    "T": "128",
    "policy": "steered",
    "seed": "7",
    "klr": "true",
}
#: ``--quick``: the same kind of batch, small (2 prompts x 4 x 32).
QUICK = {**CLASSROOM, "prompts": "Question 1: what is 1 + 1?\nQuestion 2: what is 2 + 2?"}
QUICK.update({"G": "4", "T": "32"})
ADVANTAGES, LOCAL_GLOBAL = "Advantages", "Local_vs_Global"
#: page -> (instant root selector, instant knob test id, sidebar knob key, sidebar lo, step)
PATHS = {
    ADVANTAGES: ("[data-testid=rv-instant][data-state=ready]", "rv-gamma", "gamma", 0.0, 0.01),
    LOCAL_GLOBAL: ("[data-testid=rv-lg-instant][data-state=ready]", "rv-lg-G", "G", 1.0, 1.0),
}
NO_PANEL = "no instant panel on this page yet"
#: sidebar knobs that live mode keeps in the Sample form, and that form's button key
#: (``ui.state.KEY_SAMPLE_APPLY``; bench does not import ui)
FORM_KNOBS = frozenset({"G"})
SAMPLE_APPLY = "sample_apply"
MOVE_TIMEOUT_MS = 180_000
PANEL_WAIT_MS = 20_000


class Seeds:
    """Hands out sampling seeds never used before in this run (a fresh cache key each block)."""

    def __init__(self, first: int) -> None:
        self.next_seed = first

    def take(self) -> int:
        """The next unused seed."""
        seed = self.next_seed
        self.next_seed += 1
        return seed


def _stats(prefix: str, ms: list[float]) -> dict[str, float | None]:
    """``<prefix>_median_ms``, ``_p95_ms`` (nearest rank), ``_max_ms`` of the samples."""
    xs = sorted(x for x in ms if not math.isnan(x))
    if not xs:
        return {f"{prefix}_median_ms": None, f"{prefix}_p95_ms": None, f"{prefix}_max_ms": None}
    p95 = xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)]
    return {
        f"{prefix}_median_ms": round(statistics.median(xs), 2),
        f"{prefix}_p95_ms": round(p95, 2),
        f"{prefix}_max_ms": round(xs[-1], 2),
    }


def _fresh_values(lo: float, hi: float, step: float, current: float, n: int) -> list[float]:
    """``n`` values of the slider grid, each different from the one before and from ``current``.

    Walks down from ``current``, then up from it; only when ``n`` exceeds the grid does it
    start over (the client path recomputes in the browser either way: no cache to hit).
    """
    count = round((hi - lo) / step) + 1
    grid = [round(lo + i * step, 6) for i in range(count)]
    below = [v for v in reversed(grid) if v < current - step / 2]
    above = [v for v in grid if v > current + step / 2]
    order = below + above
    if not order:
        return []
    return [order[i % len(order)] for i in range(n)]


def _url(base: str, page: str, query: dict[str, str]) -> str:
    return f"{base}/{page}?{urllib.parse.urlencode(query)}"


def _batch_name(query: dict[str, str]) -> str:
    return f"{len(query['prompts'].splitlines())}x{query['G']}x{query['T']}"


# --------------------------------------------------------------------------- the two paths


def client_path(page: Any, traffic: Traffic, where: str, moves: int) -> dict[str, Any]:
    """Move the page's instant knob ``moves`` times by input events (see the module docstring).

    Args:
        page: a playwright page already showing ``where`` (idle).
        traffic: the page's Traffic counter.
        where: ``ADVANTAGES`` or ``LOCAL_GLOBAL``.
        moves: how many input events.

    Returns:
        The ``browser_client_path`` line without the run context.
    """
    root, testid, _, _, _ = PATHS[where]
    line: dict[str, Any] = {"name": "browser_client_path", "page": where, "knob": testid}
    try:
        page.wait_for_selector(root, timeout=PANEL_WAIT_MS, state="attached")
    except Exception:
        return {**line, "status": NO_PANEL}
    knob = page.locator(f"[data-testid={testid}]")
    spec = knob.evaluate("(el) => [Number(el.min), Number(el.max), Number(el.step), el.value]")
    lo, hi, step, current = float(spec[0]), float(spec[1]), float(spec[2] or 1), float(spec[3])
    values = _fresh_values(lo, hi, step, current, moves)
    updates = page.locator(root).evaluate("(el) => Number(el.dataset.updates || 0)")
    mark = traffic.mark(page)
    timing = bench_inputs(page, testid, values)
    moved = traffic.since(page, mark)
    after = page.locator(root).evaluate("(el) => Number(el.dataset.updates || 0)")
    n = max(len(values), 1)
    return {
        **line,
        "status": "ok",
        "n": len(values),
        "distinct_values": len(set(values)),
        "values": [values[0], values[-1]] if values else [],
        **_stats("redraw", timing["sync"]),
        **_stats("painted", timing["painted"]),
        "ws_bytes_per_move": (moved["ws_sent"] + moved["ws_received"]) / n,
        "ws_frames": moved["ws_frames"],
        "http_bytes_per_move": moved["http_bytes"] / n,
        "http_responses": moved["http_responses"],
        "recomputes": after - updates,
        "_samples": timing,
    }


def _sidebar_thumb(page: Any, key: str) -> Any:
    return page.locator(f".st-key-{key} input[type='range'], .st-key-{key} [role=slider]").first


def open_block(
    page: Any, base: str, where: str, query: dict[str, str], seeds: Seeds
) -> dict[str, str]:
    """Open ``where`` on the batch ``query`` with a fresh seed; returns the query used."""
    q = {**query, "seed": str(seeds.take())}
    goto(page, _url(base, where, q))
    return q


def server_path(
    page: Any,
    traffic: Traffic,
    base: str,
    where: str,
    query: dict[str, str],
    seeds: Seeds,
    moves: int,
    deadline: float | None = None,
    opened: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Move the sidebar slider of ``where`` one key step down per move, a new value each time.

    A block starts where ``query`` leaves the slider and walks down to its minimum; then the
    page is re-opened on the next seed (not timed) and the walk starts again.

    Args:
        page: a playwright page; ``opened`` says which block it shows (None: open one).
        traffic: the page's Traffic counter.
        base: server base URL.
        where: ``ADVANTAGES`` or ``LOCAL_GLOBAL``.
        query: the batch query (its ``seed`` is replaced by fresh ones).
        seeds: the run's seed allocator.
        moves: how many moves at most.
        deadline: time.monotonic() after which no move starts (None: no limit).
        opened: the query of the block the page already shows at its start value.

    Returns:
        The ``browser_server_path`` line without the run context, plus ``_samples``.
    """
    _, _, key, lo, step = PATHS[where]
    script, painted, sent, received, http, ends = [], [], [], [], [], []
    used_seeds, final_ok, moved_to = [], True, []
    q = opened
    value = _slider_now(page, key) if q is not None else lo
    while len(script) < moves and (deadline is None or time.monotonic() < deadline):
        if q is None or value - step < lo - 1e-9:
            if q is not None:
                final_ok &= _url_value_is(page, key, value)
            q = open_block(page, base, where, query, seeds)
            value = _slider_now(page, key)
        if int(q["seed"]) not in used_seeds:
            used_seeds.append(int(q["seed"]))
        n = run_mark(page)
        mark = traffic.mark(page)
        thumb = _sidebar_thumb(page, key)
        thumb.focus()
        page.keyboard.press("ArrowLeft")
        if key in FORM_KNOBS and q.get("live") == "true":
            # live mode: G sits in the sidebar's Sample form and applies on its button
            page.locator(f".st-key-{SAMPLE_APPLY} button").first.click()
        page.wait_for_function(MOVE_DONE_JS, arg=n, timeout=MOVE_TIMEOUT_MS)
        lat = page.evaluate(MOVE_LATENCY_JS)
        wait_idle(page)
        moved = traffic.since(page, mark)
        value = round(value - step, 6)
        moved_to.append(value)
        script.append(lat["script"])
        painted.append(lat["painted"])
        sent.append(moved["ws_sent"])
        received.append(moved["ws_received"])
        http.append(moved["http_bytes"])
        ends.append(time.monotonic())
    if q is not None and script:
        final_ok &= _url_value_is(page, key, value)
    return {
        "name": "browser_server_path",
        "page": where,
        "knob": f"sidebar {key}",
        "n": len(script),
        "values": [moved_to[0], moved_to[-1]] if moved_to else [],
        "seeds": used_seeds,
        **_stats("run_finished", script),
        **_stats("painted", painted),
        "ws_sent_bytes_per_move": round(statistics.mean(sent), 1) if sent else None,
        "ws_received_bytes_per_move": round(statistics.mean(received), 1) if received else None,
        "ws_bytes_per_move": round(
            statistics.mean(a + b for a, b in zip(sent, received, strict=True)), 1
        )
        if sent
        else None,
        "http_bytes_per_move": round(statistics.mean(http), 1) if http else None,
        "final_value_ok": bool(final_ok and script),
        "_samples": {"painted": painted, "script": script, "ends": ends},
    }


def _slider_now(page: Any, key: str) -> float:
    """The sidebar slider's current value (its thumb's aria-valuenow)."""
    raw = _sidebar_thumb(page, key).evaluate("(el) => el.getAttribute('aria-valuenow') ?? el.value")
    return round(float(raw), 6)


def _url_value_is(page: Any, key: str, value: float) -> bool:
    params = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(page.url).query))
    try:
        return math.isclose(float(params.get(key, "nan")), value, abs_tol=1e-9)
    except ValueError:
        return False


# --------------------------------------------------------------------------- server script time


class _Recording:
    """A websocket wrapper that keeps every received message (sized and parsed afterwards)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.received: list[bytes] = []

    async def send(self, data: bytes) -> None:
        await self.ws.send(data)

    async def recv(self) -> bytes:
        data = await self.ws.recv()
        self.received.append(data)
        return data

    async def close(self) -> None:
        await self.ws.close()


def _bytes_by_kind(messages: list[bytes]) -> dict[str, int]:
    """Bytes of ForwardMsgs by what they carry (element kind for new elements)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: TID251 (wire format only)

    out: dict[str, int] = {}
    for data in messages:
        fm = ForwardMsg()
        fm.ParseFromString(data)
        kind = fm.WhichOneof("type") or "?"
        if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
            kind = fm.delta.new_element.WhichOneof("type") or "?"
        out[kind] = out.get(kind, 0) + len(data)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


async def _probe(
    base: str, where: str, query: dict[str, str], seeds: Seeds, moves: int
) -> tuple[list[float], list[bytes]]:
    """The same sidebar moves from a websocket protocol client alone.

    Returns:
        (ms per rerun, every message the moves received).
    """
    key = PATHS[where][2]
    out: list[float] = []
    received: list[bytes] = []
    while len(out) < moves:
        q = {**query, "seed": str(seeds.take())}
        s = st_client.Session(base)
        await s.connect()
        s.ws = rec = _Recording(s.ws)
        try:
            res = await s.run(page=where, query=urllib.parse.urlencode(q))
            if res.status != "FINISHED_SUCCESSFULLY" or key not in res.widgets:
                raise RuntimeError(f"probe could not open {where}: {res.status} {res.exceptions}")
            spec = res.widgets[key]
            start = float(_current(s.query, key, spec))
            values = _fresh_values(spec.lo, spec.hi, spec.step, start, 10_000)
            values = list(dict.fromkeys(values))  # each grid value once per seed
            for v in values[: moves - len(out)]:
                keep = {
                    k: _current(s.query, k, w)
                    for k, w in s.widgets.items()
                    if k in classroom_load.TRACKED and k != key
                }
                rec.received.clear()
                # Advantages' gamma reruns the sidebar's fragment (its page follows in the browser)
                res = await s.run(changes={key: v}, widgets=s.widgets, keep=keep)
                if res.status not in st_client.FINISHED:
                    raise RuntimeError(f"probe move {key}={v}: {res.status}")
                out.append(res.ms)
                received.extend(rec.received)
        finally:
            await s.close()
    return out, received


def _current(query: str, key: str, widget: st_client.Widget) -> Any:
    """The value the URL gives a widget (what the browser would resend), else its default."""
    raw = dict(urllib.parse.parse_qsl(query)).get(key)
    if raw is None:
        return widget.default
    if widget.kind == st_client.CHECKBOX:
        return raw.lower() == "true"
    return float(raw)


def server_script_time(
    base: str, where: str, query: dict[str, str], seeds: Seeds, moves: int
) -> dict[str, Any]:
    """The ``server_script_time`` line: the sidebar moves of ``where`` alone, no browser."""
    ms, received = st_client.run_coroutine(_probe(base, where, query, seeds, moves))
    n = max(len(ms), 1)
    return {
        "name": "server_script_time",
        "page": where,
        "knob": f"sidebar {PATHS[where][2]}",
        "n": len(ms),
        **_stats("rerun", ms),
        "received_bytes_per_move": round(sum(map(len, received)) / n),
        "received_bytes_per_move_by_kind": {
            k: round(v / n) for k, v in _bytes_by_kind(received).items()
        },
        "client": (
            "websocket protocol client (benchmarks.st_client.Session), alone: "
            "rerun -> script_finished"
        ),
    }


# --------------------------------------------------------------------------- the run


_T0 = time.monotonic()


def _emit(line: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    full = {**{k: v for k, v in line.items() if not k.startswith("_")}, **context}
    full["load1"] = round(os.getloadavg()[0], 2)
    full["t_s"] = round(time.monotonic() - _T0, 1)
    print(json.dumps(full), flush=True)
    return full


def _under_load(
    browser: Any,
    srv: Server,
    query: dict[str, str],
    seeds: Seeds,
    args: argparse.Namespace,
    n: int,
    solo: dict[str, dict[str, Any]],
) -> None:
    """The browser student on Advantages while ``n`` simulated students use the server."""
    ctx = {"students": n, "batch": _batch_name(query)}
    page, traffic, context = _new_page(browser)
    try:
        opened = open_block(page, srv.base, ADVANTAGES, query, seeds)
        result: dict[str, Any] = {}

        def students() -> None:
            try:
                result["res"] = classroom_load.run_classroom(
                    srv.base,
                    n,
                    args.seconds,
                    live_students=args.live,
                    seed=args.seed,
                    server_pid=srv.pid,
                )
            except Exception as err:  # reported in the line, the run goes on
                result["error"] = repr(err)

        t0 = time.monotonic()
        thread = threading.Thread(target=students, daemon=True)
        thread.start()
        deadline = t0 + args.seconds - 0.5
        time.sleep(min(2.0, args.seconds / 5))  # the students connect and open their pages
        client = client_path(page, traffic, ADVANTAGES, args.moves)
        client_under = client.get("n", 0) if time.monotonic() <= t0 + args.seconds else 0
        server = server_path(
            page, traffic, srv.base, ADVANTAGES, query, seeds, args.moves, deadline, opened
        )
        server_under = sum(1 for t in server["_samples"]["ends"] if t <= t0 + args.seconds)
        _emit(client, {**ctx, "moves_under_load": client_under})
        _emit(server, {**ctx, "moves_under_load": server_under})
        thread.join()
    finally:
        context.close()
    res = result.get("res")
    if res is not None:
        line = res.summary()
        line["health_after"] = health(srv.base)
        _emit(line, {})
    students_line = res.summary() if res is not None else {}
    _emit(
        {
            "name": "classroom_under_load",
            "page": ADVANTAGES,
            "client_moves_under_load": client_under,
            "server_moves_under_load": server_under,
            "client_redraw_median_ms": client.get("redraw_median_ms"),
            "client_redraw_p95_ms": client.get("redraw_p95_ms"),
            "client_painted_median_ms": client.get("painted_median_ms"),
            "client_ws_bytes_per_move": client.get("ws_bytes_per_move"),
            "server_painted_median_ms": server["painted_median_ms"],
            "server_painted_p95_ms": server["painted_p95_ms"],
            "solo_client_redraw_median_ms": solo.get("client", {}).get("redraw_median_ms"),
            "solo_server_painted_median_ms": solo.get("server", {}).get("painted_median_ms"),
            "students_p50_ms": students_line.get("p50_ms"),
            "students_p95_ms": students_line.get("p95_ms"),
            "students_steady_p95_ms": students_line.get("steady_p95_ms"),
            "students_reruns_per_s": students_line.get("reruns_per_s"),
            "students_errors": students_line.get("errors"),
            "students_isolation_ok": students_line.get("isolation_ok"),
            "load_error": result.get("error"),
        },
        ctx,
    )


def _new_page(browser: Any) -> tuple[Any, Traffic, Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    traffic = Traffic()
    traffic.attach(page)
    return page, traffic, context


def browser_benchmarks(srv: Server, query: dict[str, str], args: argparse.Namespace) -> None:
    """Part 1 (alone) and part 2 (under load) of the module docstring."""
    from playwright.sync_api import sync_playwright

    seeds = Seeds(int(query["seed"]))
    ctx = {"students": 0, "batch": _batch_name(query)}
    solo: dict[str, dict[str, Any]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for where in (ADVANTAGES, LOCAL_GLOBAL):
                page, traffic, context = _new_page(browser)
                try:
                    opened = open_block(page, srv.base, where, query, seeds)
                    client = client_path(page, traffic, where, args.moves)
                    _emit(client, ctx)
                    server = server_path(
                        page, traffic, srv.base, where, query, seeds, args.moves, opened=opened
                    )
                    _emit(server, ctx)
                    _emit(server_script_time(srv.base, where, query, seeds, args.moves), ctx)
                finally:
                    context.close()
                if where == ADVANTAGES:
                    solo = {"server": server, "client": client}
            for n in args.students:
                _under_load(browser, srv, query, seeds, args, n, solo)
        finally:
            browser.close()


def sampling_benchmarks(runs: int, model: str | None = None) -> None:
    """Part 3: ``benchmarks.sampling``'s lecture request and CPU decode line.

    Args:
        runs: timed runs after one warm-up (each part).
        model: model spec (None: the bundled model).
    """
    bundle = load_models(model, device="cpu", dtype="float32")
    parts: dict[str, Callable[[], list[dict]]] = {
        "lecture": lambda: bench_sampling.bench_lecture(bundle, runs=runs),
        "decode": lambda: bench_sampling.bench_decode(bundle, rows=8, new_tokens=64, runs=runs),
    }
    for part, fn in parts.items():
        try:
            lines = fn()
        except Exception as err:  # benchmarks.sampling is being changed: say so, keep the rest
            lines = [{"what": part, "error": repr(err)}]
        for line in lines:
            _emit({"name": "sampling", "part": part, **line}, {})


def main(argv: list[str] | None = None) -> int:
    """CLI: every line of the module docstring in one run."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks --classroom", description=__doc__)
    ap.add_argument("--classroom", action="store_true", help="(accepted for the dispatcher)")
    ap.add_argument("--students", type=int, nargs="+", default=None, help="N values (5 15 30)")
    ap.add_argument("--seconds", type=float, default=None, help="load per N (default 20)")
    ap.add_argument("--moves", type=int, default=None, help="moves per path (default 20)")
    ap.add_argument("--live", type=int, default=3, help="students sampling live at once")
    ap.add_argument("--seed", type=int, default=0, help="the simulated students' seed")
    ap.add_argument("--sampling-runs", type=int, default=3)
    ap.add_argument("--skip-sampling", action="store_true")
    ap.add_argument("--sampling-model", default=None, help="model spec (default: bundled)")
    ap.add_argument("--quick", action="store_true", help="tiny settings (the smoke test)")
    args = ap.parse_args(argv)
    quick = args.quick
    args.students = args.students or ([2] if quick else [5, 15, 30])
    args.seconds = args.seconds or (6.0 if quick else 20.0)
    args.moves = args.moves or (3 if quick else 20)
    if not 0 < args.seconds <= 600 or not all(0 < n <= 200 for n in args.students):
        ap.error("--seconds in (0, 600], --students in [1, 200]")
    if not 0 < args.moves <= 500:
        ap.error("--moves in [1, 500]")
    query = QUICK if quick else CLASSROOM
    started = time.monotonic()
    with streamlit_server() as srv:
        browser_benchmarks(srv, query, args)
        tracebacks = srv.tracebacks()
        ok = health(srv.base)
        _emit({"name": "server", "tracebacks": len(tracebacks), "health": ok}, {})
    if not (args.skip_sampling or quick):
        sampling_benchmarks(args.sampling_runs, args.sampling_model)
    _emit({"name": "classroom_done", "wall_s": round(time.monotonic() - started, 1)}, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
