"""The recorded episodes' token text: every id the shipped files use has its piece."""

from __future__ import annotations

from dataclasses import replace

from roll_viz.core.agentic.episode import Segment
from roll_viz.data import episode_pieces
from roll_viz.data.recorded_episodes import RECORDED_EPISODES, load_recorded_episodes


def test_every_recorded_token_has_its_text():
    missing = episode_pieces.recorded_ids() - set(episode_pieces.table())
    # regenerate with: python -m roll_viz.data.episode_pieces
    assert not missing, sorted(missing)[:20]


def test_pieces_join_to_the_recorded_text():
    episode = load_recorded_episodes(next(iter(RECORDED_EPISODES))).batch.episodes[0]
    shown = episode_pieces.pieces(episode)
    assert len(shown) == len(episode.token_ids)
    for seg in episode.segments:
        if seg.role == "user" and seg.turn < 0:
            start = sum(len(s.token_ids) for s in episode.segments[: episode.segments.index(seg)])
            text = "".join(shown[start : start + len(seg.token_ids)])
            assert seg.text in text  # the template's markers around the message's content
            break
    assert episode_pieces.eos_id() is not None


def test_an_unknown_id_reads_as_its_number():
    episode = load_recorded_episodes(next(iter(RECORDED_EPISODES))).batch.episodes[0]
    odd = replace(episode, segments=(Segment("user", "?", (10**9,), -1),))
    assert episode_pieces.pieces(odd) == (f"[{10**9}]",)
