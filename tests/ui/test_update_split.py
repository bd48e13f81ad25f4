"""AppTest of the Update page's order: the step's figures first, delta log pi after a re-score.

Also the timing split beside the result and the base-matmul precision select (tiny model).
"""

import json
import re
from types import SimpleNamespace

import pytest
import torch
from streamlit.testing.v1 import AppTest

from roll_viz.lm import update
from roll_viz.ui import update_page as upd
from roll_viz.views import update_text
from tests.ui import apptest

LIVE = {"preset": "quantum", "live": "true", "G": "2", "T": "8"}
STEP_FIGURES = {"upd_grad_heatmap", "upd_loss_terms", "upd_ratio", "upd_aggregation", "upd_seconds"}
DELTA_FIGURES = {"upd_delta_heatmap", "upd_delta_scatter"}
SPLIT = re.compile(
    r"^Step \d+\.\d+ s \(forward \d+\.\d+, backward \d+\.\d+, optimizer \d+\.\d+\);  \n"
    r"Delta log pi re-score \d+\.\d+ s\.$"
)


def _reset_adapter() -> None:
    at = apptest.open_page("update", **LIVE)
    at.button(key=upd.KEY_RESET).click().run()


@pytest.fixture(autouse=True)
def _fresh_adapter():
    """AppTests share one session id: start and leave each test with the adapter at step 0.

    Before as well as after: an earlier module's test (the Update page's own) may have left a
    step in the session's adapter, and these tests count steps.
    """
    _reset_adapter()
    yield
    _reset_adapter()


def open_page(**params: str) -> AppTest:
    at = apptest.open_page("update", **{**LIVE, **params})
    assert not at.exception, [e.message for e in at.exception]
    return at


def charts(at: AppTest) -> set[str]:
    return {el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")}


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_step_figures_come_first_then_delta_log_pi(monkeypatch):
    calls = []
    real = update.rescore

    def held(policy, rollout, result):
        calls.append(result.step)
        raise ValueError("held by the test")

    monkeypatch.setattr(upd, "rescore", held)
    at = open_page()
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    # the step is drawn without its re-score: every step figure, no delta log pi yet
    assert charts(at) >= STEP_FIGURES
    assert not DELTA_FIGURES & charts(at)
    assert calls == [1]
    assert "Step 1 of this session's adapter" in markdown(at)
    assert "delta log pi follows from the re-score" in markdown(at)
    assert any(c.value.endswith("Delta log pi re-score running...") for c in at.caption)
    assert [s.state for s in at.status if "held by the test" in s.label] == ["error"]
    seconds = json.loads(next(e for e in at.get("plotly_chart") if "upd_seconds" in e.proto.id)
                         .proto.spec)  # fmt: skip
    assert "rescore" in seconds["data"][0]["y"]

    # the next run re-scores the stored step (no second step) and draws delta log pi
    monkeypatch.setattr(upd, "rescore", lambda *a: calls.append("real") or real(*a))
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert calls == [1, "real"]
    assert charts(at) >= STEP_FIGURES | DELTA_FIGURES
    assert "Step 1 of this session's adapter" in markdown(at)
    assert "mean |delta log pi| = **" in markdown(at)
    assert any(SPLIT.match(c.value) for c in at.caption), [c.value for c in at.caption]

    # the filled result stays in the session: a rerun neither steps nor re-scores again
    at.run()
    assert calls == [1, "real"]
    assert "Step 1 of this session's adapter" in markdown(at)
    assert charts(at) >= DELTA_FIGURES


def test_one_click_draws_the_step_and_its_delta_with_the_timing_split():
    at = open_page()
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert charts(at) >= STEP_FIGURES | DELTA_FIGURES
    assert any(SPLIT.match(c.value) for c in at.caption), [c.value for c in at.caption]
    assert not any("Base matmuls in bf16" in i.value for i in at.info)
    _, result = at.session_state[upd.KEY_RESULT]
    assert result.config.rescore is False
    assert result.delta is not None
    assert result.seconds["rescore"] > 0


def test_precision_select_bf16_is_said_beside_the_result():
    at = open_page(upd_precision="bf16")
    assert at.selectbox(key=upd.KEY_PRECISION).value == "bf16"
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    info = [i.value for i in at.info if "Base matmuls in bf16" in i.value]
    assert info
    assert "up to 0.207 per token (mean 0.033" in info[0]
    _, result = at.session_state[upd.KEY_RESULT]
    assert result.config.precision == "bf16"
    assert result.delta is not None


def test_timing_split_reads_tenths_on_a_real_model():
    sec = {"forward": 2.04, "backward": 2.51, "optimizer": 0.06, "rescore": 1.98, "total": 6.6}
    result = SimpleNamespace(seconds=sec, delta=torch.zeros(1))
    assert update_text.timing_markdown(result) == (
        "Step 4.6 s (forward 2.0, backward 2.5, optimizer 0.06);  \nDelta log pi re-score 2.0 s."
    )
    pending = SimpleNamespace(seconds={**sec, "rescore": 0.0}, delta=None)
    assert update_text.timing_markdown(pending).endswith(";  \nDelta log pi re-score running...")


def test_precision_select_bad_link_value_gives_the_notice():
    at = open_page(upd_precision="fp8")
    notices = [w.value.replace("\\", "") for w in at.warning]  # the notice is escaped Markdown
    assert any("upd_precision=fp8 is not allowed" in w and "using float32" in w for w in notices)
    assert at.selectbox(key=upd.KEY_PRECISION).value == "float32"


@pytest.mark.parametrize("slow", [True, False])
def test_bf16_says_when_this_servers_cpu_makes_it_slower(monkeypatch, slow):
    monkeypatch.setattr(upd, "bf16_slower_than_float32", lambda: slow)
    at = open_page(upd_precision="bf16")
    assert (upd.BF16_SLOW_HERE in [c.value for c in at.caption]) is slow
    at = open_page(upd_precision="float32")
    assert upd.BF16_SLOW_HERE not in [c.value for c in at.caption]
