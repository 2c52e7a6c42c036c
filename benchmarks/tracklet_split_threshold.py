#!/usr/bin/env python
"""Which UDA.TRACKLET_SPLIT threshold tells one person's tracklet from an identity switch.

Tracklets made from the demo model's synthetic test gallery (tools/train.py on configs/Demo; `make demo`):
a one-person tracklet is 8 crops of one identity, a switched one 4 crops of one identity then 4 of
another (the crops of a test identity come from several cameras, which makes one person's halves
harder to keep together than a real tracklet's). For each, the cosine of the two parts' mean features
at the best cut (reid/uda/tracklet_split.py, parts of >= 3 crops), and the share of each kind that a
threshold would cut.

    python benchmarks/tracklet_split_threshold.py [--run output/demo] [--trials 300]
"""
import argparse
import glob
import os

import numpy as np

from reid.inference.predictor import load_predictor
from reid.uda.tracklet_split import MIN_PART, _best_cuts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="output/demo")
    p.add_argument("--data", default=None, help="a synthetic dataset folder (default: the demo's, under datasets/)")
    p.add_argument("--trials", type=int, default=300)
    args = p.parse_args()
    root = args.data or sorted(glob.glob("datasets/synthetic/s0_ids100+100*"))[0]
    paths = sorted(glob.glob(os.path.join(root, "bounding_box_test", "*.jpg")))
    pids = np.array([int(os.path.basename(q).split("_")[0]) for q in paths])
    keep = pids > 0  # 0 and -1: distractors
    paths, pids = [q for q, k in zip(paths, keep) if k], pids[keep]
    feats = np.asarray(load_predictor(run=args.run, device="cpu").extract_paths(paths), np.float64)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    rng = np.random.default_rng(0)
    ids = [i for i in np.unique(pids) if (pids == i).sum() >= 8]
    one, switched = [], []
    for _ in range(args.trials):
        a, b = rng.choice(ids, 2, replace=False)
        ia, ib = np.flatnonzero(pids == a), np.flatnonzero(pids == b)
        for idx, out in ((rng.choice(ia, 8, replace=False), one),
                         (np.r_[rng.choice(ia, 4, replace=False), rng.choice(ib, 4, replace=False)], switched)):
            _, cosine, _ = _best_cuts(feats[idx], np.zeros(8, np.int64), np.arange(8), MIN_PART)
            out.append(float(cosine[0]))
    one, switched = np.array(one), np.array(switched)
    print(f"{len(one)} one-person and {len(switched)} switched tracklets of 8 crops ({args.run}, {root})")
    print("best-cut cosine, one person: 1st / 5th / 50th percentile", np.percentile(one, [1, 5, 50]).round(3))
    print("best-cut cosine, switched:  50th / 95th / 99th percentile", np.percentile(switched, [50, 95, 99]).round(3))
    print("| UDA.TRACKLET_SPLIT | one-person tracklets cut | switched tracklets cut |")
    print("|---|---|---|")
    for t in (0.3, 0.4, 0.5, 0.6, 0.7):
        print(f"| {t} | {np.mean(one < t):.1%} | {np.mean(switched < t):.1%} |")


if __name__ == "__main__":
    main()
