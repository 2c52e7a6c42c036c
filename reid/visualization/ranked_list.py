"""Ranked-result pictures: a query, then its top-K gallery images with green/red borders.

The order and the entries shown are the metric's: a stable sort of the distance row, with
same-identity-same-camera gallery images left out or greyed, so the ranks on the
picture are the ranks CMC and AP count. With re-ranking the picture shows the re-ranked order,
optionally with the original order in a row above it.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .html_report import write_csv, write_index_html
from .items import Items, as_items
from .ranking import RankedRow, rank_gallery
from .results import QueryPicture, RankedVisualization, ShownRow
from .selection import QuerySelection, select_queries
from .tiles import (
    IGNORED_COLOR,
    MATCH_COLOR,
    MISMATCH_COLOR,
    QUERY_COLOR,
    TileGeometry,
    make_tile,
    read_rgb,
    results_row,
    vstack_padded,
    write_rgb,
)

logger = logging.getLogger("reid.visualization")

#: Names of the pictures this module writes: ``{number:03d}_q{query index:05d}_{stem}.{ext}``
#: (see :func:`picture_name`). Only files matching it are removed before a new set is drawn.
PICTURE_NAME_RE = re.compile(r"^\d{3,}_q\d{5,}_[A-Za-z0-9._-]+\.(?:jpg|jpeg|png)$")

__all__ = [
    "PICTURE_NAME_RE",
    "draw_ranked_list",
    "picture_name",
    "remove_old_pictures",
    "visualize_ranked_results",
]


def resolve_path(path: str, image_root: Optional[str]) -> str:
    """`path`, joined to `image_root` when it is relative and a root is given."""
    if image_root and not os.path.isabs(path):
        return os.path.join(image_root, path)
    return path


def _entry_label(rank: int, distance: float, ignored: bool) -> str:
    return f"ignored {distance:.3f}" if ignored else f"#{rank} {distance:.3f}"


def draw_ranked_list(
    query_path: str,
    gallery_paths: Sequence[str],
    rows: Sequence[RankedRow],
    captions: Sequence[Sequence[str]],
    tile_height: int = 256,
    image_root: Optional[str] = None,
) -> np.ndarray:
    """Draw one query's picture and return it as an RGB uint8 array.

    Each entry of `rows` (one, or two for original + re-ranked) becomes a line of tiles: the
    query (blue border), a gap, then the row's gallery images in order with a green border
    (same identity), red (different) or grey with a washed-out image (ignored by the metric);
    under each tile its rank and distance. `captions[i]` are the text lines above row i.
    All images are resized to `tile_height` pixels at the query image's aspect ratio.
    """
    if len(rows) != len(captions):
        raise ValueError(f"{len(rows)} rows but {len(captions)} captions; give one caption per row.")
    cache: Dict[str, np.ndarray] = {}

    def load(p: str) -> np.ndarray:
        full = resolve_path(str(p), image_root)
        if full not in cache:
            cache[full] = read_rgb(full)
        return cache[full]

    q_img = load(query_path)
    geom = TileGeometry.for_height(tile_height, q_img.shape[1] / q_img.shape[0])
    q_tile = make_tile(q_img, geom, QUERY_COLOR, "query")
    parts = []
    for row, caption in zip(rows, captions):
        tiles = [q_tile]
        for gi, rank, dist, match, ign in zip(row.gallery_index, row.rank, row.distance, row.match, row.ignored):
            color = IGNORED_COLOR if ign else (MATCH_COLOR if match else MISMATCH_COLOR)
            tiles.append(make_tile(load(gallery_paths[gi]), geom, color, _entry_label(rank, dist, ign), greyed=bool(ign)))
        parts.append(results_row(tiles, geom, caption))
    return vstack_padded(parts, gap=3 * geom.border, separator=(120, 120, 120))


def visualize_ranked_results(
    distmat: np.ndarray,
    query: Any,
    gallery: Any,
    output_dir: str,
    topk: int = 10,
    mode: str = "worst",
    num_queries: int = 10,
    seed: int = 0,
    indices: Optional[Sequence[Union[int, str]]] = None,
    names: Optional[Sequence[str]] = None,
    rerank_distmat: Optional[np.ndarray] = None,
    both_rows: bool = False,
    show_junk: bool = False,
    all_AP: Optional[np.ndarray] = None,
    rerank_all_AP: Optional[np.ndarray] = None,
    tile_height: int = 256,
    image_format: str = "jpg",
    image_root: Optional[str] = None,
    write_report: bool = True,
    title: str = "Ranked results",
    description: str = "",
) -> RankedVisualization:
    """Select queries, draw one picture each into `output_dir`, and write index.html + CSV.

    Args:
        distmat: query x gallery distances (smaller = more similar).
        query, gallery: identities of the rows/columns: lists of ``(path, pid, camid)``,
            ``Features`` objects, or mappings with ``paths``/``pids``/``camids``.
        topk: gallery entries the metric counts shown per query (fewer if the gallery is small).
        mode, num_queries, seed, indices, names: query choice, see :func:`select_queries`.
            Worst/best use the AP of the order shown (re-ranked when `rerank_distmat` is given).
        rerank_distmat: re-ranked distances; when given the picture shows the re-ranked order.
        both_rows: with `rerank_distmat`, draw the original order above the re-ranked one.
        show_junk: show ignored gallery images greyed instead of leaving them out.
        all_AP, rerank_all_AP: per-query AP already computed by ``evaluate_rank`` for
            `distmat` / `rerank_distmat`; computed here when needed and not given.
        tile_height: image height in pixels (256 is readable at 100% zoom).
        image_format: "jpg" (small files, for real photos) or "png" (lossless).
        image_root: folder that relative image paths are relative to.
        write_report: also write ``index.html`` and ``ranked_results.csv``.
        title, description: heading and a line of context for index.html.
    """
    q_items, g_items = as_items(query, "query"), as_items(gallery, "gallery")
    distmat = _check_distmat(distmat, q_items, g_items, "distmat")
    if rerank_distmat is not None:
        rerank_distmat = _check_distmat(rerank_distmat, q_items, g_items, "rerank_distmat")
    elif both_rows:
        raise ValueError("both_rows=True needs rerank_distmat (the re-ranked distances); enable re-ranking.")
    image_format = image_format.lower().lstrip(".")
    if image_format not in ("jpg", "jpeg", "png"):
        raise ValueError(f"image_format {image_format!r} is not supported; use 'jpg' or 'png'.")

    # the row drawn last (and used for choosing queries) is the order the user evaluates
    shown = [("original", distmat, all_AP)]
    if rerank_distmat is not None:
        shown = ([("original", distmat, all_AP)] if both_rows else []) + [("re-ranked", rerank_distmat, rerank_all_AP)]
    aps = [_ap_for(d, ap, q_items, g_items, topk) for _, d, ap in shown]

    selection: QuerySelection = select_queries(
        aps[-1], mode=mode, k=num_queries, seed=seed, indices=indices, names=names, paths=list(q_items.paths)
    )
    os.makedirs(output_dir, exist_ok=True)
    # Pictures of an earlier call would otherwise sit next to the new ones, looking like part
    # of this set (index.html and the CSV are rewritten, so they never list them).
    removed = remove_old_pictures(output_dir)
    if removed:
        logger.info(
            "Removed %d ranked-result pictures of an earlier run from %s (files named "
            "NNN_qNNNNN_<query>.jpg/.png; other files are kept)", len(removed), os.path.abspath(output_dir)
        )
    pictures: List[QueryPicture] = []
    for number, qi in enumerate(selection.indices, start=1):
        rows, captions = [], []
        for (label, dist, _), ap in zip(shown, aps):
            ranked = rank_gallery(
                dist[qi], q_items.pids[qi], q_items.camids[qi], g_items.pids, g_items.camids, topk, show_junk
            )
            rows.append(ShownRow(label, float(ap[qi]), ranked))
            captions.append(_caption(label, float(ap[qi]), int(qi), q_items, multi=len(shown) > 1 or label != "original"))
        image_file = picture_name(number, int(qi), q_items.paths[qi], image_format)
        picture = draw_ranked_list(
            q_items.paths[qi], g_items.paths, [r.ranked for r in rows], captions, tile_height, image_root
        )
        write_rgb(os.path.join(output_dir, image_file), picture)
        pictures.append(QueryPicture(number, int(qi), image_file, rows))
    result = RankedVisualization(os.path.abspath(output_dir), pictures, list(selection.notes))
    if write_report:
        result.csv_path = write_csv(result, q_items, g_items)
        result.html_path = write_index_html(result, q_items, g_items, title=title, description=description)
    logger.info("Wrote %d ranked-result pictures to %s", len(pictures), result.output_dir)
    return result


def picture_name(number: int, query_index: int, query_path: str, image_format: str) -> str:
    """File name of a ranked-result picture; numbered so a file browser lists drawing order."""
    return f"{int(number):03d}_q{int(query_index):05d}_{_safe_stem(query_path)}.{image_format}"


def remove_old_pictures(output_dir: str) -> List[str]:
    """Delete the ranked-result pictures (:data:`PICTURE_NAME_RE`) in `output_dir`; return their paths.

    Only regular files whose names match this module's picture pattern are deleted; every
    other file (index.html, notes, other images) is left alone, and sub-folders are not searched.
    """
    removed = []
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        if PICTURE_NAME_RE.match(name) and os.path.isfile(path) and not os.path.islink(path):
            os.remove(path)
            removed.append(path)
    return removed


def _check_distmat(d: Any, q: Items, g: Items, what: str) -> np.ndarray:
    if hasattr(d, "detach"):
        d = d.detach().cpu().numpy()
    d = np.asarray(d)
    if d.shape != (len(q), len(g)):
        raise ValueError(
            f"{what} has shape {d.shape} but there are {len(q)} queries and {len(g)} gallery images; "
            "it must be [num_query, num_gallery] in the same order as the query and gallery lists."
        )
    return d


def _ap_for(distmat: np.ndarray, ap: Optional[np.ndarray], q: Items, g: Items, topk: int) -> np.ndarray:
    """Per-query AP for `distmat`: the given one (checked) or computed with ``evaluate_rank``."""
    if ap is not None:
        ap = np.asarray(ap, dtype=np.float64).reshape(-1)
        if len(ap) != len(q):
            raise ValueError(f"all_AP has {len(ap)} values for {len(q)} queries; pass the AP array of this query set.")
        return ap
    from reid.evaluation import evaluate_rank  # evaluation pulls in torch; only needed here

    res = evaluate_rank(distmat, q.pids, g.pids, q.camids, g.camids, max_rank=max(1, min(50, len(g))))
    return np.asarray(res["all_AP"], dtype=np.float64)


def _caption(label: str, ap: float, qi: int, q: Items, multi: bool) -> List[str]:
    order = f"  ({label} order)" if multi else ""
    ap_text = "n/a" if np.isnan(ap) else f"{100.0 * ap:.1f}%"
    return [
        f"AP {ap_text}{order}",
        # "camid", not "cam": the value is the 0-based camera id, so a Market-1501 file named
        # c5 shows camid 4; "cam 4" next to it reads like a contradiction.
        f"query {qi}: pid {int(q.pids[qi])}, camid {int(q.camids[qi])}, {os.path.basename(str(q.paths[qi]))}",
    ]


def _safe_stem(path: str) -> str:
    """File-name-safe stem of `path` (letters, digits, dot, dash, underscore)."""
    stem = os.path.splitext(os.path.basename(str(path)))[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:60] or "query"
