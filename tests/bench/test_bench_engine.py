"""The engine and GPU benchmarks run and print their lines (structure only, never times).

The engine benchmark runs against the stub server over the tiny model (``tests/lm/engine_stub``);
the real server's figures come from ``python -m benchmarks --engine`` (README). The GPU
script runs in its ``--cpu-check`` form.
"""

import json

from benchmarks import engine as engine_bench
from benchmarks import gpu
from benchmarks.pipeline import main
from roll_viz.lm.engine import LocalEngine
from roll_viz.lm.engine_http import HttpEngine
from roll_viz.lm.models import load_models
from tests.lm.engine_stub import SERVED, Stub


def _lines(capsys):
    return [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]


def test_engine_students_side_by_side(capsys):
    bundle = load_models("tiny", device="cpu", dtype="float32")
    stub = Stub(LocalEngine(bundle))
    try:
        engine = HttpEngine(stub.url, SERVED)
        engine_bench.bench_students(bundle, engine, [1, 2])
        engine_bench.bench_identical(bundle, engine, 2)
    finally:
        stub.close()
    lines = _lines(capsys)
    students = [x for x in lines if x["what"] == "engine_students"]
    assert [(x["students"], x["path"]) for x in students] == [
        (1, "in-process"),
        (1, "engine"),
        (2, "in-process"),
        (2, "engine"),
    ]
    assert all(len(x["per_student_s"]) == x["students"] and x["tokens"] > 0 for x in students)
    assert [x["students"] for x in lines if x["what"] == "engine_vs_in_process"] == [1, 2]
    assert next(x for x in lines if x["what"] == "engine_identical")["shared"] is True


def test_engine_bench_without_a_server_says_so(capsys):
    assert main(["--engine", "--url", "http://127.0.0.1:1"]) == 1
    assert "cannot be reached" in capsys.readouterr().err


def test_gpu_script_runs_on_the_cpu(capsys):
    assert gpu.main(["--cpu-check"]) == 0
    whats = [x["what"] for x in _lines(capsys)]
    assert whats == [
        "gpu_device", "gpu_sample_in_process", "gpu_sample_vllm", "gpu_update_step",
        "gpu_train_step", "gpu_peak_memory", "gpu_bench_done",
    ]  # fmt: skip
