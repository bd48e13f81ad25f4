"""Pages that say they read no algorithm knob (``ui.steady_page``) draw the same under any knobs.

On such a page a sidebar knob move reruns nothing (``relay.move_mode`` "steady"): the page keeps
what it drew. That is right only if nothing in its main column reads beta, gamma, lambda, the
estimators, the clip, the whitening or the reward normalisation; here each one is opened with the
defaults and again with every one of those knobs moved, and its main column must be the same,
element by element (charts' figures, tables' data and every text included). The framework is not
moved: a framework switch reruns every page. The self-test: the Rewards page, which reads them,
is not the same.
"""

from __future__ import annotations

import pytest

from roll_viz import nav
from roll_viz.ui.state import (
    KEY_BETA,
    KEY_CLIP,
    KEY_ESTIMATOR,
    KEY_GAMMA,
    KEY_KL_ESTIMATOR,
    KEY_KL_IN_REWARD,
    KEY_LAM,
    KEY_NORM,
    KEY_WHITEN,
)
from tests.ui.apptest import ROOT, TIMEOUT, router

#: every knob of the sidebar's algorithm section but the framework, away from ROLL's defaults
MOVED = {
    KEY_ESTIMATOR: "grpo",
    KEY_BETA: 0.05,
    KEY_KL_ESTIMATOR: "k3",
    KEY_KL_IN_REWARD: True,
    KEY_GAMMA: 0.9,
    KEY_LAM: 0.5,
    KEY_CLIP: 1.5,
    KEY_WHITEN: True,
    KEY_NORM: "batch",
}


def _steady(page: nav.Page) -> bool:
    return "ui.steady_page()" in (ROOT / page.file).read_text()


STEADY = tuple(p.key for p in nav.PAGES if _steady(p))


def _text(proto) -> str:
    """An element's protobuf text, but a deferred download's per-session file id."""
    lines = str(proto).splitlines()
    return "\n".join(line for line in lines if not line.strip().startswith("deferred_file_id:"))


def _elements(block) -> list[str]:
    """Every element of ``block``, depth first, as its protobuf text (what the browser gets)."""
    out = []
    for child in getattr(block, "children", {}).values():
        if hasattr(child, "children") and child.children:
            out.extend(_elements(child))
        elif hasattr(child, "proto"):
            out.append(_text(child.proto))
    return out


def _main(page: str, moved: bool) -> list[str]:
    at = router(page)
    if moved:
        for key, value in MOVED.items():
            at.session_state[key] = value
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.message for e in at.exception]
    if moved:  # the knobs took: the sidebar drew the moved values
        assert at.session_state[KEY_GAMMA] == MOVED[KEY_GAMMA]
    return _elements(at.main)


def test_the_steady_pages_are_the_quiet_ones():
    # the chain's pages read the knobs; the lesson pair, the checks and the imports do not
    assert {"normalisation", "local_global", "vote", "lesson", "silent_bugs"} <= set(STEADY)
    assert not {"rewards", "kl", "advantages", "update", "sensitivity"} & set(STEADY)


@pytest.mark.parametrize("page", STEADY)
def test_a_steady_page_draws_the_same_under_other_knobs(page):
    before, after = _main(page, False), _main(page, True)
    assert before, f"{page}: nothing drawn"
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b]
    assert len(before) == len(after), f"{page} reads an algorithm knob: drop ui.steady_page()"
    assert not changed, (
        f"{page} reads an algorithm knob: element {changed[:1]} differs; "
        "drop ui.steady_page() from it"
    )


def test_self_test_a_page_that_reads_the_knobs_differs():
    assert _main("rewards", False) != _main("rewards", True)
