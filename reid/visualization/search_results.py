"""One picture per query: the query, then its top-K gallery matches with their similarity.

Built from the tile primitives of ``reid.visualization.tiles`` so search pictures look like
the evaluator's ranked lists. Search results carry no ground truth, so match borders are a
neutral grey, or green/red when both the query's and the gallery's identities are known.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

from .tiles import MATCH_COLOR, MISMATCH_COLOR, QUERY_COLOR, TileGeometry, make_tile, read_rgb, results_row, write_rgb

NEUTRAL_COLOR = (110, 110, 110)
REJECTED_COLOR = (40, 40, 40)  # a match whose score is not above the decision threshold


def draw_matches(
    query_path: str,
    match_paths: Sequence[str],
    scores: Sequence[float],
    tile_height: int = 128,
    same_identity: Optional[Sequence[bool]] = None,
    caption: Optional[str] = None,
    accepted: Optional[Sequence[bool]] = None,
) -> np.ndarray:
    """A horizontal strip (RGB uint8): the query tile, a gap, then one tile per match.

    Each match is labelled ``#rank similarity``; `same_identity` (one flag per match) colours
    its border green or red, otherwise it is grey. `accepted` (one flag per match, from a
    decision threshold) gives the rejected ones a near-black border and a "no" label.
    `caption` is a text line above the strip.
    """
    if len(match_paths) != len(scores):
        raise ValueError(f"{len(match_paths)} match paths but {len(scores)} scores; give one score per match.")
    q_img = read_rgb(query_path)
    geom = TileGeometry.for_height(int(tile_height), q_img.shape[1] / q_img.shape[0])
    tiles = [make_tile(q_img, geom, QUERY_COLOR, "query")]
    for i, (path, score) in enumerate(zip(match_paths, scores)):
        color = NEUTRAL_COLOR
        if same_identity is not None:
            color = MATCH_COLOR if same_identity[i] else MISMATCH_COLOR
        label = f"#{i + 1}  {float(score):.3f}"
        if accepted is not None and not accepted[i]:
            color, label = REJECTED_COLOR, f"{label} no"
        tiles.append(make_tile(read_rgb(path), geom, color, label))
    return results_row(tiles, geom, [caption] if caption else None)


def save_matches_picture(path: str, query_path: str, match_paths: Sequence[str],
                         scores: Sequence[float], **kwargs) -> str:
    """Draw with :func:`draw_matches` and write the picture to `path` (.jpg or .png)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_rgb(path, draw_matches(query_path, match_paths, scores, **kwargs))
    return path


__all__ = ["NEUTRAL_COLOR", "REJECTED_COLOR", "draw_matches", "save_matches_picture"]
