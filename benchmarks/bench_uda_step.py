#!/usr/bin/env python
"""Seconds of one clustering step of learning without labels, split by stage, at real crop sizes.

What ClusterEachEpoch runs before every epoch (reid/uda/hooks.py): the feature pass over every
training crop (the closure of reid/uda/build.py: test transforms, batches of
reid.uda.build.extraction_batch), then the Jaccard graph with camera-balanced neighbours, the
UDA.EPS auto radius, DBSCAN and the memory's reset. Crops: the synthetic renderer's people at
256x128 (the first `--crops` of them, each with its camera).
Model: OSNet x0.25 in torchreid's layout (configs/MSMT17/osnet_x0_25_torchreid.yml) with seeded
random weights, or `--run` a trained run. `--batch` compares the feature pass's batch sizes.

    python benchmarks/bench_uda_step.py --crops 7380 --batch 256 32   # the config's batch against the CPU batch
    python benchmarks/bench_uda_step.py --crops 32621
"""
import argparse
import json
import os
import time

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crops", type=int, default=7380, help="training crops (the first N the renderer made)")
    p.add_argument("--ids", type=int, default=None, help="identities rendered (default: enough for --crops)")
    p.add_argument("--root", default="/tmp/bench_uda_step")
    p.add_argument("--config", default="configs/MSMT17/osnet_x0_25_torchreid.yml")
    p.add_argument("--batch", type=int, nargs="+", default=[0], help="feature-pass batch sizes (0: the toolkit's)")
    p.add_argument("--output", default=None, help="JSON file for the figures")
    args = p.parse_args()

    from reid.config import load_config
    from reid.data import build_dataset, build_test_loader
    from reid.evaluation.extract import extract_features
    from reid.modeling import build_model
    from reid.uda.build import _with_test_batch, extraction_batch
    from reid.uda.clustering import ClusterSettings, cluster_centroids, cluster_features

    t = time.perf_counter()
    ids = args.ids or int(args.crops / 14.5) + 10  # the renderer shows a person on ~14.6 of 30 camera slots
    ds = build_dataset("synthetic", args.root, num_train_ids=ids, num_test_ids=2, num_cameras=6,
                       images_per_camera=5, num_distractors=0, image_size=(256, 128))
    train = sorted(ds.train)[: args.crops]
    if len(train) < args.crops:
        raise SystemExit(f"only {len(train)} crops rendered; raise --ids")
    items = [(path, -1, cam) for path, _, cam in train]
    cams = np.array([cam for _, _, cam in train])
    print(f"{len(items)} crops of 256x128 ready in {time.perf_counter() - t:.0f} s")
    cfg = load_config(args.config, ["MODEL.DEVICE", "cpu", "MODEL.BACKBONE.PRETRAINED", "False", "UDA.EPS", "auto",
                                    "UDA.CAMERA_NEIGHBOURS", "True", "UDA.CAMERA_AWARE", "True",
                                    "MODEL.LOSSES.ID.LABEL_SMOOTH", "0"])
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    settings = ClusterSettings.from_cfg(cfg)
    results = []
    for batch in args.batch:
        batch = batch or extraction_batch(int(cfg.TEST.IMS_PER_BATCH), torch.device("cpu"))
        loader = build_test_loader(_with_test_batch(cfg, batch), items, [])
        t0 = time.perf_counter()
        feats = extract_features(model, loader, torch.device("cpu"), flip=bool(cfg.TEST.FLIP)).feats
        t1 = time.perf_counter()
        clusters = cluster_features(feats, settings, cameras=cams)
        t2 = time.perf_counter()
        labels = np.where(clusters.labels >= 0, clusters.labels, -1)
        if clusters.num_clusters:
            cluster_centroids(feats, labels, clusters.num_clusters)
        t3 = time.perf_counter()
        row = {"crops": len(items), "batch": batch, "workers": loader.num_workers, "extract_s": t1 - t0,
               "crops_per_s": len(items) / (t1 - t0), "neighbours_s": clusters.seconds_distance,
               "radius_s": clusters.seconds_radius, "dbscan_s": clusters.seconds_dbscan, "memory_s": t3 - t2,
               "total_s": t3 - t0, "clusters": clusters.num_clusters, "eps": clusters.eps}
        results.append(row)
        print(" ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
