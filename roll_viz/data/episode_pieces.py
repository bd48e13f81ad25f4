"""The display string of every token id in the recorded episodes, so they paint with no model.

A recorded episode (``data.recorded_episodes``) stores token ids. The Episodes page draws each
token as a chip, which needs its text: ``episode_pieces.json`` maps each id used by a recorded
file to the bundled tokenizer's ``decode([id])``, written by
``python -m roll_viz.data.episode_pieces`` (loads the bundled model's tokenizer once). An id
missing from the table (a file recorded after the table) is shown as ``[id]``; a test checks
that the shipped files need none.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from roll_viz.core.agentic.episode import Episode
from roll_viz.data.recorded_episodes import RECORDED_EPISODES, load_recorded_episodes
from roll_viz.lm.models import DEFAULT_MODEL, load_models

PIECES_FILE = Path(__file__).with_name("episode_pieces.json")
MAX_FILE_BYTES = 2 * 2**20


@lru_cache(maxsize=1)
def table() -> dict[int, str]:
    """The table: id -> display string (empty when the file is missing or too large)."""
    if not PIECES_FILE.is_file() or PIECES_FILE.stat().st_size > MAX_FILE_BYTES:
        return {}
    raw = json.loads(PIECES_FILE.read_text(encoding="utf-8"))
    return {int(k): str(v) for k, v in raw.get("pieces", {}).items()}


def pieces(episode: Episode) -> tuple[str, ...]:
    """Each token of ``episode`` as its display string (``[id]`` when the table lacks it)."""
    known = table()
    return tuple(known.get(t, f"[{t}]") for t in episode.token_ids)


def recorded_ids() -> set[int]:
    """Every token id of every shipped recorded file."""
    ids: set[int] = set()
    for name in RECORDED_EPISODES:
        for episode in load_recorded_episodes(name).batch.episodes:
            ids.update(episode.token_ids)
    return ids


def eos_id() -> int | None:
    """The recording tokenizer's end-of-turn id (the pad == EOS mistake), or None."""
    if not PIECES_FILE.is_file() or PIECES_FILE.stat().st_size > MAX_FILE_BYTES:
        return None
    value = json.loads(PIECES_FILE.read_text(encoding="utf-8")).get("eos_id")
    return None if value is None else int(value)


def write(decode_one, ids: Iterable[int], model: str, eos: int | None) -> None:
    """Write the table: ``decode_one(id)`` for each id, sorted, the model's name and EOS id."""
    body = {
        "model": model,
        "eos_id": eos,
        "pieces": {str(i): decode_one(i) for i in sorted(ids)},
    }
    PIECES_FILE.write_text(json.dumps(body, ensure_ascii=False, indent=0) + "\n", "utf-8")


def main() -> None:
    """Rebuild the table from the recorded files with the bundled model's tokenizer."""
    bundle = load_models(DEFAULT_MODEL)
    with bundle.lock:
        write(
            lambda i: bundle.tokenizer.decode([i]),
            recorded_ids(),
            bundle.name,
            bundle.eos_ids[0] if bundle.eos_ids else None,
        )
    sys.stdout.write(f"wrote {len(table.__wrapped__())} pieces to {PIECES_FILE}\n")


if __name__ == "__main__":
    main()
