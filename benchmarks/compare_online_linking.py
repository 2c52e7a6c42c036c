#!/usr/bin/env python
"""Online linking (the store, tracklet by tracklet) against offline linking (tools/link_cameras.py) on
one whole recording: multi-camera IDF1 / IDP / IDR of both, scored by TrackEval.

Both take the same tracklets (each sequence's ground truth made camera-local: ``--tracks gt``, so the
linking alone is measured), the same features (up to 8 crops per tracklet, the same choice and
pooling) and the same threshold (``--threshold``, a cosine similarity; offline uses 1 - it as its
distance). Offline clusters every tracklet at once (average linkage); online, ``tools/ingest.py``
writes the tracklets in order of start time and each joins the best identity already in the store
or starts its own. The store's identities are then written as each sequence's global ids and scored
as link_cameras scores its own (AI City's multi-camera protocol, reid.tracking.cross_camera).

    python benchmarks/compare_online_linking.py --run output/demo --output /tmp/online_vs_offline \\
        --tracker-python /root/.cache/circle-reid/tracker-env-boxmot-25.0.0/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

METRICS = ("IDF1", "IDP", "IDR")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--sequences", default=None, help="MOT sequences with ground truth (default: made here)")
    p.add_argument("--cameras", type=int, default=3)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--identities", type=int, default=24)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--threshold", type=float, default=0.8, help="cosine similarity for both")
    p.add_argument("--tracker-python", default=None)
    args = p.parse_args()
    from reid.tracking.cross_camera import LinkSettings, link_cameras, read_camera_tracks, score_cameras, \
        trackeval_score
    from reid.tracking.mot_files import MOTRows, write_results
    from reid.tracking.sequences import find_sequences
    from reid.tracking.tracker_env import tracker_python
    from reid.tracking.appearance import load_appearance_models
    from reid.store import Store
    from reid.store.schema import Tracklet

    os.makedirs(args.output, exist_ok=True)
    seq_dir = args.sequences or os.path.join(args.output, "sequences")
    if not args.sequences and not os.path.isdir(seq_dir):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_sequences.py"), "--output", seq_dir,
                        "--cameras", str(args.cameras), "--frames", str(args.frames), "--seed", str(args.seed),
                        "--identities", str(args.identities),
                        "--quiet"], check=True)
    sequences = find_sequences(seq_dir)
    python = tracker_python(args.tracker_python)

    def score(entries, results, workdir):
        return trackeval_score(entries, results, workdir, python)

    model = load_appearance_models(run=args.run)[0]
    offline_dir = os.path.join(args.output, "offline")
    offline = link_cameras(sequences, "gt", model, offline_dir, LinkSettings(1.0 - args.threshold), score=score,
                           log=lambda line: None)
    store_dir = os.path.join(args.output, "store")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ingest.py"), "--store", store_dir, "--run", args.run,
                    "--sequences", seq_dir, "--tracks", "gt", "--threshold", str(args.threshold), "--quiet"],
                   check=True)
    store = Store(store_dir)
    with store.session() as s:
        identity = {src: ident for src, ident in s.query(Tracklet.source, Tracklet.identity_id)}
    rows = read_camera_tracks(sequences, "gt")
    online_dir = os.path.join(args.output, "online")
    os.makedirs(os.path.join(online_dir, "tracks"), exist_ok=True)
    files = []
    for seq, r in zip(sequences, rows):
        keys = {int(k.rsplit(":", 1)[1]): v for k, v in identity.items() if k.split(":")[-2] == seq.name}
        ids = np.array([keys[int(t)] for t in r.track_id], np.int64)
        files.append(write_results(os.path.join(online_dir, "tracks", f"{seq.name}.txt"),
                                   MOTRows(r.frame, ids, r.boxes, r.conf, r.cls, r.visibility)))
    online = score_cameras(sequences, files, online_dir, score)
    result = {"threshold_similarity": args.threshold, "sequences": [s.name for s in sequences],
              "tracklets": offline["num_tracklets"],
              "offline": {"identities": offline["num_identities"],
                          **{m: offline["metrics"]["multi_camera_combined"][m] for m in METRICS}},
              "online": {"identities": len(set(identity.values())),
                         **{m: online["multi_camera_combined"][m] for m in METRICS}}}
    with open(os.path.join(args.output, "comparison.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
