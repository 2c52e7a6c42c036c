"""Find the top-K gallery matches of query images in a saved gallery (tools/extract.py).

The queries' features are computed with the given model, which must be the one that built
the gallery (a feature-size mismatch is an error; a different weights file or input size
is a warning). Similarity is cosine (1 = identical). Search is exact by default; with
--backend faiss it uses faiss's exact inner-product index (`pip install faiss-cpu`), which
is faster for galleries of millions of crops.

For each query the tool prints the rank, similarity and path of each match (and pid/camid
when the gallery has them); --draw writes one picture per query (the query, then its
matches left to right), --json saves all matches.

Examples:
    python tools/search.py --run output/market_r50_circle --gallery gallery.npz --query q1.jpg q2.jpg
    # a folder of queries, top 5, pictures and a JSON file
    python tools/search.py --run output/mgn --gallery g.npz --query queries/ -k 5 \\
        --draw out/matches --json out/matches.json
    # a large gallery with faiss
    python tools/search.py --weights model_final.pth --gallery big.npz --query q.jpg --backend faiss
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from reid.inference.draw import save_matches_picture
from reid.inference.gallery import Gallery, load_gallery
from reid.inference.predictor import Predictor
from reid.inference.search import BACKENDS, build_index
from reid.inference.sources import collect_images
from reid.utils.file_io import atomic_write_text

from .errors import run_main
from .model_args import add_model_arguments, predictor_from_args

Log = Callable[[str], None]


def _check_gallery_fits(predictor: Predictor, gallery: Gallery, gallery_path: str, log: Log) -> None:
    if predictor.feature_dim != gallery.dim:
        made_by = gallery.meta.get("weights") or "an unknown model"
        raise ValueError(
            f"Gallery {gallery_path!r} holds {gallery.dim}-d features (made by {made_by}) but the "
            f"query model gives {predictor.feature_dim}-d features. Use the model that built the "
            "gallery, or rebuild the gallery with tools/extract.py and this model."
        )
    mine = predictor.describe()
    for key in ("weights", "input_size", "flip"):
        theirs = gallery.meta.get(key)
        if theirs is not None and theirs != mine[key]:
            log(f"warning: the gallery was made with {key} {theirs!r}, the queries use {mine[key]!r}; "
                "scores are only meaningful when both come from the same model and settings.")


def search_command(predictor: Predictor, gallery_path: str, queries: Sequence[str], k: int = 10,
                   backend: str = "exact", draw_dir: Optional[str] = None, json_path: Optional[str] = None,
                   tile_height: int = 128, log: Log = print) -> List[Dict[str, Any]]:
    """Top-`k` gallery matches of every query image: printed, and optionally drawn / saved.

    Returns one dict per query: ``{"query": path, "matches": [{"rank", "score", "path",
    "index", ("pid", "camid")}...]}``.
    """
    if str(backend).lower() not in BACKENDS:
        raise ValueError(f"Unknown search backend {backend!r}; use one of: {', '.join(BACKENDS)}.")
    gallery = load_gallery(gallery_path)
    _check_gallery_fits(predictor, gallery, gallery_path, log)
    index = build_index(gallery.feats, backend=backend, device=predictor.device)
    q_paths = collect_images(queries)
    q_feats = predictor.extract_paths(q_paths)
    result = index.search(q_feats, k)
    records: List[Dict[str, Any]] = []
    for qi, q_path in enumerate(q_paths):
        matches = []
        for rank, (gi, score) in enumerate(zip(result.indices[qi], result.scores[qi]), start=1):
            m: Dict[str, Any] = {"rank": rank, "score": float(score), "path": gallery.paths[gi], "index": int(gi)}
            if gallery.pids is not None:
                m["pid"] = int(gallery.pids[gi])
            if gallery.camids is not None:
                m["camid"] = int(gallery.camids[gi])
            matches.append(m)
        records.append({"query": q_path, "matches": matches})
        log(f"query {qi + 1}/{len(q_paths)}: {q_path}")
        for m in matches:
            extra = "".join(f"  {key} {m[key]}" for key in ("pid", "camid") if key in m)
            log(f"  {m['rank']:>3}  {m['score']:.4f}  {m['path']}{extra}")
        if draw_dir:
            stem = os.path.splitext(os.path.basename(q_path))[0]
            picture = save_matches_picture(
                os.path.join(draw_dir, f"{qi:04d}_{stem}.jpg"), q_path,
                [m["path"] for m in matches], [m["score"] for m in matches], tile_height=tile_height,
                caption=q_path,
            )
            log(f"  picture: {picture}")
    if json_path:
        atomic_write_text(json_path, json.dumps(records, indent=1))
        log(f"saved the matches of {len(records)} queries to {json_path}")
    return records


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-g", "--gallery", required=True, metavar="FILE", help="gallery file from tools/extract.py")
    p.add_argument("-q", "--query", nargs="+", required=True, metavar="SRC",
                   help="query image files, folders (recursive) and/or list files")
    p.add_argument("-k", "--topk", type=int, default=10, help="matches per query (default: 10)")
    p.add_argument("--backend", default="exact", choices=BACKENDS, help="search backend (default: exact)")
    p.add_argument("--draw", metavar="DIR", help="write one picture per query into DIR")
    p.add_argument("--tile-height", type=int, default=128, help="image height in the pictures (default: 128)")
    p.add_argument("--json", metavar="FILE", help="save every query's matches as JSON")
    p.add_argument("--batch-size", type=int, default=None, help="query images per batch (default: TEST.IMS_PER_BATCH)")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    def work() -> None:
        predictor = predictor_from_args(args, batch_size=args.batch_size)
        search_command(predictor, args.gallery, args.query, k=args.topk, backend=args.backend,
                       draw_dir=args.draw, json_path=args.json, tile_height=args.tile_height)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
