import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_prints_json_lines():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    names = [line["name"] for line in lines]
    assert names[:3] == ["pipeline", "pipeline", "gae_scan"]
    assert {"run:roll", "run:verl", "run:openrlhf", "run:trl"} <= set(names)
    for line in lines[:3]:
        assert line["median_ms"] > 0
        assert line["loop_median_ms"] > 0
        assert line["max_abs_diff_vs_loop"] < 1e-9
    assert "loop_note" in lines[1]
