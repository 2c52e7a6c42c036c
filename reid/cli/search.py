"""Find the top-K gallery matches of query images in a saved gallery or a saved search index.

The queries' features are computed with the given model, which must be the one that built
the gallery (a feature-size mismatch is an error; a different weights file or input size
is a warning). Similarity is cosine (1 = identical).

The gallery is a file from tools/extract.py (--gallery), indexed on every run, or an index
saved once with --save-index and searched with --index (no re-indexing, and it keeps the
gallery's paths, pids and model details). Backends: "exact" (default, torch), "faiss"
(exact, faster on large galleries) and the approximate "ivf" and "hnsw" for galleries of
millions of crops (`pip install faiss-cpu`; parameters below, defaults follow the gallery
size; see docs/inference.md).

For each query the tool prints the rank, similarity and path of each match (and pid/camid
when the gallery has them); --draw writes one picture per query (the query, then its
matches left to right), --json saves all matches. A query's own image in the gallery (the same
file under any name, or a byte-identical copy) is never one of its matches (one line says how
many were left out).

Examples:
    python tools/search.py --run output/market_r50_circle --gallery gallery.npz --query q1.jpg q2.jpg
    # a folder of queries, top 5, pictures and a JSON file
    python tools/search.py --run output/mgn --gallery g.npz --query queries/ -k 5 \\
        --draw out/matches --json out/matches.json
    # a large gallery: build an HNSW index once (no model needed), then search it many times
    python tools/search.py --gallery big.npz --backend hnsw --save-index big.index
    # check that a saved index still gives the recall it records (no model needed)
    python tools/search.py --index big.index --verify-recall
    python tools/search.py --weights model_final.pth --index big.index --query q.jpg
    # IVF-PQ (compressed), scanning more lists per query
    python tools/search.py --gallery big.npz --backend ivf --pq-m 32 --save-index big_pq.index
    python tools/search.py --run output/r50 --index big_pq.index --nprobe 128 --query queries/
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from reid.config import value_range
from reid.export.options import is_exported_file
from reid.search.options import BUILD_PARAMS, HNSW_MAX_EF_SEARCH, HNSW_MAX_M, INDEX_BACKENDS, SEARCH_PARAMS
from reid.utils.file_io import atomic_write_text
from reid.utils.text_files import brief, printable
from reid.visualization.options import MIN_TILE_HEIGHT

from .args import MAX_MATCHES, MAX_TILES, config_int, int_in, parse_args, tool_parser
from .errors import run_main
from .model_args import add_model_arguments, check_model_arguments, model_config, predictor_from_args

if TYPE_CHECKING:  # the library loads torch: imported where the work starts, after the arguments
    from reid.inference.predictor import Predictor

Log = Callable[[str], None]


def _check_gallery_fits(predictor: Predictor, dim: int, meta: Dict[str, str], source: str, log: Log,
                        calibrated: bool = False) -> None:
    """Feature width must match (else an error naming `source`); other model details warn: the
    weights by their hash where the gallery records one (``reid.export.identity``), else by
    file name; the input size; flip averaging. With a `calibrated` threshold (--far) each of
    those is an error too: the threshold's FAR holds only for scores of the features it was
    calibrated on, and a gallery made otherwise gives other scores."""
    from reid.export.identity import short

    if predictor.feature_dim != dim:
        made_by = meta.get("weights") or "an unknown model"
        raise ValueError(
            f"Gallery {source!r} holds {dim}-d features (made by {made_by}) but the "
            f"query model gives {predictor.feature_dim}-d features. Use the model that built the "
            "gallery, or rebuild the gallery with tools/extract.py and this model."
        )
    mine = predictor.describe()
    keys = ["input_size", "flip", "precision"]
    differences: List[str] = []
    theirs_hash, mine_hash = meta.get("weights_sha256"), mine.get("weights_sha256")
    if theirs_hash and mine_hash:
        # The weights themselves are identified: a file name may differ for the same weights, and
        # the same name may hold other weights (a run folder trained again, a swapped export).
        if theirs_hash != mine_hash:
            theirs = printable(meta.get("weights", "")[:500])  # a path from someone else's file: escaped
            differences.append(f"the gallery was made with other weights than the queries: {theirs} (sha256 "
                               f"{short(theirs_hash)}...) against {mine['weights']} (sha256 {short(mine_hash)}...)")
    else:  # a gallery from before weight hashes were recorded: only the names can be compared
        keys.insert(0, "weights")
    for key in keys:
        theirs = meta.get(key)
        if theirs is not None and theirs != mine.get(key):
            differences.append(f"the gallery was made with {key} {brief(theirs)}, the queries use {brief(mine[key])}")
    if differences and calibrated:
        raise ValueError(f"--far: {'; '.join(differences)} (gallery {source!r}), so the calibrated threshold's FAR "
                         "would not hold for its scores; make the gallery again with the queries' model and settings "
                         "(tools/extract.py with the same --run / --weights and settings), or pass --threshold S.")
    for difference in differences:
        log(f"warning: {difference}; scores are only meaningful when both come from the same model and settings.")


def search_command(predictor: Optional[Predictor], gallery_path: Optional[str], queries: Sequence[str] = (),
                   k: int = 10, backend: Optional[str] = None, draw_dir: Optional[str] = None,
                   json_path: Optional[str] = None, tile_height: int = 128, log: Log = print,
                   index_path: Optional[str] = None, save_index_path: Optional[str] = None,
                   params: Optional[Dict[str, Any]] = None, threshold: Optional[float] = None,
                   threshold_note: str = "", verify_recall: bool = False,
                   calibrated: bool = False, tracklets: bool = False) -> List[Dict[str, Any]]:
    """Top-`k` gallery matches of every query image: printed, and optionally drawn / saved.

    The gallery is `gallery_path` (a file from tools/extract.py, indexed with `backend` and
    `params`, and saved to `save_index_path` when given) or `index_path` (a saved index).
    Without queries it only builds (and saves) the index. Returns one dict per query:
    ``{"query": path, "matches": [{"rank", "score", "path", "index", ("pid", "camid")}...],
    "own_images_left_out": n}`` (gallery images that are the query's own, never matches:
    reid/search/own_files.py).
    With a `threshold` (a cosine similarity) a match is accepted only when its score is above
    it: each match gets ``"accepted"`` and each query ``"answer"`` ("match" or "no match",
    decided by its best match) and ``"threshold"``; `threshold_note` says where it came from.
    A `calibrated` threshold (--far) refuses a gallery made with other weights or settings
    (:func:`_check_gallery_fits`). With `tracklets`, each folder of frames in `queries` is one query,
    its frames pooled by the model's own temporal pooling (tools/extract.py --tracklets galleries);
    pictures show a tracklet by its first frame.
    """
    if backend is not None and str(backend).lower() not in INDEX_BACKENDS:
        raise ValueError(f"Unknown search backend {backend!r}; use one of: {', '.join(INDEX_BACKENDS)}.")
    if queries and predictor is None:
        raise ValueError("Searching needs the model that made the gallery: give --run, --weights or --config-file.")
    # The queries are listed (no image read) before the index is built: a query source the
    # model cannot use (a folder for a model with SIE) fails before minutes of indexing.
    found = None
    if queries and tracklets:
        from reid.inference.tracklet_pooling import FramePooling, find_tracklets

        FramePooling(predictor)  # a model that cannot pool frames fails before the index is built
        found = find_tracklets(queries)
        q_paths, q_camids = [folder for folder, _ in found], None
    else:
        q_paths, q_camids = predictor.collect(queries) if queries else ([], None)
    check = None if predictor is None else (
        lambda dim, meta, source: _check_gallery_fits(predictor, dim, meta, source, log, calibrated))
    from reid.search.open import open_index

    index = open_index(gallery_path, index_path, backend, params, save_index_path,
                       device=predictor.device if predictor is not None else None, check=check, log=log,
                       verify_recall=verify_recall, need_paths=bool(queries))
    if not queries:
        return []
    from reid.visualization.search_results import save_matches_picture
    from reid.search.own_files import search_without_own_files

    if found is not None:
        from reid.inference.tracklet_pooling import tracklet_folder_features

        q_feats = tracklet_folder_features(predictor, found)
    else:
        q_feats = predictor.extract_paths(q_paths, camids=q_camids)  # camera ids from 'path pid camid' lines (SIE)
    result = search_without_own_files(index, q_feats, q_paths, k)  # a query's own image is never its match
    paths = index.paths
    note = result.note(q_paths, paths)
    if note:
        log(note)
    records: List[Dict[str, Any]] = []
    labels = [(key, ids) for key, ids in (("pid", index.pids), ("camid", index.camids)) if ids is not None]
    for qi, q_path in enumerate(q_paths):
        matches = [{"rank": rank, "score": float(score), "path": paths[gi], "index": int(gi),
                    **{key: int(ids[gi]) for key, ids in labels}}
                   for rank, (gi, score) in enumerate(zip(result.indices[qi], result.scores[qi]), start=1)]
        record: Dict[str, Any] = {"query": q_path, "matches": matches, "own_images_left_out": len(result.left_out[qi])}
        header = f"query {qi + 1}/{len(q_paths)}: {printable(q_path)}"
        if threshold is not None:
            for m in matches:
                m["accepted"] = m["score"] > threshold
            record.update(answer="match" if matches and matches[0]["accepted"] else "no match", threshold=threshold)
            if record["answer"] == "no match":
                header += (f"  -> no match (best score {matches[0]['score']:.4f} is not above the threshold "
                           f"{threshold:.4f}{threshold_note})")
        records.append(record)
        log(header)
        for m in matches:
            extra = "".join(f"  {key} {m[key]}" for key in ("pid", "camid") if key in m)
            below = "  (below the threshold)" if threshold is not None and not m["accepted"] else ""
            log(f"  {m['rank']:>3}  {m['score']:.4f}  {printable(m['path'])}{extra}{below}")
        if draw_dir:
            stem = os.path.splitext(os.path.basename(q_path))[0]
            caption = q_path if threshold is None else f"{q_path}  [{record['answer']}, threshold {threshold:.3f}]"
            picture = save_matches_picture(
                os.path.join(draw_dir, f"{qi:04d}_{stem}.jpg"), _shown(q_path),
                [_shown(m["path"]) for m in matches], [m["score"] for m in matches], tile_height=tile_height,
                caption=caption, accepted=[m["accepted"] for m in matches] if threshold is not None else None,
            )
            log(f"  picture: {picture}")
    if json_path:
        atomic_write_text(json_path, json.dumps(records, indent=1))
        log(f"saved the matches of {len(records)} queries to {json_path}")
    return records


def _shown(path: str) -> str:
    """The image that shows `path` in a picture: itself, or a tracklet folder's first frame."""
    if not os.path.isdir(path):
        return path
    from reid.data.video.tracklets import list_frames

    frames = list_frames(path)
    return frames[0] if frames else path


def decision_threshold(args: argparse.Namespace, predictor: Optional[Predictor] = None) -> Tuple[Optional[float], str]:
    """The similarity threshold of --threshold, or of --far from the model's calibration (thresholds.json
    beside a checkpoint, read before the model is loaded; the thresholds an exported file carries)."""
    if args.far is None:
        return args.threshold, ""
    from reid.inference.decision_thresholds import calibrated_similarity, model_similarity

    if predictor is not None:
        similarity, path, description = model_similarity(predictor, args.far)
    else:
        similarity, path, description = calibrated_similarity(*model_config(args), args.far)
    print(f"threshold: similarity {similarity:.4f} from {path}; {description}")
    return similarity, f", calibrated at FAR {args.far:g}: {path}"


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-g", "--gallery", metavar="FILE", help="gallery file from tools/extract.py")
    source.add_argument("--index", metavar="FILE", help="search index saved with --save-index (instead of --gallery)")
    p.add_argument("-q", "--query", nargs="+", metavar="SRC",
                   help="query image files, folders (recursive) and/or list files (optional with --save-index)")
    p.add_argument("--tracklets", action="store_true",
                   help="each folder of frames in --query is one query tracklet, its frames pooled by the model's own "
                        "temporal pooling (for galleries of tools/extract.py --tracklets; PyTorch backend)")
    p.add_argument("-k", "--topk", type=int_in(1, MAX_MATCHES), default=10,
                   help=f"matches per query (default: 10; at most {MAX_MATCHES:,}, and {MAX_TILES} with --draw)")
    p.add_argument("--backend", default=None, choices=INDEX_BACKENDS,
                   help="search backend (default: exact; with --index: the saved index's)")
    p.add_argument("--save-index", metavar="FILE",
                   help="save the gallery's index (with its paths, pids, camids) to FILE, for --index later")
    p.add_argument("--draw", metavar="DIR", help="write one picture per query into DIR")
    p.add_argument("--tile-height", type=int_in(MIN_TILE_HEIGHT, value_range("INPUT.SIZE_TEST")[1], "INPUT.SIZE_TEST"),
                   default=128, help="image height in the pictures (default: 128)")
    p.add_argument("--json", metavar="FILE", help="save every query's matches as JSON")
    p.add_argument("--batch-size", type=config_int("TEST.IMS_PER_BATCH"), default=None,
                   help="query images per batch (default: TEST.IMS_PER_BATCH; bounded as it is)")
    decide = p.add_mutually_exclusive_group()
    decide.add_argument("--threshold", type=float, default=None, metavar="S",
                        help="answer 'no match' when the best score (cosine similarity) is not above S")
    decide.add_argument("--far", type=float, default=None, metavar="F",
                        help="the threshold calibrated at false accept rate F on the run's validation split "
                             "(thresholds.json next to --run / --weights; written by tools/train.py when TEST.VAL_IDS > 0)")
    ann = p.add_argument_group("approximate backends (defaults follow the gallery size; see docs/inference.md)")
    ann.add_argument("--nlist", type=int_in(1), help="ivf: number of k-means lists (default: ~4 sqrt(N))")
    ann.add_argument("--nprobe", type=int_in(1), help="ivf: lists scanned per query (default: nlist/64, at least 16); "
                     "also changes a saved index")
    ann.add_argument("--train-size", type=int_in(1), help="ivf: gallery vectors sampled to train the lists "
                     "(default: 40 per list, at least 10,000)")
    ann.add_argument("--pq-m", type=int_in(1), help="ivf: compress to PQ codes of this many sub-vectors (IVF-PQ; "
                     "must divide the feature size; default: none, IVF-Flat)")
    ann.add_argument("--pq-nbits", type=int_in(1, 16), help="ivf with --pq-m: bits per sub-vector code (default: 8)")
    ann.add_argument("--hnsw-m", type=int_in(2, HNSW_MAX_M),
                     help=f"hnsw: links per vector (default: 32; 2 to {HNSW_MAX_M})")
    ann.add_argument("--ef-construction", type=int_in(1), help="hnsw: candidate list while building (default: 80; "
                     f"at most the gallery size or {HNSW_MAX_EF_SEARCH:,})")
    ann.add_argument("--ef-search", type=int_in(1), help="hnsw: candidate list while searching (default: 128 per "
                     f"500,000 images, at least 128; at most the gallery size or {HNSW_MAX_EF_SEARCH:,}); also changes a saved index")
    ann.add_argument("--target-recall", type=float, help="ivf/hnsw: raise nprobe / ef_search at build time until "
                     "recall@10 against exact search reaches this (default: 0.95; measured on a sample of the "
                     "gallery's rows, each one's own row left out, as for new queries)")
    ann.add_argument("--verify-recall", action="store_true", help="with --index: measure the saved index's recall "
                     "again on its recorded sample and warn when the recorded value is off by more than 0.05")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args, lists=("query",))
    if not args.query and not args.save_index and not args.verify_recall:
        parser.error("give --query (images to search for), --save-index FILE to build and save the index only, "
                     "or --index FILE --verify-recall to check a saved index")
    if args.verify_recall and not args.index:
        parser.error("--verify-recall checks a saved index: give it with --index FILE")
    params = {name: getattr(args, name) for name in BUILD_PARAMS + SEARCH_PARAMS}

    if args.threshold is not None and not -1.0 <= args.threshold <= 1.0:
        parser.error(f"--threshold is a cosine similarity in [-1, 1], got {args.threshold}")
    if args.far is not None and not 0.0 < args.far < 1.0:
        parser.error(f"--far is a false accept rate in (0, 1) (e.g. 1e-3), got {args.far}")
    if args.tracklets and (not args.query or (args.weights and is_exported_file(args.weights))):
        parser.error("--tracklets reads query tracklet folders (--query DIR...) and pools them with a checkpoint's "
                     "own temporal module: give --query and a checkpoint (--run / --weights FILE.pth)")
    if args.draw and args.topk > MAX_TILES:
        parser.error(f"--draw puts each query's matches in one row of at most {MAX_TILES} images; got -k {args.topk} "
                     "(draw fewer, or leave --draw out)")

    def work() -> None:
        # A checkpoint's calibration is read before the model loads (a refused --far costs nothing); an
        # exported file carries its own, read once the file is open.
        exported = bool(args.weights) and is_exported_file(args.weights)
        threshold, note = decision_threshold(args) if not exported else (args.threshold, "")
        predictor = predictor_from_args(args, batch_size=args.batch_size) if args.query else None
        if exported and predictor is not None:
            threshold, note = decision_threshold(args, predictor)
        search_command(predictor, args.gallery, args.query or (), k=args.topk, backend=args.backend,
                       draw_dir=args.draw, json_path=args.json, tile_height=args.tile_height,
                       index_path=args.index, save_index_path=args.save_index, params=params,
                       threshold=threshold, threshold_note=note, verify_recall=args.verify_recall,
                       calibrated=args.far is not None, tracklets=args.tracklets)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
