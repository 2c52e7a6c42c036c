#!/usr/bin/env python
"""Regenerate the example pictures of docs/visualization.md without a trained CNN.

The pictures only need *some* features, so this script uses simple ones: colour histograms of
six horizontal stripes of the centre of each synthetic-dataset image, each camera's mean
removed (a 384-d hand-crafted descriptor). The training-dynamics and (s_n, s_p) figures come
from a small projection (384 -> 64) trained for 600 iterations with the real Circle and
AM-Softmax heads (``build_head``) on those histograms, logging ``head.last_stats`` like the
trainer does. Numbers therefore differ from a trained ResNet50; the pictures can be redrawn
from the demo model with the commands in docs/visualization.md.

    python docs/images/make_examples.py                # writes docs/images/*.png
    python docs/images/make_examples.py --work /tmp/x  # keep the intermediate files there
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import cv2
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from reid.data import build_dataset  # noqa: E402
from reid.evaluation import compute_distance, evaluate_rank, re_ranking  # noqa: E402
from reid.modeling.heads import build_head  # noqa: E402
from reid.visualization import plots, visualize_from_features  # noqa: E402

MAX_BYTES = 150_000


def stripe_histograms(paths, camids, stripes=6, bins=4, keep=0.3):
    """Colour histograms of `stripes` horizontal stripes of the central `keep` of the width
    (where the person is), square-rooted, with each camera's mean removed (the backgrounds
    are per camera), L2-normalised: [N, stripes * bins^3]."""
    feats = []
    for p in paths:
        img = cv2.resize(cv2.imread(p), (32, 64), interpolation=cv2.INTER_AREA)
        lo = int(round(32 * (1 - keep) / 2))
        q = (img[:, lo : 32 - lo] // (256 // bins)).astype(np.int64)
        code = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
        rows = np.array_split(code, stripes, axis=0)
        feats.append(np.sqrt(np.concatenate([np.bincount(r.ravel(), minlength=bins**3) for r in rows])))
    f = np.stack(feats).astype(np.float32)
    camids = np.asarray(camids)
    for c in np.unique(camids):
        f[camids == c] -= f[camids == c].mean(axis=0)
    return f / np.linalg.norm(f, axis=1, keepdims=True)


def train_head(feats, labels, head_name, iters, seed, log_path):
    """Train projection + head with cross-entropy; log s_p / s_n per 10 iterations (metrics.jsonl)."""
    torch.manual_seed(seed)
    x, y = torch.from_numpy(feats), torch.from_numpy(labels)
    proj = torch.nn.Linear(x.shape[1], 64)
    head = build_head(head_name, 64, int(labels.max()) + 1)
    opt = torch.optim.Adam(list(proj.parameters()) + list(head.parameters()), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    with open(log_path, "w", encoding="utf-8") as f:
        for it in range(1, iters + 1):
            idx = torch.randint(0, len(x), (64,), generator=g)
            logits = head(proj(x[idx]), y[idx])
            loss = torch.nn.functional.cross_entropy(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if it % 10 == 0:
                st = {k: float(v) for k, v in head.last_stats.items()}
                f.write(json.dumps({"type": "train", "epoch": 0, "iter": it, "lr": 3e-3, "loss": float(loss.detach()),
                                    "s_p": st["s_p"], "s_n": st["s_n"]}) + "\n")
    with torch.no_grad():
        return proj(x).numpy(), head.weight.detach().numpy()


def shrink_png(path):
    """Palette-quantise a PNG when it exceeds MAX_BYTES (docs images must stay small)."""
    if os.path.getsize(path) <= MAX_BYTES:
        return
    from PIL import Image  # matplotlib depends on Pillow

    Image.open(path).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="datasets", help="dataset root for the synthetic data (default: datasets)")
    ap.add_argument("--work", default=None, help="folder for intermediate files (default: a temp folder)")
    ap.add_argument("--out", default=HERE, help="where the example PNGs go (default: docs/images)")
    args = ap.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="reid_vis_")
    os.makedirs(work, exist_ok=True)

    ds = build_dataset("synthetic", args.root, num_train_ids=60, num_test_ids=60, num_cameras=4,
                       images_per_camera=3, num_distractors=30, seed=0, verbose=False)
    # camera means over query and gallery together: one test set, one normalisation
    test = list(ds.query) + list(ds.gallery)
    tf_test = stripe_histograms([p for p, _, _ in test], [c for _, _, c in test])
    qf, gf = tf_test[: len(ds.query)], tf_test[len(ds.query) :]
    ids = ([q[1] for q in ds.query], [g[1] for g in ds.gallery], [q[2] for q in ds.query], [g[2] for g in ds.gallery])
    dist = compute_distance(qf, gf, metric="cosine")
    rr = re_ranking(qf, gf, k1=20, k2=6, lambda_value=0.3, metric="cosine")
    plain, rerank = evaluate_rank(dist, *ids), evaluate_rank(rr, *ids)

    vis = visualize_from_features(qf, gf, ds.query, ds.gallery, os.path.join(work, "ranked"), topk=10, num_queries=3,
                                  mode="worst", distmat=dist, all_AP=plain["all_AP"], tile_height=160,
                                  image_format="png")
    shutil.copy(os.path.join(vis.output_dir, vis.pictures[0].image_file), os.path.join(args.out, "ranked_worst.png"))
    both = visualize_from_features(qf, gf, ds.query, ds.gallery, os.path.join(work, "ranked_rr"), topk=8,
                                   num_queries=1, mode="best", distmat=dist, rerank_distmat=rr, both_rows=True,
                                   all_AP=plain["all_AP"], rerank_all_AP=rerank["all_AP"], tile_height=160,
                                   image_format="png", show_junk=True)
    shutil.copy(os.path.join(both.output_dir, both.pictures[0].image_file), os.path.join(args.out, "ranked_rerank.png"))

    written = [
        plots.plot_cmc({"original": plain["cmc"], "re-ranked": rerank["cmc"]}, os.path.join(work, "cmc.png")),
        plots.plot_similarity_distributions(
            plots.pair_similarities(qf, gf, *ids),
            os.path.join(work, "similarity.png"), bins=60),
    ]
    tr_paths = [p for p, _, _ in ds.train]
    tr_labels = np.array([pid for _, pid, _ in ds.train], dtype=np.int64)
    tf = stripe_histograms(tr_paths, [c for _, _, c in ds.train])
    embeds = {}
    for name in ("circle", "amsoftmax"):
        os.makedirs(os.path.join(work, name), exist_ok=True)
        embeds[name] = train_head(tf, tr_labels, name, 600, 0, os.path.join(work, name, "metrics.jsonl"))
    written.append(plots.plot_dynamics([os.path.join(work, "circle"), os.path.join(work, "amsoftmax")],
                                       os.path.join(work, "dynamics.png"), labels=["Circle", "AM-Softmax"]))
    s_n, s_p = plots.similarity_pairs(embeds["circle"][0], tr_labels, embeds["circle"][1])
    written.append(plots.plot_decision_boundary(s_n, s_p, os.path.join(work, "boundary.png"), head="circle"))
    written.append(plots.plot_gradients(plots.gradient_grid(grid=101), os.path.join(work, "gradients.png")))
    for files in written:
        shutil.copy(files.png, os.path.join(args.out, os.path.basename(files.png)))
    # only this script's pictures: other pages keep their own images in this folder
    mine = ["ranked_worst.png", "ranked_rerank.png"] + [os.path.basename(f.png) for f in written]
    for name in mine:
        path = os.path.join(args.out, name)
        shrink_png(path)
        os.chmod(path, 0o644)  # temp-file writes are private (0600); docs are for everyone
        print(f"{name}: {os.path.getsize(path) // 1024} KB")
    print(f"intermediate files (CSV/JSON, index.html): {work}")


if __name__ == "__main__":
    main()
