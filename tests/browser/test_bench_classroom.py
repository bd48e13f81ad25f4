"""``python -m benchmarks --classroom --quick`` end to end: a real server, Chromium, students.

Checks the structure and sanity of the printed lines (never the timings): the instant knobs send
nothing to the server, the sidebar moves do and land on the value walked to, every block of
server moves ran on a sampling seed of its own (no cache hit), the load saw no errors.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from benchmarks import classroom
from tests.browser.conftest import ROOT


def test_fresh_values_never_repeat_the_previous_or_the_current_value():
    values = classroom._fresh_values(0.0, 1.0, 0.01, 1.0, 5)
    assert values == [0.99, 0.98, 0.97, 0.96, 0.95]
    values = classroom._fresh_values(1.0, 8.0, 1.0, 3.0, 10)  # below, above, then again
    assert values == [2.0, 1.0, 4.0, 5.0, 6.0, 7.0, 8.0, 2.0, 1.0, 4.0]
    assert 3.0 not in values
    assert all(a != b for a, b in itertools.pairwise(values))
    assert classroom._fresh_values(1.0, 1.0, 1.0, 1.0, 3) == []  # a one-value slider


@pytest.fixture(scope="module")
def lines() -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--classroom", "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert out, proc.stderr[-3000:]
    return out


def _named(lines: list[dict], name: str) -> list[dict]:
    return [line for line in lines if line["name"] == name]


def test_client_path_moves_reach_no_server(lines):
    client = _named(lines, "browser_client_path")
    assert [(c["page"], c["students"]) for c in client] == [
        ("Advantages", 0),
        ("Local_vs_Global", 0),
        ("Advantages", 2),
    ]
    for c in client:
        assert c["status"] == "ok", c
        assert c["batch"] == "2x4x32"
        assert c["n"] == 3
        assert c["distinct_values"] == 3
        assert c["recomputes"] == 3  # the component recomputed once per move
        assert c["ws_bytes_per_move"] == 0
        assert c["ws_frames"] == 0
        assert c["http_bytes_per_move"] == 0
        assert 0 < c["redraw_median_ms"] <= c["redraw_max_ms"]
        assert c["painted_median_ms"] >= c["redraw_median_ms"]


def test_server_path_moves_rerun_on_fresh_values(lines):
    server = _named(lines, "browser_server_path")
    assert [(s["page"], s["knob"], s["students"]) for s in server] == [
        ("Advantages", "sidebar gamma", 0),
        ("Local_vs_Global", "sidebar G", 0),
        ("Advantages", "sidebar gamma", 2),
    ]
    for s in server[:2]:
        assert s["n"] == 3
    assert server[0]["values"] == [0.99, 0.97]  # walked down from gamma = 1, one step a move
    assert server[1]["values"] == [3.0, 1.0]  # G 4 -> 3 -> 2 -> 1, resampled each time
    for s in server:
        assert s["n"] >= 1
        assert s["final_value_ok"] is True
        assert s["ws_sent_bytes_per_move"] > 0  # the rerun request
        assert s["ws_received_bytes_per_move"] > 1000  # the redrawn page
        assert 0 < s["run_finished_median_ms"] <= s["painted_median_ms"]
    seeds = [seed for s in server for seed in s["seeds"]]
    assert len(seeds) == len(set(seeds)), "a block of moves reused a sampling seed"
    script = _named(lines, "server_script_time")
    assert [(s["page"], s["n"]) for s in script] == [("Advantages", 3), ("Local_vs_Global", 3)]
    for s in script:
        assert s["rerun_median_ms"] > 0
        assert s["received_bytes_per_move"] > 1000
        by_kind = s["received_bytes_per_move_by_kind"]
        assert "script_finished" in by_kind
        assert abs(sum(by_kind.values()) - s["received_bytes_per_move"]) <= len(by_kind)


def test_load_lines_and_the_side_by_side_summary(lines):
    (load_line,) = _named(lines, "classroom_load")
    assert load_line["students"] == 2
    assert load_line["errors"] == 0
    assert load_line["exceptions"] == 0
    assert load_line["error_alerts"] == 0
    assert load_line["isolation_ok"] is True
    assert load_line["health_after"] is True
    (side,) = _named(lines, "classroom_under_load")
    assert side["students"] == 2
    assert side["load_error"] is None
    assert side["client_ws_bytes_per_move"] == 0
    assert side["client_moves_under_load"] == 3
    assert side["server_moves_under_load"] >= 1
    assert side["students_reruns_per_s"] > 0
    assert side["students_p50_ms"] <= side["students_p95_ms"]
    assert side["solo_client_redraw_median_ms"] > 0
    assert side["solo_server_painted_median_ms"] > 0
    (srv,) = _named(lines, "server")
    assert srv["tracebacks"] == 0
    assert srv["health"] is True
    assert _named(lines, "sampling") == []  # --quick skips the model benchmark
    assert lines[-1]["name"] == "classroom_done"


def test_sampling_part_calls_bench_sampling(capsys):
    classroom.sampling_benchmarks(1, model="tiny")
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(line["name"] == "sampling" for line in out)
    assert not [line for line in out if "error" in line], out
    lecture = [line for line in out if line["part"] == "lecture" and "rows" in line]
    decode = [line for line in out if line["part"] == "decode"]
    # float, int8 and bf16 decode, each 2 prompts x 8 samples, next to the bandwidth floor
    assert [line["rows"] for line in lecture] == [16, 16, 16]
    assert all("bandwidth_floor_s" in line for line in lecture)
    assert any(line["what"] == "memory_bandwidth" for line in out if line["part"] == "lecture")
    assert {line["new_tokens"] for line in lecture + decode} == {64}
    assert {"hf_generate", "roll_viz_decode"} <= {line["what"] for line in decode}
    ours = [line for line in decode if line["what"] != "hf_generate"]
    assert all(line["speedup_vs_generate"] > 0 for line in ours)  # the peer, same run
    assert all(line["median_s"] > 0 for line in lecture + decode)
