"""``python -m roll_viz sample``: one JSON object per run, and the exit code for a bad config."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args):
    env = dict(os.environ, ROLL_VIZ_MODEL="tiny", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "roll_viz", "sample", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_cli_prints_one_json_object():
    proc = run_cli(
        "--prompt",
        "What is 2 + 3?",
        "--prompt",
        "Hi",
        "--group-size",
        "2",
        "--max-new-tokens",
        "5",
        "--seed",
        "3",
        "--policy",
        "steered",
        "--reward",
        "arithmetic",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["samples"]) == 4
    assert data["reward"] == "arithmetic"
    assert data["meta"]["policy_mode"] == "steered"
    assert data["meta"]["seed"] == 3
    for s in data["samples"]:
        n = len(s["token_ids"])
        assert 1 <= n <= 5
        assert len(s["tokens"]) == len(s["logprobs"]) == len(s["ref_logprobs"]) == len(s["kl"]) == n
        assert s["finish_reason"] in {"eos", "length"}
        assert isinstance(s["reward"], float)
        assert isinstance(s["response"], str)
        assert s["prompt"] in {"What is 2 + 3?", "Hi"}


def test_cli_rejects_bad_config():
    proc = run_cli("--prompt", "Hi", "--group-size", "0")
    assert proc.returncode == 2
    assert "group_size" in proc.stderr
