"""The sampling benchmark's lines on the tiny model (structure and peers; timings not asserted)."""

import os

import torch

from benchmarks import machine
from benchmarks import sampling as bench


def test_decode_lines_pair_every_variant_with_generate_at_the_same_thread_count(tiny):
    lines = bench.bench_decode(tiny, rows=2, new_tokens=3, runs=1)
    groups: dict[int, list[str]] = {}
    for line in lines:
        groups.setdefault(line["threads"], []).append(line["what"])
        assert line["median_s"] > 0
        assert line["tokens_per_s"] > 0
    assert set(groups) == {torch.get_num_threads(), os.cpu_count() or 1}
    for names in groups.values():
        assert names[0] == "hf_generate"
        assert "roll_viz_decode" in names
        assert "roll_viz_decode_int8" in names
    assert all("speedup_vs_generate" in line for line in lines if line["what"] != "hf_generate")


def test_lecture_lines_carry_the_estimate_target_and_bandwidth_floor(tiny):
    bandwidth, *lines = bench.bench_lecture(tiny, runs=1, bandwidth_gib=0.01)
    assert bandwidth["what"] == "memory_bandwidth"
    assert bandwidth["gb_per_s"] > 0
    assert [line["what"].rsplit("_", 2)[-2] for line in lines] == ["float", "int8", "bf16"]
    for line in lines:
        assert line["target_s"] == 5.0
        assert line["cpu_s_median"] > 0
        assert len(line["estimate_s_before_run"]) == 1
        assert line["bandwidth_floor_s"] >= 0
        assert set(line["phase_s"]) == set(bench.PhaseMarks.PHASES)
        assert line["phase_s"]["decode"] > 0
        assert line["phase_cpu_s"]["reference_pass_and_scores"] > 0  # steered: a reference pass
        assert sum(line["phase_s"].values()) <= line["median_s"] * 1.5 + 0.05
    assert lines[0]["bandwidth_floor_s"] >= lines[2]["bandwidth_floor_s"]
    compute = lines[0]["compute_floor"]  # the float line only: the matmuls of its decode
    assert (compute["rows"], lines[0]["compute_floor_s"]) == (16, compute["seconds"])
    assert all("compute_floor_s" not in line for line in lines[1:])


def test_decode_compute_floor_is_the_decode_flops_over_the_rates_at_that_row_count(
    tiny, monkeypatch
):
    asked = []

    def rate(rows, inner, cols, threads):
        asked.append((rows, inner, cols, threads))
        return 1e-3 if cols == 4 * inner else 2e-4  # GFLOP/s: body-shaped, head-shaped (slow)

    monkeypatch.setattr(machine, "gemm_rate", rate)
    floor = machine.decode_compute_floor(tiny.model, rows=4, steps=3, threads=1)
    assert floor["seconds"] > 0
    head = tiny.model.get_output_embeddings().weight
    body = sum(p.numel() for p in tiny.model.parameters()) - head.numel()
    hidden, vocab = head.shape[1], head.shape[0]
    assert asked == [(4, hidden, 4 * hidden, 1), (4, hidden, vocab, 1)]
    # 2 FLOPs per weight per row per step; each part at its own rate
    assert floor["seconds"] == round(2 * 4 * 3 * (body / 1e-3 + head.numel() / 2e-4) / 1e9, 2)
    assert floor["gflop"] == round(2 * 4 * 3 * (body + head.numel()) / 1e9, 1)


def test_gemm_rate_is_a_positive_rate_and_restores_the_thread_count():
    before = torch.get_num_threads()
    assert machine.gemm_rate(rows=4, inner=8, cols=16, repeats=2, threads=1) > 0
    assert torch.get_num_threads() == before


def test_int8_fidelity_line(tiny):
    line = bench.bench_int8_fidelity(tiny, rows=2, new_tokens=6)
    assert line["positions"] > 0
    assert line["mean_kl_float_vs_int8"] > 0  # int8 really differs
    assert line["max_kl_float_vs_int8"] >= line["mean_kl_float_vs_int8"]
    assert 0 <= line["top1_agreement"] <= 1
