"""``python -m benchmarks``: dispatch to one benchmark family (see the package docstring).

``--speed`` runs, one after the other, every figure of the "speed where a lecture waits" list,
each with its peer in the same run and a ``context`` line (commit, load average) per family:

1. the training step against TRL's GRPOTrainer (``--train --peer trl``, 3 steps);
2. the Update page's step, 1 x 16 x 32 tokens on SmolLM2, against the plain transformers + peft
   loop, and as the page takes it (``--update --models smollm2 --shapes 1x16x32 --as-page``);
3. the lecture request, 2 x 8 x 64 with both scorings, with the memory-bandwidth and compute
   floors (``--sampling --only lecture --no-rss``);
4. big runs: the 512-prompt (1.57 GB) board dump written to a temp folder, then the reader as
   it was when the speed issue was filed (``baseline``: commit 9bed76f^, run from its archived
   tree), the chosen reader, the reader before simdjson (``scan_plain``), pyarrow's JSON reader
   and polars' NDJSON reader (a dev-only peer, skipped when absent) on it, time, CPU time and
   peak memory (``--runs --phases write,baseline,scan,scan_plain,pyarrow,polars``);
5. the reward -> advantage pipeline against its loop peer, and ``run`` against the time inside
   its stage functions and, for verl, verl's own ``compute_advantage`` (the default family).

``--speed --quick`` passes ``--quick`` to the pipeline family only (the model families have no
smaller form that still measures the lecture's shapes).
"""

import sys

from benchmarks.pipeline import main

SPEED = (
    ["--train", "--peer", "trl", "--model", "smollm2", "--steps", "3"],
    ["--update", "--models", "smollm2", "--shapes", "1x16x32", "--as-page"],
    ["--sampling", "--only", "lecture", "--no-rss", "--cpu-only"],
)
#: the big-run readers (item 4 of the list), after the model families
RUNS = ["--runs", "--phases", "write,baseline,scan,scan_plain,pyarrow,polars"]


def speed(argv: list[str]) -> int:
    """Run every family of the speed list (module docstring); the first failing code wins."""
    code = 0
    for family in (*SPEED, RUNS):
        code = code or main(list(family))
    return code or main(["--quick"] if "--quick" in argv else [])


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(speed(args) if args[:1] == ["--speed"] else main(args))
