#!/usr/bin/env python
"""Embedding for a tracker on a busy machine: OSNet x0.25 (256x128) frames/s at about 7 detections a
frame, with the CPU to itself and with other processes keeping cores busy, per runtime and thread count.

A tracker embeds the crops of one frame per call (a handful of images), so thread pools that help
large batches only add hand-offs, and a second busy process takes one of 2 cores from them. Each
setting runs ``reid.tracking.appearance.embed_rows`` (what tools/track.py runs per sequence: read the
frame, cut the crops, one model call a frame) over bench_tracking.py's synthetic set; ``--busy N``
starts N processes that spin on the CPU for the loaded half. Then tools/track.py's runs under the
same load (BoT-SORT with BoxMOT's defaults, the gate calibrated from the ground truth), as a
checkpoint at the old default of 2 threads and at the new one of 1, and as an ONNX file in ONNX
Runtime, give frames/s with the tracker's own time included.

    python benchmarks/bench_track_load.py --tracker-python /path/to/boxmot-env/bin/python --busy 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_tracking import ROOT, load_average, machine_line, random_checkpoint, sequences_for  # noqa: E402

#: (label, backend, torch threads, ONNX Runtime / OpenVINO threads via torch's count at session start)
SETTINGS = (("torch, 2 threads", "torch", 2), ("torch, 1 thread", "torch", 1),
            ("onnxruntime, 2 threads", "onnxruntime", 2), ("onnxruntime, 1 thread", "onnxruntime", 1))


#: tools/track.py runs under the load, BoT-SORT with BoxMOT's defaults: (label, backend, threads); backend
#: None is what track.py runs a checkpoint with when --backend is not given (reid/inference/backend_choice.py).
TRACK_RUNS = (("checkpoint, --backend torch, 2 threads (the default until 2026-11-27)", "torch", 2),
              ("checkpoint, --backend torch, 1 thread", "torch", 1),
              ("checkpoint, no --backend (track.py's default), 1 thread", None, 1))


def spinners(n: int) -> List[subprocess.Popen]:
    """`n` processes that keep one core each busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def embed_speed(checkpoint: str, backend: str, threads: int, sequences: List[Any], boxes: List[Any],
                frames: int) -> float:
    """Frames/s of embed_rows over the first `frames` frames of every sequence with one model setting
    (torch's threads, and an ONNX Runtime session made at that count)."""
    from reid.tracking.appearance import embed_rows, load_appearance_models

    torch.set_num_threads(threads)
    model = load_appearance_models([checkpoint], device="cpu", backend=backend)[0]
    model.embed([np.zeros((160, 64, 3), np.uint8)] * 8)  # warm-up: session start, first allocations
    start = time.perf_counter()
    for s, rows in zip(sequences, boxes):
        embed_rows(s, rows.select(rows.frame <= frames), model)
    return sum(min(s.length, frames) for s in sequences) / (time.perf_counter() - start)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busy", type=int, default=1, help="busy processes during the loaded half (default: 1)")
    p.add_argument("--tracker-python", help="a Python with boxmot[trackeval]==25.0.0 for the tracker run")
    p.add_argument("--data", default="datasets/bench_tracking", help="the synthetic set (made or reused)")
    p.add_argument("--output", default="output/bench_track_load")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--cameras", type=int, default=2)
    p.add_argument("--size", default="640x360")
    p.add_argument("--people-per-frame", type=float, default=10.0)
    p.add_argument("--identities", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--far", type=float, default=1e-2)
    p.add_argument("--embed-frames", type=int, default=100, help="frames per camera embedded per setting (default: 100)")
    args = p.parse_args(argv)
    from reid.tracking.sequences import find_sequences
    from reid.tracking.tracker_runs import sequence_detections, track_runs

    sequences = find_sequences(sequences_for(args))
    boxes = [sequence_detections(s, "det") for s in sequences]
    frames = int(sum(s.length for s in sequences))
    os.makedirs(args.output, exist_ok=True)
    checkpoint = random_checkpoint(os.path.join(ROOT, "configs", "Market1501", "osnet_x0_25_circle.yml"),
                                   os.path.join(args.output, "osnet_x0_25.pth"),
                                   ["INPUT.SIZE_TEST", [256, 128], "MODEL.HEADS.NUM_CLASSES", 0])
    record: Dict[str, Any] = {"machine": machine_line(torch.get_num_threads()), "frames": frames,
                              "detections_per_frame": sum(len(b) for b in boxes) / frames, "busy": args.busy,
                              "embedding": {}, "load": {}}
    for loaded in (False, True):
        procs = spinners(args.busy) if loaded else []
        try:
            time.sleep(1.0 if loaded else 0.0)
            record["load"]["busy" if loaded else "alone"] = load_average()
            for label, backend, threads in SETTINGS:
                fps = embed_speed(checkpoint, backend, threads, sequences, boxes, args.embed_frames)
                record["embedding"].setdefault(label, {})["busy" if loaded else "alone"] = fps
                print(f"{'busy' if loaded else 'alone'} | {label}: {fps:.1f} frames/s", flush=True)
            if loaded and args.tracker_python:
                from reid.tracking.appearance import load_appearance_models

                for label, backend, threads in TRACK_RUNS:
                    torch.set_num_threads(threads)
                    start = time.perf_counter()  # loading includes the export when ONNX Runtime runs a checkpoint
                    model = load_appearance_models([checkpoint], device="cpu", backend=backend,
                                                   crops=sum(len(b) for b in boxes), log=print)[0]
                    loaded_in = time.perf_counter() - start
                    run = track_runs(sequences, (model,), "botsort",
                                     os.path.join(args.output, "track", f"{backend or 'default'}-{threads}"),
                                     args.tracker_python, far=args.far, boxes=boxes, log=print)[0]
                    record.setdefault("track_busy", {})[label] = {**run.speed(), "backend": model.identity["backend"],
                                                            "load_seconds": loaded_in}
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    with open(os.path.join(args.output, "bench_track_load.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    print(f"\n# {record['machine']}; {frames} frames, {record['detections_per_frame']:.1f} detections a frame; "
          f"load average alone {record['load']['alone']}, with {args.busy} busy {record['load']['busy']}\n")
    print("| runtime, threads | frames/s alone | frames/s with " + f"{args.busy} busy process" + " |\n|---|---|---|")
    for label, row in record["embedding"].items():
        print(f"| {label} | {row['alone']:.1f} | {row['busy']:.1f} |")
    if "track_busy" in record:
        print(f"\n| tools/track.py, BoT-SORT (BoxMOT's defaults), {args.busy} busy | runtime | frames/s (all) | "
              "embedding | tracker | model load (s) |\n|---|---|---|---|---|---|")
        for label, speed in record["track_busy"].items():
            print(f"| {label} | {speed['backend']} | {speed['frames_per_second']:.1f} | "
                  f"{frames / speed['embedding_seconds']:.1f} | {frames / speed['tracker_seconds']:.1f} | "
                  f"{speed['load_seconds']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
