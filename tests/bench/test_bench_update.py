"""The update benchmark's plumbing: the ours / ours-bf16 cases and the lines read from them."""

import json

import torch

from benchmarks import update as bench


def test_ours_and_bf16_cases_run_on_the_tiny_model():
    tensors, line = bench.one_case("tiny", (2, 2, 6), "ours")
    assert line["precision"] == "float32"
    assert line["impl"] == "ours"
    assert set(tensors) == {"delta", "before"}
    assert tensors["delta"].shape == (4, 6)
    bf16, line16 = bench.one_case("tiny", (2, 2, 6), "ours_bf16")
    assert line16["precision"] == "bf16"
    assert line16["impl"] == "ours bf16"
    assert not torch.equal(bf16["before"], tensors["before"])  # bf16 moves the log-probs


def test_oracle_and_bf16_effect_lines(capsys):
    before = torch.zeros(2, 3)
    out = {
        "ours": {"delta": torch.full((2, 3), 0.5), "before": before},
        "peer": {"delta": torch.full((2, 3), 0.25)},
        "ours_bf16": {"delta": torch.full((2, 3), 0.75), "before": before + 0.125},
    }
    bench._oracle_lines("tiny", "1x2x3", out)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0] == {
        "what": "oracle",
        "model": "tiny",
        "shape": "1x2x3",
        "max_abs_delta_diff": 0.25,
    }
    effect = lines[1]
    assert effect["what"] == "bf16_effect"
    assert effect["max_abs_logprob_gap"] == 0.125
    assert effect["mean_abs_delta_gap"] == 0.25
    assert effect["mean_abs_delta_fp32"] == 0.5


def test_the_page_case_takes_the_step_then_rescores_to_the_same_numbers():
    tensors, line = bench.one_case("tiny", (2, 2, 6), "ours")
    page, page_line = bench.one_case("tiny", (2, 2, 6), "ours_page")
    assert page_line["impl"] == "ours as the page"
    assert page_line["step_s"] > 0
    assert page_line["rescore_s"] > 0
    assert "step_s" not in line
    # step first and re-score after give the step's own delta log pi
    torch.testing.assert_close(page["delta"], tensors["delta"], atol=1e-5, rtol=0)
    assert page["delta"].abs().max() > 0
