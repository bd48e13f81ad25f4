"""The chart text alternative of roll_viz/ui/a11y.js (``describeFigure``) under Node.

The browser suite checks that every chart gets a label; these cases pin what the label says:
the title (tags stripped; subplot titles when there is none), the axis titles, each trace's kind,
name and numbers (all of them when 12 or fewer, else the range), a heatmap's size, range and
blank cells. Skipped only when ``node`` is missing and REQUIRE_E2E is not set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roll_viz" / "ui" / "a11y.js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None and os.environ.get("REQUIRE_E2E") != "1", reason="node is missing"
)

RUN = """
const api = require(process.argv[1]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(cases.map(c => api.describeFigure(c.data, c.layout))));
"""


def describe(*cases: tuple[list, dict]) -> list[str]:
    """describeFigure(data, layout) of each case, run by Node on the shipped script."""
    assert NODE is not None, "REQUIRE_E2E=1 but node is missing (apt-get install -y nodejs)"
    payload = json.dumps([{"data": d, "layout": lay} for d, lay in cases])
    out = subprocess.run(
        [NODE, "-e", RUN, str(SCRIPT)], input=payload, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_few_numbers_are_listed_and_many_give_their_range():
    few = {"type": "bar", "name": "mean", "x": ["p0", "p1"], "y": [0.25, -1.5]}
    many = {"type": "scatter", "x": list(range(20)), "y": [i / 10 for i in range(20)]}
    layout = {"title": {"text": "<b>Reward</b> per prompt"}, "xaxis": {"title": {"text": "t"}}}
    (text,) = describe(([few, many], layout))
    assert text == (
        'Chart: Reward per prompt. x axis: t. bar "mean"; x: p0, p1; y: 0.25, -1.5. '
        "scatter; x 0 to 19; y 0 to 1.9"
    )


def test_a_heatmap_gives_its_size_range_and_blank_cells():
    z = [[0.5, None, -2.25], [1.0, 3.0, None]]
    (text,) = describe(([{"type": "heatmap", "name": "trace 0", "z": z}], {}))
    assert text == "Chart. heatmap, 2 by 3, values -2.25 to 3, 2 blank"  # default name dropped


def test_subplot_titles_stand_in_for_a_missing_title_and_traces_are_capped():
    traces = [{"type": "histogram", "x": [1, 2, 2, 3]} for _ in range(10)]
    layout = {"annotations": [{"text": "left"}, {"text": "right"}]}
    (text,) = describe((traces, layout))
    assert text.startswith("Chart: left; right. histogram, 4 values from 1 to 3")
    assert text.endswith("and 2 more traces")
    assert text.count("histogram") == 8


def test_hidden_traces_and_tiny_numbers():
    shown = {"type": "scatter", "y": [0.00012, 250000.0]}
    hidden = {"type": "scatter", "visible": False, "y": [1, 2]}
    (text,) = describe(([shown, hidden], {"title": "plain string title"}))
    assert text == "Chart: plain string title. scatter; y: 1.20e-4, 2.50e+5"


def test_the_script_survives_streamlits_html_sanitiser():
    """'<' then a letter or '/' anywhere makes the sanitiser drop the whole script (no fixes)."""
    source = SCRIPT.read_text(encoding="utf-8")
    assert not re.search(r"<[/\w]", source), re.search(r".{0,30}<[/\w].{0,30}", source)
