#!/usr/bin/env python
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
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.inference.commands import add_model_arguments, predictor_from_args, search_command, run_user_command  # noqa: E402
from reid.inference.search import BACKENDS  # noqa: E402


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

    return run_user_command(work)


if __name__ == "__main__":
    sys.exit(main())
