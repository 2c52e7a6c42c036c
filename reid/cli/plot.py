"""Draw analysis plots. Each writes a PNG and, next to it, the numbers behind it (.csv/.json).

Subcommands (run `python tools/plot.py SUBCOMMAND --help` for each one's options):
    cmc         CMC curves (rank 1..50), with and without re-ranking, on one plot
    roc         verification ROC (TAR against FAR, log axis), with and without re-ranking
    similarity  positive vs negative pair similarities on the test set, and their overlap
    dynamics    mean s_p and s_n over training iterations of one or more runs (paper Fig. 4)
    boundary    training pairs in the (s_n, s_p) plane with the head's decision boundary (Fig. 5)
    gradients   gradients of triplet, AM-Softmax and Circle losses over (s_n, s_p) (Fig. 2)

Examples:
    python tools/plot.py cmc --features output/demo/features.npz -o output/demo/plots/cmc.png
    python tools/plot.py cmc --metrics runs/a/metrics.json runs/b/metrics.json -o cmc.png
    python tools/plot.py roc --metrics output/demo/test/metrics.json -o output/demo/plots/roc.png
    python tools/plot.py similarity --features output/demo/features.npz -o output/demo/plots/similarity.png
    python tools/plot.py dynamics output/circle output/amsoftmax -o dynamics.png
    python tools/plot.py boundary --arrays sn_sp.npz --config output/demo/config.yaml -o boundary.png
    python tools/plot.py boundary --arrays sn_sp.npz --head amsoftmax --margin 0.35 -o boundary.png
    python tools/plot.py gradients -o gradients.png
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from .args import MAX_BINS, MAX_GRID, MAX_MATCHES, int_in
from .errors import run_main

if TYPE_CHECKING:  # the plots load torch: imported where the work starts, after the arguments
    from reid.visualization.plots import PlotFiles

EPILOGS = {
    "cmc": """examples:
  python tools/plot.py cmc --features feats.npz -o cmc.png            # original + re-ranked
  python tools/plot.py cmc --features feats.npz --no-rerank -o cmc.png
  python tools/plot.py cmc --metrics out/a/metrics.json out/b/metrics.json --labels A B -o cmc.png
A metrics JSON may hold 'cmc' lists anywhere (nested keys label the curves); percentages are accepted.""",
    "roc": """examples:
  python tools/test.py --run output/demo --verification --rerank && python tools/plot.py roc --metrics output/demo/test/metrics.json -o roc.png
  python tools/plot.py roc --metrics runs/a/test/metrics.json runs/b/test/metrics.json --labels A A+rr B B+rr -o roc.png
The metrics.json of tools/test.py --verification holds the ROC of each test set (and of re-ranking with --rerank).""",
    "similarity": """examples:
  python tools/plot.py similarity --features feats.npz -o similarity.png
  python tools/plot.py similarity --features feats.npz --max-pairs 50000 --bins 60 -o sim.png
Positives: same identity, different camera; negatives: different identities (evaluation protocol).""",
    "dynamics": """examples:
  python tools/plot.py dynamics output/demo -o dynamics.png
  python tools/plot.py dynamics runs/circle/metrics.jsonl runs/am/metrics.jsonl --labels Circle AM-Softmax -o dyn.png""",
    "boundary": """examples:
  python tools/plot.py boundary --arrays sn_sp.npz --head circle --margin 0.25 -o boundary.png
  python tools/plot.py boundary --arrays sn_sp.npz --config output/demo/config.yaml -o boundary.png
The .npz holds s_n and s_p (one per training image), or features, labels and class_weights.""",
    "gradients": """examples:
  python tools/plot.py gradients -o gradients.png
  python tools/plot.py gradients --gamma 64 --circle-margin 0.25 --am-scale 30 --am-margin 0.35 -o grad.png""",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    def add(name: str, help_text: str, default_out: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOGS[name],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("-o", "--output", default=os.path.join("output", "plots", default_out),
                        help=f"PNG to write; .csv/.json go next to it (default: output/plots/{default_out})")
        return sp

    c = add("cmc", "CMC curves, e.g. with and without re-ranking", "cmc.png")
    c.add_argument("--features", help="saved-features .npz (tools/test.py --save-features)")
    c.add_argument("--metrics", nargs="+", default=[], help="JSON files with 'cmc' lists")
    c.add_argument("--labels", nargs="+", help="one label per curve, in order (features curves first)")
    c.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"], help="distance for --features")
    c.add_argument("--no-rerank", action="store_true", help="with --features: only the original order")
    c.add_argument("--k1", type=int_in(1), default=20, help="re-ranking k1 (default: 20)")
    c.add_argument("--k2", type=int_in(1), default=6, help="re-ranking k2 (default: 6)")
    c.add_argument("--lambda", dest="lambda_value", type=float, default=0.3, help="re-ranking lambda (default: 0.3)")
    c.add_argument("--max-rank", type=int_in(1, MAX_MATCHES), default=50,
                   help=f"last rank shown (default: 50; at most {MAX_MATCHES:,})")

    r = add("roc", "verification ROC curves from tools/test.py --verification", "roc.png")
    r.add_argument("--metrics", nargs="+", required=True, help="tools/test.py metrics.json files (with --verification)")
    r.add_argument("--labels", nargs="+", help="one label per curve, in order")

    s = add("similarity", "positive vs negative pair similarity distributions", "similarity.png")
    s.add_argument("--features", required=True, help="saved-features .npz")
    s.add_argument("--max-pairs", type=int_in(1), default=200_000, help="sample at most about this many pairs per class")
    s.add_argument("--bins", type=int_in(1, MAX_BINS), default=100, help=f"histogram bins (default: 100; at most {MAX_BINS:,})")
    s.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")

    d = add("dynamics", "mean s_p and s_n over training iterations", "dynamics.png")
    d.add_argument("runs", nargs="+", help="run folders (OUTPUT_DIR) or metrics.jsonl files")
    d.add_argument("--labels", nargs="+", help="one label per run (default: run folder names)")

    b = add("boundary", "training pairs in the (s_n, s_p) plane with the decision boundary", "boundary.png")
    b.add_argument("--arrays", required=True, help=".npz with s_n and s_p, or features, labels and class_weights")
    b.add_argument("--config", help="run config (e.g. OUTPUT_DIR/config.yaml): head name and margin come from it")
    b.add_argument("--head", default=None, help="head name when no --config (default: circle)")
    b.add_argument("--margin", type=float, default=None, help="margin m (default: the config's, else the head's published default)")
    b.add_argument("--max-points", type=int_in(1), default=5000, help="points drawn (seeded sample; default: 5000)")
    b.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")

    g = add("gradients", "loss gradients over the (s_n, s_p) plane", "gradients.png")
    g.add_argument("--gamma", type=float, help="Circle scale gamma (default: the circle head's, 128)")
    g.add_argument("--circle-margin", type=float, help="Circle margin m (default: 0.25)")
    g.add_argument("--am-scale", type=float, help="AM-Softmax scale s (default: the amsoftmax head's, 64)")
    g.add_argument("--am-margin", type=float, help="AM-Softmax margin m (default: 0.35)")
    g.add_argument("--triplet-margin", type=float, help="triplet margin on similarities (default: MODEL.LOSSES.TRIPLET.MARGIN, 0.3)")
    g.add_argument("--grid", type=int_in(2, MAX_GRID), default=101,
                   help=f"grid points per axis over [0, 1] (default: 101; at most {MAX_GRID:,})")
    return p



def _relabel(curves: dict, labels) -> dict:
    """The curves under --labels, in order (one label per curve), or as they are without labels."""
    if not labels:
        return curves
    if len(labels) != len(curves):
        raise ValueError(f"{len(labels)} labels for {len(curves)} curves ({', '.join(curves)}); give one --labels "
                         "entry per curve, or none.")
    return dict(zip(labels, curves.values()))

def run(args: argparse.Namespace) -> "PlotFiles":
    """Draw the plot of `args.command`; returns the files written."""
    from reid.visualization import plots

    if args.command == "cmc":
        curves = {}
        if args.features:
            curves.update(plots.cmc_curves_from_features(
                args.features, metric=args.metric, rerank=not args.no_rerank, k1=args.k1, k2=args.k2,
                lambda_value=args.lambda_value, max_rank=args.max_rank))
        for path in args.metrics:
            curves.update(plots.read_cmc_json(path))
        if not curves:
            raise ValueError("Nothing to plot: give --features and/or --metrics.")
        curves = _relabel(curves, args.labels)
        return plots.plot_cmc(curves, args.output, max_rank=args.max_rank)
    if args.command == "roc":
        curves = {}
        for path in args.metrics:
            for label, curve in plots.read_roc_json(path).items():
                curves[label if len(args.metrics) == 1 else f"{path}: {label}"] = curve
        curves = _relabel(curves, args.labels)
        return plots.plot_roc(curves, args.output)
    if args.command == "similarity":
        pairs = plots.similarity_from_features(args.features, max_pairs=args.max_pairs, seed=args.seed)
        return plots.plot_similarity_distributions(pairs, args.output, bins=args.bins)
    if args.command == "dynamics":
        return plots.plot_dynamics(args.runs, args.output, labels=args.labels)
    if args.command == "boundary":
        head, margin = (args.head or "circle"), args.margin
        if args.config:
            head, cfg_margin = plots.head_from_config(args.config)
            margin = cfg_margin if args.margin is None else args.margin
        s_n, s_p = plots.load_pairs_npz(args.arrays)
        return plots.plot_decision_boundary(s_n, s_p, args.output, head=head, margin=margin,
                                            max_points=args.max_points, seed=args.seed)
    params = {
        "circle": {k: v for k, v in (("gamma", args.gamma), ("margin", args.circle_margin)) if v is not None},
        "amsoftmax": {k: v for k, v in (("scale", args.am_scale), ("margin", args.am_margin)) if v is not None},
        "triplet": {"margin": args.triplet_margin} if args.triplet_margin is not None else {},
    }
    return plots.plot_gradients(plots.gradient_grid(params=params, grid=args.grid), args.output)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    def work() -> None:
        files = run(args)
        print("wrote " + ", ".join(p for p in (files.png, files.csv, files.json) if p))

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
