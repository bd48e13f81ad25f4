"""A websocket client speaking Streamlit's protocol sends values no browser would send.

Figure of the defect: NaN in the Update page's integer epochs field gave the generic error page
and the session stayed broken on the next rerun; values beyond the Training fields' bounds too.
Here the same session sends them and must get no exception and a working next rerun; a value
that reaches the page (2.5 epochs, 7.5 steps: finite and in range but not whole) gets the
notice. A non-finite or out-of-range value of a float input never reaches the page: Streamlit's
float input puts it back to the default itself, before any page code runs, so there is nothing
left to name (the whole-number fields are float inputs for that reason: Streamlit's int input
crashed in ``int(nan)`` instead).
"""

from __future__ import annotations

import math

import pytest

from benchmarks.st_client import Session, run_coroutine

pytestmark = pytest.mark.server

TRAIN = "tab=Train+live"  # the Training page runs only its open tab
CASES = [  # page, query, key, crafted value, whether the page can name it
    ("Update", "preset=quantum", "upd_epochs", math.nan, False),
    ("Update", "preset=quantum", "upd_epochs", 2.5, True),
    ("Update", "preset=quantum", "upd_minibatches", 1e9, False),
    ("Training", TRAIN, "tr_steps", 1e12, False),
    ("Training", TRAIN, "tr_steps", 7.5, True),
    ("Training", TRAIN, "tr_horizon", -math.inf, False),
    ("Training", TRAIN, "tr_beta", math.nan, False),
]


async def _craft(base: str) -> list[tuple]:
    out = []
    for page, query, key, value, named in CASES:
        s = Session(base)
        await s.connect()
        try:
            first = await s.run(page=page, query=query)
            assert first.status == "FINISHED_SUCCESSFULLY", first.status
            assert key in first.widgets, sorted(first.widgets)
            hit = await s.run(crafted={key: value}, widgets=first.widgets)
            again = await s.run()
            texts = [p[3] for p in hit.parts if p[1] == "alert"]
            out.append((key, named, hit.status + "/" + again.status,
                        hit.exceptions + again.exceptions, hit.error_alerts + again.error_alerts,
                        texts))  # fmt: skip
        finally:
            await s.close()
    return out


def test_crafted_websocket_values_get_a_notice_and_the_session_lives(tiny_server):
    srv = tiny_server
    results = run_coroutine(_craft(srv.base))
    tracebacks = srv.tracebacks()
    for key, named, status, exceptions, errors, alerts in results:
        assert status == "FINISHED_SUCCESSFULLY/FINISHED_SUCCESSFULLY", (key, status)
        assert exceptions == [], (key, exceptions)
        assert errors == [], (key, errors)
        if named:
            assert any("is not allowed" in a for a in alerts), (key, alerts)
    assert tracebacks == []
