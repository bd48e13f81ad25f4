"""Open pages in AppTest: through the router ``app.py`` (as a browser does) or a page script alone.

Page files and keys come from the one page table, ``roll_viz/nav.py``.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.core import pipeline
from roll_viz.core.records import Batch, RunningMoments
from roll_viz.ui.instant import SENT_STATE
from roll_viz.ui.instant.payload import subset_groups

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / nav.ENTRY)
TIMEOUT = 120


def page_file(page: str) -> str:
    """The script of page ``page`` (a ``nav.PAGES`` key), relative to the router."""
    return nav.page(page).file


@functools.cache
def _deep_links() -> Path:
    """A folder of empty files named after the pages' URL paths (``Token_KL.py``, ...)."""
    folder = Path(tempfile.mkdtemp(prefix="roll_viz_deep_links_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for page in nav.PAGES:
        if page.url_path:
            (folder / f"{page.url_path}.py").touch()
    return folder


def router(page: str | None = None, **params: str) -> AppTest:
    """The router opened at ``page`` (None = Home) with ``params``, as a deep link; not yet run.

    A browser opening ``/Token_KL?G=3`` asks the router for the page whose URL path is
    ``Token_KL``. ``st.Page`` names a page by the hash of its URL path, and before its first run
    AppTest hashes the name of the file given to ``switch_page``: an empty file named after the
    URL path therefore asks for the same page, in a fresh session, as the deep link does.
    """
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    if page is not None and page != nav.HOME:
        at.switch_page(str(_deep_links() / f"{nav.url_path(page)}.py"))
    return at


def open_page(page: str | None = None, **params: str) -> AppTest:
    """Open ``page`` (None = Home) through the router with ``params``; assert no exception."""
    at = router(page, **params)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def page_alone(page: str) -> AppTest:
    """The page script on its own (no router: the page draws the shared sidebar itself)."""
    return AppTest.from_file(str(ROOT / page_file(page)), default_timeout=TIMEOUT)


#: bulk id -> bulk of the instant components seen in this test process (a rerun of the same
#: session sends only the id: the browser keeps the batch)
_BULKS: dict[str, dict] = {}


def _decode(enc: dict | None):
    if enc is None:
        return None
    dtype = {"f8": "<f8", "u1": "u1", "i4": "<i4"}[enc["dtype"]]
    arr = np.frombuffer(base64.b64decode(enc["b64"]), dtype=dtype).reshape(enc["shape"])
    return torch.from_numpy(arr.copy()).to(torch.float64 if enc["dtype"] == "f8" else torch.long)


def _browser_drawn(at: AppTest, name: str) -> tuple[dict, Batch, torch.Tensor]:
    """The one ``name`` component of the page: (its data, the batch it draws from, the mask)."""
    found = [el.proto for el in at.get("bidi_component") if el.proto.component_name == name]
    assert len(found) == 1, f"{len(found)} {name} components on the page"
    data = json.loads(found[0].json)
    if data["bulk"] is None and data["bulk_id"] not in _BULKS:
        at.session_state[SENT_STATE] = {}  # as a tab that lost it: the next run sends it again
        at.run()
        return _browser_drawn(at, name)
    if data["bulk"] is not None:
        _BULKS[data["bulk_id"]] = data["bulk"]
    enc = _BULKS[data["bulk_id"]]["batch"]
    mask = _decode(enc["response_mask"]).to(torch.float64)
    batch = Batch(
        scores=_decode(enc["scores"]),
        response_mask=mask,
        group_ids=_decode(enc["group_ids"]),
        group_labels=tuple(enc["group_labels"]),
        logprobs=_decode(enc["logprobs"]),
        ref_logprobs=_decode(enc["ref_logprobs"]),
        values=_decode(enc["values"]),
        baseline_scores=_decode(enc["baseline_scores"]),
    )
    if data["payload"].get("follows_G") and data.get("G"):
        # a preset's whole batch: the browser draws the first G samples of every prompt
        batch = subset_groups(batch, int(data["G"]))
        mask = batch.response_mask
    return data, batch, mask


def _rows(values: torch.Tensor, mask: torch.Tensor) -> list[list[float | None]]:
    return [
        [float(a) if m > 0 else None for a, m in zip(row, mrow, strict=True)]
        for row, mrow in zip(values.tolist(), mask.tolist(), strict=True)
    ]


def estimator_grids(at: AppTest) -> dict[str, list[list[float | None]]]:
    """What the Advantages page's estimator heatmaps draw: title -> (B, T) rows, None on padding.

    The browser computes them with pipeline.js from the component's batch and the configs
    Python resolved (tests/js checks pipeline.js against ``pipeline.run`` to 1e-9); here the
    same inputs go through ``pipeline.run``; an estimator pipeline.js does not cover is drawn
    from the server's numbers sent with it. Titles as the page shows them ("gae (sidebar)").
    An estimator undefined for the batch is left out.
    """
    data, batch, mask = _browser_drawn(at, "roll_viz.instant_estimators")
    detail = data["detail"]
    grids = {}
    for est in detail["order"]:
        if est in detail["server"]:  # not computed by pipeline.js: the server's numbers
            sent = data["server"].get(est, {})
            if "advantages" not in sent:
                continue
            adv = _decode(sent["advantages"])
        else:
            try:
                adv = pipeline.run(batch, detail["framework"], detail["configs"][est]).advantages
            except ValueError:
                continue
        title = f"{est} (sidebar)" if est == detail["estimator"] else est
        grids[title] = _rows(adv, mask)
    return grids


def token_reward_grids(at: AppTest) -> dict[str, list[list[float | None]]]:
    """What the Token KL page's token-reward heatmaps draw: placement -> (B, T) rows.

    The analogue of ``estimator_grids``: pipeline.js runs the placement configs Python resolved
    ("in the reward", "as a loss term"); here ``pipeline.run`` does, on the component's batch.
    A placement the dialect lacks or that is undefined for the batch is left out.
    """
    data, batch, mask = _browser_drawn(at, "roll_viz.instant_token_rewards")
    detail = data["detail"]
    grids = {}
    for name, cfg in detail["placements"].items():
        try:
            rewards = pipeline.run(batch, detail["framework"], cfg).token_rewards
        except ValueError:
            continue
        grids[name] = _rows(rewards, mask)
    return grids


def reward_bars(at: AppTest) -> tuple[list[float], list[float], float]:
    """What the Rewards page's bars draw: (raw rewards, processed rewards, clip fraction).

    The browser runs pipeline.js on the component's batch with the sidebar's resolved config
    (``detail["config"]``) and the session's running moments (tests/js checks it against
    ``pipeline.run`` to 1e-9); here ``pipeline.run`` does. A config pipeline.js does not cover
    is drawn from the server's numbers sent with it.
    """
    data, batch, _mask = _browser_drawn(at, "roll_viz.instant_reward_bars")
    raw = batch.scores.tolist()
    if data["server"] is not None:
        return raw, data["server"]["rewards"], data["server"]["clip_frac"]
    detail, config = data["detail"], data["detail"]["config"]
    reads_running = any(v == "running" for v in config.values())
    running = RunningMoments(**data["running"]) if reads_running else None
    trace = pipeline.run(batch, detail["framework"], config, running=running)
    return raw, trace.rewards.tolist(), trace.clip_frac
