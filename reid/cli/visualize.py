"""Draw ranked-result pictures, index.html and a CSV from saved features (no model needed).

Each picture shows a query (blue border) and its top-K gallery images in rank order: green
border = same identity, red = different identity. Gallery images of the query's identity
from the query's own camera are ignored by the metric and left out (or shown grey with
--show-junk), so ranks on the pictures are the ranks CMC/mAP count.

Examples:
    # the 20 worst queries by AP, top-10 each
    python tools/visualize.py output/demo/features.npz -o output/demo/ranked --num 20
    # best queries, with k-reciprocal re-ranking, original order drawn above the re-ranked one
    python tools/visualize.py feats.npz -o out/best --mode best --rerank --both-rows
    # 8 random queries (seeded), show ignored gallery images greyed
    python tools/visualize.py feats.npz -o out/random --mode random --num 8 --seed 3 --show-junk
    # given queries, by index or file name (here a query of the demo's synthetic test set)
    python tools/visualize.py output/demo/features.npz -o output/demo/some --queries 0 17 0111_c5s1_002281_00.jpg
    # images moved to another folder since the features were saved
    python tools/visualize.py feats.npz -o out/moved --image-root /data/Market-1501-v15.09.15

The features file comes from `tools/test.py ... --save-features FILE.npz` (format in
docs/evaluation.md, "Feature files"). Before drawing, pictures that an earlier call left in
the output folder (files named NNN_qNNNNN_<query>.jpg/.png) are deleted, and the log says
so; other files there are kept. Captions show the 0-based camera id ("camid 4" for a
Market-1501 file named c5). See docs/visualization.md.
"""
from __future__ import annotations

import argparse
import logging
import sys

from reid.config import value_range
from reid.visualization.options import MIN_TILE_HEIGHT

from .args import MAX_TILES, int_in
from .errors import run_main



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("features", help="saved-features .npz (tools/test.py --save-features)")
    p.add_argument("-o", "--output-dir", required=True,
                   help="folder for the pictures, index.html and ranked_results.csv "
                        "(pictures of an earlier call there are replaced)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"], help="distance (default: cosine)")
    p.add_argument("--rerank", action="store_true", help="apply k-reciprocal re-ranking; pictures show the re-ranked order")
    p.add_argument("--k1", type=int_in(1), default=20, help="re-ranking k1 (default: 20)")
    p.add_argument("--k2", type=int_in(1), default=6, help="re-ranking k2 (default: 6)")
    p.add_argument("--lambda", dest="lambda_value", type=float, default=0.3, help="re-ranking lambda (default: 0.3)")
    p.add_argument("--both-rows", action="store_true", help="with --rerank: draw the original order above the re-ranked one")
    p.add_argument("--mode", default="worst", choices=["worst", "best", "random", "indices"],
                   help="which queries: lowest AP first, highest first, random (--seed), or --queries (default: worst)")
    p.add_argument("--num", type=int_in(1), default=10, help="number of queries for worst/best/random (default: 10)")
    p.add_argument("--queries", nargs="+", metavar="Q",
                   help="query indices and/or image file names to draw (implies --mode indices)")
    p.add_argument("--topk", type=int_in(1, MAX_TILES), default=10,
                   help=f"gallery images per query (default: 10; at most {MAX_TILES})")
    p.add_argument("--seed", type=int, default=0, help="seed for --mode random (default: 0)")
    p.add_argument("--show-junk", action="store_true", help="show gallery images the metric ignores, greyed")
    p.add_argument("--image-root", default=None, help="folder that relative image paths in the features file start from")
    p.add_argument("--tile-height", type=int_in(MIN_TILE_HEIGHT, value_range("INPUT.SIZE_TEST")[1], "INPUT.SIZE_TEST"),
                   default=256, help="image height in pixels (default: 256)")
    p.add_argument("--format", dest="image_format", default="jpg", choices=["jpg", "png"], help="picture format (default: jpg)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    indices, mode = None, args.mode
    if args.queries:
        # integers are query indices, anything else a file name; drawn in the order given
        indices = [int(q) if q.lstrip("-").isdigit() else q for q in args.queries]
        mode = "indices"
    elif mode == "indices":
        print("--mode indices needs --queries (query indices or file names).", file=sys.stderr)
        return 2
    if args.both_rows and not args.rerank:
        print("--both-rows needs --rerank (it draws the original and the re-ranked order).", file=sys.stderr)
        return 2
    def work() -> None:
        from reid.visualization import visualize_from_npz  # loads torch: only once the arguments are right

        result = visualize_from_npz(
            args.features, args.output_dir, topk=args.topk, num_queries=args.num, mode=mode,
            metric=args.metric, rerank=args.rerank, k1=args.k1, k2=args.k2, lambda_value=args.lambda_value,
            both_rows=args.both_rows, show_junk=args.show_junk, seed=args.seed, indices=indices,
            image_root=args.image_root, tile_height=args.tile_height,
            image_format=args.image_format,
        )
        print(f"wrote {len(result.pictures)} pictures; open {result.html_path}")

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
