"""The training benchmark's plumbing (no model run: the peers are measured by the benchmark)."""

from benchmarks import train as bench
from benchmarks.__main__ import SPEED
from benchmarks.machine import context


def test_only_benchmark_lines_are_read_from_a_peer_s_output():
    assert bench.json_line('{"what": "step", "wall_s": 1.5}') == {"what": "step", "wall_s": 1.5}
    assert bench.json_line("{'train_runtime': 3.2, 'train_loss': 0.1}") is None  # TRL's log
    assert bench.json_line('{"loss": 0.1}') is None
    assert bench.json_line("  0%|          | 0/3") is None


def test_context_line_names_the_commit_and_the_load():
    line = context()
    assert line["what"] == "context"
    assert len(line["loadavg"]) == 3
    assert {"commit", "cores", "torch_threads", "avx512_bf16"} <= set(line)


def test_speed_runs_every_model_family_with_its_peer():
    families = [args[0] for args in SPEED]
    assert families == ["--train", "--update", "--sampling"]
    assert SPEED[0][1:3] == ["--peer", "trl"]
