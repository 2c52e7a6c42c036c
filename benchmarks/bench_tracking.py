#!/usr/bin/env python
"""What a re-ID model does to a tracker, and what it costs: BoxMOT's trackers on synthetic
multi-camera sequences, motion only against a good appearance model, a randomly initialised
one of the same architecture and any model files you add, scored by TrackEval; then frames/s.

The set (made once, reused when its settings match): ``reid.tracking.synthetic_sequences``
with 2 cameras x 300 frames of 640x360 at 10 frames/s, ~10 people per frame (32 identities:
people cross, occlude each other, leave and come back, in both cameras), seed 0; the noisy
det/det.txt boxes are tracked. Models:

* ``demo``: the demo model (``configs/Demo/resnet18_circle.yml`` trained: ``make demo``, or a
  run folder given with ``--run``), PyTorch on the CPU;
* ``random``: the same config with randomly initialised weights (seed 0): what a model that
  has learnt nothing does;
* each of ``--weights`` (checkpoints that store their config, exported .onnx/.pt2 files, or,
  with ``--config-file``, one foreign file such as torchreid's OSNet).

Each (tracker, model) is one run of ``reid.tracking.tracker_runs.track_runs`` (what ``tools/track.py``
runs): the crops of a frame embedded in one batch, the appearance threshold calibrated on the
ground truth at FAR 1e-2 (BoT-SORT's ``appearance_thresh``, StrongSORT's ``max_cos_dist``;
DeepOCSORT weighs appearance and has no threshold), BoxMOT's default settings otherwise.
StrongSORT has no motion-only mode, so its rows are compared with each other only.

Speed: the same runs give frames/s (all frames of all cameras over embedding + tracker time)
and the appearance model's share. Then the issue's target case: OSNet x0.25 at 256x128
(random weights: speed does not depend on them) through ONNX Runtime with BoT-SORT, with
BoxMOT's default camera-motion compensation (it reads and aligns every frame) and with
``use_cmc=false`` (the synthetic cameras are static), split into reading + cropping the frames,
the model's calls, and the tracker.

    # the default benchmark (12.8 minutes on a shared 2-core CPU, docs/benchmarks.md)
    python benchmarks/bench_tracking.py --run output/demo --tracker-python /path/to/boxmot-env/bin/python
    # plus torchreid's OSNet x0.25 trained on MSMT17 (from torchreid's model zoo; fetch the file first)
    python benchmarks/bench_tracking.py --run output/demo --weights osnet_x0_25_msmt17.pth \\
        --config-file configs/MSMT17/osnet_x0_25_torchreid.yml
    # one tracker, the speed part only
    python benchmarks/bench_tracking.py --run output/demo --trackers botsort --skip-accuracy

``--tracker-python`` is optional (without it the tracker environment of docs/tracking.md is made
once). Results: ``--output`` (default output/bench_tracking) holds each tracker's run folders
(metrics.json, summary.md) and ``bench_tracking.json``; the tables are printed in Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

TRACKERS = ("botsort", "deepocsort", "strongsort")


def machine_line(threads: int) -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import onnxruntime
        ort = f", onnxruntime {onnxruntime.__version__}"
    except ImportError:
        ort = ""
    return (f"{model}, {os.cpu_count()} cores, {threads} threads, torch {torch.__version__}{ort}, "
            f"Python {platform.python_version()}, {date.today()}")


def load_average() -> str:
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


# ------------------------------------------------------------------ data and models
def sequences_for(args: argparse.Namespace) -> str:
    """The synthetic set in args.data: made when missing or made with other settings."""
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    width, height = (int(v) for v in args.size.lower().split("x"))
    settings = SequenceSettings(cameras=args.cameras, identities=args.identities, frames=args.frames, width=width,
                                height=height, people_per_frame=args.people_per_frame, seed=args.seed)
    summary = os.path.join(args.data, "sequences.json")
    wanted = {k: getattr(settings, k) for k in ("cameras", "identities", "frames", "width", "height",
                                                 "people_per_frame", "seed")}
    if os.path.isfile(summary):
        with open(summary, encoding="utf-8") as f:
            have = json.load(f).get("settings", {})
        if all(have.get(k) == v for k, v in wanted.items()):
            print(f"reusing {args.data} ({wanted})", flush=True)
            return args.data
    start = time.perf_counter()
    make_sequences(args.data, settings, overwrite=True)
    print(f"made {args.data} ({wanted}) in {time.perf_counter() - start:.0f} s", flush=True)
    return args.data


def random_checkpoint(cfg_source: Any, path: str, opts: Sequence[Any] = ()) -> str:
    """A checkpoint of `cfg_source`'s architecture (a config file or a CfgNode) with randomly
    initialised weights (seed 0), storing its config, as tools/train.py's checkpoints do."""
    from reid.config import get_cfg, load_config
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.modeling import build_model

    if os.path.isfile(path):
        return path
    fixed = ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu", *opts]
    if isinstance(cfg_source, str):
        cfg = load_config(cfg_source, fixed)
    else:
        cfg = get_cfg()
        cfg.merge_from_other_cfg(cfg_source)
        cfg.merge_from_list(fixed)
    torch.manual_seed(0)
    model = build_model(cfg)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_checkpoint(path, model=model.state_dict(), cfg=cfg.dump())
    return path


def load_models(args: argparse.Namespace, work: str) -> List[Any]:
    from reid.tracking.appearance import load_appearance_models

    demo = load_appearance_models(run=args.run, opts=["MODEL.DEVICE", "cpu"], device="cpu")[0]
    demo.label = "demo"
    name = "random-{}-{}x{}.pth".format(demo.cfg.MODEL.BACKBONE.NAME.replace("/", "_"), *demo.cfg.INPUT.SIZE_TEST)
    random_path = random_checkpoint(demo.cfg, os.path.join(work, "checkpoints", name))  # made once, then reused
    random = load_appearance_models([random_path], device="cpu")[0]
    random.label = "random"
    models = [demo, random]
    for path in args.weights or ():
        found = load_appearance_models([path], config_file=args.config_file, opts=["MODEL.DEVICE", "cpu"],
                                       device="cpu", backend=args.backend) if args.config_file else \
            load_appearance_models([path], device="cpu", backend=args.backend)
        models.append(found[0])
    return models


# ------------------------------------------------------------------ the two parts
def accuracy(args: argparse.Namespace, sequences: List[Any], boxes: List[Any], models: List[Any], python: str,
             work: str) -> Dict[str, Any]:
    from reid.tracking.tracker_runs import differences, track_runs, tracked_models
    from reid.tracking.report import write_report

    found: Dict[str, Any] = {}
    for tracker in args.trackers:
        start = time.perf_counter()
        output = os.path.join(work, tracker)
        runs = track_runs(sequences, tracked_models(models, tracker), tracker, output, python, far=args.far,
                          log=lambda m: print(f"  {tracker}: {m}", flush=True), boxes=boxes)
        write_report(runs, output, {"sequences": args.data, "tracker": tracker, "detections": "det",
                                    "far": args.far, "tracker_options": {},
                                    "sequence_names": [s.name for s in sequences]})
        diff = differences(runs)
        found[tracker] = {r.label: {"metrics": r.metrics["COMBINED"] if r.metrics else None,
                                    "difference": diff.get(r.label), "threshold": r.threshold.get("distance"),
                                    "speed": r.speed()} for r in runs}
        print(f"{tracker}: {time.perf_counter() - start:.0f} s", flush=True)
    return found


def read_crop_seconds(sequences: List[Any], boxes: List[Any]) -> float:
    """Seconds to read every frame and cut (and BGR->RGB flip) its crops, as embed_rows does."""
    from reid.tracking.frames import clip_boxes, frame_crops

    start = time.perf_counter()
    for seq, rows in zip(sequences, boxes):
        pixels = clip_boxes(rows.boxes, seq.width, seq.height)
        inside = np.flatnonzero((pixels[:, 2] > pixels[:, 0]) & (pixels[:, 3] > pixels[:, 1]))
        for _, _, crops in frame_crops(seq, rows.frame[inside], pixels[inside]):
            [np.ascontiguousarray(c[:, :, ::-1]) for c in crops]
    return time.perf_counter() - start


def speed(args: argparse.Namespace, sequences: List[Any], boxes: List[Any], python: str, work: str) -> Dict[str, Any]:
    """OSNet x0.25 (256x128, random weights) through ONNX Runtime with BoT-SORT, with and without
    camera-motion compensation; motion only beside each."""
    from reid.tracking.appearance import load_appearance_models
    from reid.tracking.tracker_runs import track_runs

    path = random_checkpoint(os.path.join(ROOT, "configs", "Market1501", "osnet_x0_25_circle.yml"),
                             os.path.join(work, "checkpoints", "osnet_x0_25.pth"),
                             ["INPUT.SIZE_TEST", [256, 128], "MODEL.HEADS.NUM_CLASSES", 0])
    osnet = load_appearance_models([path], device="cpu", backend="onnxruntime")[0]
    osnet.label = "osnet_x0_25 (onnxruntime)"
    osnet.embed([np.zeros((160, 64, 3), np.uint8)] * 8)  # warm-up (session start)
    read_seconds = read_crop_seconds(sequences, boxes)
    rows: Dict[str, Any] = {"read_crop_seconds": read_seconds}
    threads = torch.get_num_threads()
    for name, options in (("BoxMOT default (use_cmc on)", {}), ("use_cmc=false", {"use_cmc": False}),
                          ("use_cmc=false, torch 1 thread", {"use_cmc": False})):
        # The last: ONNX Runtime keeps the threads its session was made with, and torch's own pool
        # (the crops' resize and stack) drops to one, so the two pools stop competing for 2 cores.
        torch.set_num_threads(1 if "torch 1 thread" in name else threads)
        folder = os.path.join(work, "speed", name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", ""))
        runs = track_runs(sequences, (None, osnet), "botsort", folder, python,
                          far=args.far, tracker_options=options, boxes=boxes,
                          log=lambda m: print(f"  speed {name}: {m}", flush=True))
        rows[name] = {r.label: {"speed": r.speed(), "metrics": r.metrics["COMBINED"] if r.metrics else None}
                      for r in runs}
    torch.set_num_threads(threads)
    return rows


# ------------------------------------------------------------------ tables
def accuracy_table(found: Dict[str, Any]) -> str:
    lines = ["| tracker | model | HOTA | AssA | IDF1 | IDSW | dHOTA | dAssA | dIDF1 | threshold |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for tracker, runs in found.items():
        for label, r in runs.items():
            m, d, t = r["metrics"], r["difference"], r["threshold"]
            values = [f"{m['HOTA']:.2f}", f"{m['AssA']:.2f}", f"{m['IDF1']:.2f}", f"{m['IDSW']}"] if m else ["-"] * 4
            delta = [f"{d['HOTA']:+.2f}", f"{d['AssA']:+.2f}", f"{d['IDF1']:+.2f}"] if d else ["-"] * 3
            thr = "-" if label == "motion only" else ("weighted (none)" if t is None else f"{t:.3f}")
            lines.append(f"| {tracker} | {label} | " + " | ".join(values + delta + [thr]) + " |")
    return "\n".join(lines)


def _speed_cells(s: Dict[str, float]) -> List[str]:
    frames = s["frames"]
    embed = f"{frames / s['embedding_seconds']:.1f}" if s["embedding_seconds"] > 1e-3 else "-"
    return [f"{s['frames_per_second']:.1f}", embed, f"{frames / s['tracker_seconds']:.1f}",
            "-" if embed == "-" else f"{100 * s['appearance_share']:.0f}%"]


def speed_table(found: Dict[str, Any], fast: Optional[Dict[str, Any]], frames: int) -> str:
    lines = ["| tracker | model | frames/s (all) | frames/s (embedding alone) | frames/s (tracker alone) | "
             "appearance share |", "|---|---|---|---|---|---|"]
    for tracker, runs in found.items():
        for label, r in runs.items():
            lines.append(f"| {tracker} | {label} | " + " | ".join(_speed_cells(r["speed"])) + " |")
    if fast:
        for name, runs in fast.items():
            if name == "read_crop_seconds":
                continue
            for label, r in runs.items():
                lines.append(f"| botsort, {name} | {label} | " + " | ".join(_speed_cells(r["speed"])) + " |")
        lines.append(f"\nReading the frames and cutting the crops alone: {frames / fast['read_crop_seconds']:.0f} "
                     f"frames/s ({1000 * fast['read_crop_seconds'] / frames:.1f} ms a frame, inside 'embedding').")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="output/demo", help="the demo model's run folder (default: output/demo)")
    p.add_argument("--weights", nargs="+", help="more models: checkpoints, exported files, or one foreign file "
                                                "with --config-file (torchreid's osnet_x0_25_msmt17.pth, ...)")
    p.add_argument("--config-file", help="the config of the one --weights file (a torchreid config)")
    p.add_argument("--backend", default="torch", choices=("torch", "onnxruntime", "openvino"),
                   help="runtime of the --weights checkpoints (default: torch)")
    p.add_argument("--trackers", nargs="+", default=list(TRACKERS), choices=TRACKERS)
    p.add_argument("--tracker-python", help="a Python with boxmot[trackeval]==25.0.0 (default: made once)")
    p.add_argument("--data", default="datasets/bench_tracking", help="the synthetic set (made or reused)")
    p.add_argument("--output", default="output/bench_tracking")
    p.add_argument("--frames", type=int, default=300, help="frames per camera (default: 300)")
    p.add_argument("--cameras", type=int, default=2)
    p.add_argument("--size", default="640x360")
    p.add_argument("--people-per-frame", type=float, default=10.0)
    p.add_argument("--identities", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--far", type=float, default=1e-2, help="FAR of the calibrated appearance threshold")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-accuracy", action="store_true", help="the speed part only")
    p.add_argument("--skip-speed", action="store_true", help="the accuracy part only")
    args = p.parse_args(argv)
    if args.weights and len(args.weights) > 1 and args.config_file:
        p.error("--config-file names the config of one --weights file; give one, or checkpoints that store theirs")
    torch.set_num_threads(args.threads)
    from reid.tracking.tracker_runs import sequence_detections
    from reid.tracking.sequences import find_sequences
    from reid.tracking.tracker_env import tracker_python

    start, load_before = time.perf_counter(), load_average()
    sequences = find_sequences(sequences_for(args))
    boxes = [sequence_detections(s, "det") for s in sequences]
    frames = int(sum(s.length for s in sequences))
    python = tracker_python(args.tracker_python, log=print)
    os.makedirs(args.output, exist_ok=True)
    found: Dict[str, Any] = {}
    if not args.skip_accuracy:
        found = accuracy(args, sequences, boxes, load_models(args, args.output), python, args.output)
    fast = None if args.skip_speed else speed(args, sequences, boxes, python, args.output)
    seconds = time.perf_counter() - start
    record = {"machine": machine_line(args.threads), "load_average_before": load_before,
              "load_average_after": load_average(), "seconds": seconds, "frames": frames,
              "detections": int(sum(len(b) for b in boxes)), "settings": vars(args), "accuracy": found, "speed": fast}
    with open(os.path.join(args.output, "bench_tracking.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, default=str)
    print(f"\n# {record['machine']}; load average before {load_before}, after {record['load_average_after']}; "
          f"{seconds / 60:.1f} min")
    print(f"# {len(sequences)} sequences, {frames} frames, {record['detections']} detections "
          f"({record['detections'] / frames:.1f} a frame)\n")
    if found:
        print(accuracy_table(found) + "\n")
    print(speed_table(found, fast, frames))
    return 0


if __name__ == "__main__":
    sys.exit(main())
