"""The runs benchmark's phases at tiny sizes (numbers only in the benchmark, never asserted)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import runs as bench
from roll_viz.core.pipeline import run
from roll_viz.data.runs import fast_lines, load_step, open_run


def test_synthetic_dump_reads_back_and_the_loop_peer_agrees(tmp_path):
    info = bench.write_dump(tmp_path, P=3, G=4, T=32)
    assert info["rows"] == 12
    first = json.loads((tmp_path / bench.FILE_NAME).read_text().splitlines()[0])
    assert len(first["logprobs"]) == 32
    assert len(first["token_rewards"]) == 32
    scan = bench.phase_scan(tmp_path)
    assert (scan["samples"], scan["prompts"], scan["warnings"]) == (12, 3, 0)
    step = load_step(open_run(tmp_path), 0)
    n = int(sum(first["new_response_mask"]))
    assert step.logprobs[0, :n].tolist() == first["logprobs"][:n]
    assert step.token_rewards[0, n - 1].item() == first["reward"]
    batch = bench.make_batch(2, 4, 16)
    loop = bench.loop_peer(
        batch.scores.tolist(),
        batch.response_mask.tolist(),
        batch.logprobs.tolist(),
        batch.ref_logprobs.tolist(),
        4,
    )
    vec = run(batch, "roll", bench.CONFIG).advantages
    assert torch.allclose(torch.tensor(loop, dtype=torch.float64), vec, atol=1e-12)


def test_baseline_reader_runs_from_an_extracted_commit(tmp_path):
    dump, tree = tmp_path / "dump", tmp_path / "tree"
    dump.mkdir()
    bench.write_dump(dump, P=2, G=2, T=16)
    sha = bench.extract_commit("HEAD", tree)
    assert sha
    assert (tree / "roll_viz" / "data" / "runs" / "scan.py").is_file()
    record = bench.run_baseline(dump, tree)
    assert record["reader"] == str(tree / "roll_viz" / "__init__.py")
    assert (record["samples"], record["prompts"], record["warnings"]) == (4, 2, 0)
    assert record["kl_k3_mean"] == bench.phase_scan(dump)["kl_k3_mean"]


def test_a_phase_runs_with_its_process_tree_memory_sampled():
    code, out, _, pss = bench.run_sampled(
        [sys.executable, "-c", "import time; time.sleep(0.35); print('done')"]
    )
    assert (code, out.strip()) == (0, "done")
    if Path("/proc/self/smaps_rollup").exists():
        assert pss > 0
        assert bench.tree_pss_mb(os.getpid()) > 0


def test_the_plain_scan_phase_reads_what_the_chosen_one_reads(tmp_path, monkeypatch):
    bench.write_dump(tmp_path, P=2, G=3, T=16)
    chosen = bench.phase_scan(tmp_path)
    # the phase turns the simdjson path off for its process; monkeypatch puts it back after
    monkeypatch.setattr(fast_lines.FastLines, "object", fast_lines.FastLines.object)
    plain = bench.phase_scan_plain(tmp_path)
    with pytest.raises(fast_lines.SlowLine):
        fast_lines.FastLines().object(b'{"step": 0}')
    keys = ("samples", "prompts", "warnings", "kl_k3_mean")
    assert [plain[k] for k in keys] == [chosen[k] for k in keys] == [6, 2, 0, chosen["kl_k3_mean"]]
