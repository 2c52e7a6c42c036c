#!/usr/bin/env python
"""Regenerate the example pictures of docs/visualization.md.

With ``--run DIR`` (a finished training run: config.yaml, model_final.pth, metrics.jsonl) the
pictures come from that trained model, through the toolkit's own API:

* ranked results, CMC and similarity distributions: ``Predictor.from_run`` + ``evaluate_model``
  (with re-ranking, TEST.RERANK.* of the run) on the run's test set (DATASETS.TESTS[0]);
* training dynamics: the run's own ``metrics.jsonl`` (``plots.plot_dynamics``);
* the (s_n, s_p) plane: eval-mode features of the run's training images (``build_train_data``,
  labels as the trainer numbers them) against the trained identity head's class weights;
* the loss gradients are analytic (no model involved).

The docs' pictures come from the demo run::

    python tools/train.py --config-file configs/Demo/resnet18_circle.yml OUTPUT_DIR output/demo
    python docs/images/make_examples.py --run output/demo

Without ``--run`` no trained CNN is needed: the features are colour histograms of six horizontal
stripes of the centre of each synthetic-dataset image, each camera's mean removed (a 384-d
hand-crafted descriptor), and the training-dynamics and (s_n, s_p) figures come from a small
projection (384 -> 64) trained for 600 iterations with the real Circle and AM-Softmax heads
(``build_head``) on those histograms, logging ``head.last_stats`` like the trainer does.

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

from reid.data import build_dataset, build_test_data, build_train_data  # noqa: E402
from reid.evaluation import compute_distance, evaluate_model, evaluate_rank, format_table, re_ranking  # noqa: E402
from reid.inference import Predictor, load_weights  # noqa: E402
from reid.modeling import build_model  # noqa: E402
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
    """Palette-quantize a PNG when it exceeds MAX_BYTES (docs images must stay small)."""
    if os.path.getsize(path) <= MAX_BYTES:
        return
    from PIL import Image  # matplotlib depends on Pillow

    Image.open(path).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def histogram_data(root, work):
    """Test-set features, distances and metrics, dynamics and (s_n, s_p) from colour histograms."""
    ds = build_dataset("synthetic", root, num_train_ids=60, num_test_ids=60, num_cameras=4,
                       images_per_camera=3, num_distractors=30, seed=0, verbose=False)
    # camera means over query and gallery together: one test set, one normalisation
    test = list(ds.query) + list(ds.gallery)
    tf_test = stripe_histograms([p for p, _, _ in test], [c for _, _, c in test])
    qf, gf = tf_test[: len(ds.query)], tf_test[len(ds.query) :]
    ids = ([q[1] for q in ds.query], [g[1] for g in ds.gallery], [q[2] for q in ds.query], [g[2] for g in ds.gallery])
    dist = compute_distance(qf, gf, metric="cosine")
    rr = re_ranking(qf, gf, k1=20, k2=6, lambda_value=0.3, metric="cosine")
    plain, rerank = evaluate_rank(dist, *ids), evaluate_rank(rr, *ids)
    for name, res in (("plain", plain), ("rerank", rerank)):
        print(f"colour histograms, {name}: R-1 {100 * res['cmc'][0]:.2f}  mAP {100 * res['mAP']:.2f}")

    tr_paths = [p for p, _, _ in ds.train]
    tr_labels = np.array([pid for _, pid, _ in ds.train], dtype=np.int64)
    tf = stripe_histograms(tr_paths, [c for _, _, c in ds.train])
    embeds = {}
    for name in ("circle", "amsoftmax"):
        os.makedirs(os.path.join(work, name), exist_ok=True)
        embeds[name] = train_head(tf, tr_labels, name, 600, 0, os.path.join(work, name, "metrics.jsonl"))
    s_n, s_p = plots.similarity_pairs(embeds["circle"][0], tr_labels, embeds["circle"][1])
    return {
        "query": ds.query, "gallery": ds.gallery, "qf": qf, "gf": gf, "ids": ids,
        "dist": dist, "rr": rr, "ap": plain["all_AP"], "rr_ap": rerank["all_AP"],
        "cmc": plain["cmc"], "rr_cmc": rerank["cmc"],
        "runs": [os.path.join(work, "circle"), os.path.join(work, "amsoftmax")], "run_labels": ["Circle", "AM-Softmax"],
        "s_n": s_n, "s_p": s_p, "head": "circle", "margin": None,
        "source": "colour histograms", "rr_mode": "best",
    }


def run_data(run, root):
    """The same pieces from a trained run: its model's features, its metrics.jsonl, its head."""
    opts = ["DATASETS.ROOT", root] if root else []
    predictor = Predictor.from_run(run, opts=opts)  # config.yaml + model_final.pth, no identity head
    cfg = predictor.cfg
    name = cfg.DATASETS.TESTS[0]
    query, gallery = build_test_data(cfg, name)
    res = evaluate_model(cfg, predictor.model, query, gallery, rerank=True, keep_distmat=True)
    arch = f"{cfg.MODEL.BACKBONE.NAME} + {cfg.MODEL.HEADS.NAME} head"
    print(format_table(res.metrics, title=f"{run} ({arch}) on {name}: {len(query)} query, {len(gallery)} gallery"))

    # (s_n, s_p) of the training images against the trained head's class weights. The trainer
    # numbers identities with build_train_data; a model with that many classes loads the head.
    # The head sees the feature after the neck, which is the eval-mode feature with NECK_FEAT "after".
    train = build_train_data(cfg)
    cfg_head = cfg.clone()
    cfg_head.defrost()
    cfg_head.MODEL.HEADS.NUM_CLASSES = train.num_classes
    full = load_weights(build_model(cfg_head), cfg.MODEL.WEIGHTS)
    if getattr(getattr(full, "head", None), "weight", None) is None:
        raise SystemExit(f"{run}: the model has no single identity head (MODEL.META_ARCHITECTURE "
                         f"{cfg.MODEL.META_ARCHITECTURE}); the (s_n, s_p) figure needs a baseline run.")
    if str(cfg.MODEL.HEADS.NECK_FEAT).lower() != "after" and str(cfg.MODEL.HEADS.NECK).lower() != "none":
        print("note: MODEL.HEADS.NECK_FEAT is 'before', so the eval features are not the ones the head saw")
    weight = full.head.weight.detach()
    tr_feats = predictor.extract_paths([p for p, _, _ in train.items])  # eval-mode features, as the head sees them
    tr_labels = np.array([pid for _, pid, _ in train.items], dtype=np.int64)
    s_n, s_p = plots.similarity_pairs(tr_feats, tr_labels, weight)
    head = str(cfg.MODEL.HEADS.NAME).lower()
    print(f"training images: {len(tr_labels)} of {train.num_classes} identities; "
          f"mean s_p {s_p.mean():.3f}, mean s_n (largest other class) {s_n.mean():.3f}")
    q, g = res.query, res.gallery
    return {
        "query": q, "gallery": g, "qf": q.feats, "gf": g.feats, "ids": (q.pids, g.pids, q.camids, g.camids),
        "dist": res.distmats["plain"], "rr": res.distmats["rerank"],
        "ap": res.all_ap["plain"], "rr_ap": res.all_ap["rerank"],
        "cmc": res.cmc["plain"], "rr_cmc": res.cmc["rerank"],
        "runs": [run], "run_labels": [f"{cfg.MODEL.BACKBONE.NAME} + {cfg.MODEL.HEADS.NAME} head"],
        "s_n": s_n, "s_p": s_p, "head": head, "margin": float(cfg.MODEL.HEADS.MARGIN),
        "source": f"trained {cfg.MODEL.BACKBONE.NAME}", "rr_mode": "gain",
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default=None,
                    help="a finished training run (OUTPUT_DIR: config.yaml, model_final.pth, metrics.jsonl); "
                         "without it the pictures come from colour histograms")
    ap.add_argument("--root", default=None,
                    help="dataset root (default: the run's DATASETS.ROOT with --run, else 'datasets')")
    ap.add_argument("--work", default=None, help="folder for intermediate files (default: a temp folder)")
    ap.add_argument("--out", default=HERE, help="where the example PNGs go (default: docs/images)")
    args = ap.parse_args(argv)
    # before the slow part: a missing --out folder must not fail only at the first copy
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="reid_vis_")
    os.makedirs(work, exist_ok=True)

    d = run_data(args.run, args.root) if args.run else histogram_data(args.root or "datasets", work)
    qf, gf, ids = d["qf"], d["gf"], d["ids"]

    vis = visualize_from_features(qf, gf, d["query"], d["gallery"], os.path.join(work, "ranked"), topk=10,
                                  num_queries=3, mode="worst", distmat=d["dist"], all_AP=d["ap"], tile_height=160,
                                  image_format="png")
    shutil.copy(os.path.join(vis.output_dir, vis.pictures[0].image_file), os.path.join(args.out, "ranked_worst.png"))
    # Original vs re-ranked order. A trained model ranks most queries perfectly either way, so
    # with --run the picture shows the query whose AP re-ranking raised most (ties: lowest index).
    gain = np.asarray(d["rr_ap"], np.float64) - np.asarray(d["ap"], np.float64)
    if d["rr_mode"] == "gain" and np.nanmax(gain) > 0:
        pick = {"mode": "indices", "indices": [int(np.nanargmax(gain))]}
    else:
        pick = {"mode": "best"}
    both = visualize_from_features(qf, gf, d["query"], d["gallery"], os.path.join(work, "ranked_rr"), topk=8,
                                   num_queries=1, distmat=d["dist"], rerank_distmat=d["rr"], both_rows=True,
                                   all_AP=d["ap"], rerank_all_AP=d["rr_ap"], tile_height=160,
                                   image_format="png", show_junk=True, **pick)
    p0 = both.pictures[0]
    print(f"re-ranking picture: query {p0.query_index} (AP {d['ap'][p0.query_index]:.3f} -> "
          f"{d['rr_ap'][p0.query_index]:.3f} re-ranked; chosen by {pick['mode']})")
    shutil.copy(os.path.join(both.output_dir, p0.image_file), os.path.join(args.out, "ranked_rerank.png"))

    src = d["source"]
    written = [
        plots.plot_cmc({"original": d["cmc"], "re-ranked": d["rr_cmc"]}, os.path.join(work, "cmc.png"),
                       title=f"CMC curve ({src}, synthetic test set)"),
        plots.plot_similarity_distributions(
            plots.pair_similarities(qf, gf, *ids),
            os.path.join(work, "similarity.png"), bins=60,
            title=f"Positive vs negative pair similarity ({src}, test set)"),
        plots.plot_dynamics(d["runs"], os.path.join(work, "dynamics.png"), labels=d["run_labels"]),
    ]
    bnd = plots.plot_decision_boundary(d["s_n"], d["s_p"], os.path.join(work, "boundary.png"), head=d["head"],
                                       margin=d["margin"])
    print(f"(s_n, s_p) plane: {bnd.data['fraction_past_boundary']:.1%} of training images past the "
          f"{bnd.data['boundary']} boundary")
    written.append(bnd)
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
