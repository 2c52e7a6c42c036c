#!/usr/bin/env python
"""CPU feature extraction: images/s at batch 32 and latency at batch 1, per inference backend,
against torchreid 0.2.5's ``FeatureExtractor`` on the same model, weights and images.

Models: osnet_x0_25 and osnet_x1_0 in torchreid's layout (``configs/Market1501/<name>_torchreid.yml``;
torchreid's ``FeatureExtractor`` gets the same weights, saved in torchreid's format), and the
BoT ResNet50 (``configs/Market1501/bot_resnet50.yml``: last stride 1, BNNeck); torchreid has no
BoT model, so its column for that row is torchreid's own ``resnet50`` (last stride 2: a quarter
of the conv5 work), marked as such. Weights are seeded (speed does not depend on them).

Each side gets the same RGB uint8 crops of 256x128 (numpy arrays, as a tracker hands them
over) and does its own preprocessing: this toolkit's ``Predictor.extract_arrays`` (resize,
uint8 pixels into the model, normalisation inside), torchreid's ``FeatureExtractor.__call__``
(PIL, ToTensor, Normalize per image). Throughput: all images in calls of 32; latency: one image
per call (median). Every cell is measured ``--repeats`` times, interleaved with the others, and
the best is kept, so that load from other processes on a shared machine costs as little as
possible; the table reports ratios to torchreid measured in the same run. The non-PyTorch
backends' features are compared with PyTorch fp32 (max abs difference).

    python benchmarks/bench_extract.py --torchreid-python /path/to/torchreid-env/bin/python --threads 2

With ``--precisions fp32 fp16 int8`` it measures the precisions instead (docs/benchmarks.md, "Precision"):
each model exported by ``tools/export.py``'s code at each precision (int8 calibrated on 256 of the
crops), run by each runtime (PyTorch runs fp32 only), with images/s at batch 32, latency at batch 1,
the ratio to fp32 ONNX Runtime and the features' cosine to PyTorch fp32; ``--trained NAME=RUN``
adds the R-1/mAP of a trained run's model at each precision on its own test set (the accuracy check
of ``tools/export.py --check-on``; any labelled set works the same way, see docs/inference.md):

    python benchmarks/bench_extract.py --precisions fp32 fp16 int8 --threads 2 \
        --trained osnet_x0_25=output/demo_osnet --trained resnet18=output/demo
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = (256, 128)
MODELS = {  # name -> (our config, torchreid's model name)
    "osnet_x0_25": ("configs/Market1501/osnet_x0_25_torchreid.yml", "osnet_x0_25"),
    "osnet_x1_0": ("configs/Market1501/osnet_x1_0_torchreid.yml", "osnet_x1_0"),
    "bot_resnet50": ("configs/Market1501/bot_resnet50.yml", "resnet50"),
    "vit_small": ("configs/Market1501/vit_small_transreid.yml", None),  # precision table only
}


def crops(num: int, seed: int = 0) -> List[np.ndarray]:
    """Smooth random RGB uint8 crops of SIZE."""
    rng = np.random.default_rng(seed)
    import cv2

    coarse = rng.integers(0, 256, (num, SIZE[0] // 16, SIZE[1] // 16, 3)).astype(np.uint8)
    return [cv2.resize(c, (SIZE[1], SIZE[0]), interpolation=cv2.INTER_LINEAR) for c in coarse]


def throughput(run: Callable[[List[np.ndarray]], object], images: List[np.ndarray], batch: int = 32) -> float:
    start = time.perf_counter()
    for i in range(0, len(images), batch):
        run(images[i:i + batch])
    return len(images) / (time.perf_counter() - start)


def latency_ms(run: Callable[[List[np.ndarray]], object], images: List[np.ndarray], calls: int) -> float:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        run([images[i % len(images)]])
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


# ------------------------------------------------------------------ torchreid side (its own env)
def run_torchreid(args: argparse.Namespace) -> None:
    from torchreid.reid.utils import FeatureExtractor

    torch.set_num_threads(args.threads)
    images = list(np.load(args.images))
    out = {}
    for name, weights in json.loads(args.jobs).items():
        extractor = FeatureExtractor(model_name=MODELS[name][1], model_path=weights, image_size=SIZE, device="cpu",
                                     verbose=False)
        run = lambda batch: extractor(list(batch))  # noqa: E731  numpy arrays, as a tracker passes them
        run(images[:32])
        out[name] = {"ips": max(throughput(run, images) for _ in range(args.repeats)),
                     "ms": min(latency_ms(run, images, args.calls) for _ in range(args.repeats)),
                     "model": MODELS[name][1]}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)


# ------------------------------------------------------------------ our side
def _torchreid_file(model: torch.nn.Module, path: str) -> str:
    """Our torchreid-layout model's weights under torchreid's names (what its FeatureExtractor loads)."""
    names = {"backbone.": "", "embedding.": "fc.", "head.": "classifier."}
    state = {}
    for key, value in model.state_dict().items():
        prefix = next((p for p in names if key.startswith(p)), None)
        if prefix is not None:  # a BNNeck has no place in torchreid's models
            state[names[prefix] + key[len(prefix):]] = value
    torch.save(state, path)
    return path


def our_predictors(name: str, threads: int, backends: Sequence[str]):
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.inference import Predictor
    from reid.modeling import build_model

    cfg = load_config(os.path.join(ROOT, MODELS[name][0]), ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.DEVICE", "cpu"])
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    found = {}
    for backend in backends:
        found[backend] = {b: Predictor(model, cfg, batch_size=b, backend=backend) for b in (32, 1)}
    return model, found


def _precision_files(name: str, model: torch.nn.Module, images: List[np.ndarray], precisions: Sequence[str],
                     folder: str) -> Dict[str, str]:
    """The model's ONNX file at each precision, written as tools/export.py writes them."""
    from reid.export.writer import export_onnx
    from reid.export.precision import convert_fp16, quantize_int8
    from reid.export.precision_export import set_metadata

    files = {"fp32": export_onnx(model, os.path.join(folder, f"{name}_fp32.onnx"), SIZE)}
    if "fp16" in precisions:
        files["fp16"] = os.path.join(folder, f"{name}_fp16.onnx")
        convert_fp16(files["fp32"], files["fp16"])
        set_metadata(files["fp16"], files["fp16"], {"precision": "fp16"}, base=files["fp32"])
    if "int8" in precisions:
        pixels = np.stack(images[:256]).transpose(0, 3, 1, 2).astype(np.float32)
        for quantizer in _quantizers():
            key = "int8" if quantizer == "onnxruntime" else f"int8 ({quantizer})"
            files[key] = os.path.join(folder, f"{name}_int8_{quantizer}.onnx")
            quantize_int8(files["fp32"], files[key], pixels, quantizer=quantizer,
                          log=lambda line: print(f"  {name} {key}: {line}", flush=True))
            set_metadata(files[key], files[key], {"precision": "int8"}, base=files["fp32"])
    return files


def _quantizers() -> List[str]:
    """ONNX Runtime's quantizer, and NNCF where installed."""
    try:
        import nncf  # noqa: F401
    except ImportError:
        return ["onnxruntime"]
    return ["onnxruntime", "nncf"]


def precision_table(args: argparse.Namespace, images: List[np.ndarray], runtimes: Sequence[str]) -> Dict[str, object]:
    """images/s, latency and cosine to PyTorch fp32 per model x precision x runtime."""
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.inference import Predictor
    from reid.modeling import build_model

    folder = tempfile.mkdtemp(prefix="bench_precision_")
    rows: Dict[str, object] = {}
    for name in args.models:
        # A tracker gives crops only: the ViT without camera ids (SIE), as --for boxmot exports it.
        extra = ["MODEL.TRANSREID.SIE_CAMERA", False] if name.startswith("vit") else []
        cfg = load_config(os.path.join(ROOT, MODELS[name][0]), ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.DEVICE", "cpu",
                                                                "INPUT.SIZE_TEST", list(SIZE), *extra])
        torch.manual_seed(0)
        model = build_model(cfg).eval()
        files = _precision_files(name, model, images, args.precisions, folder)
        cells = {("fp32", "torch"): {b: Predictor(model, cfg, batch_size=b) for b in (32, 1)}}
        for precision, path in files.items():
            for runtime in runtimes:
                cells[(precision, runtime)] = {b: Predictor(model, cfg, batch_size=b, backend=runtime, exported=path)
                                               for b in (32, 1)}
        reference = cells[("fp32", "torch")][32].extract_arrays(images[:64])
        # The model alone: preprocessed float32 batches of 32 straight into the runtime (no resize,
        # no stacking), which is what a precision changes.
        batches = [torch.stack([cells[("fp32", "torch")][32].transform(im) for im in images[i:i + 32]]).float()
                   for i in range(0, len(images), 32)]
        result = {}
        for key, pair in cells.items():
            pair[1].extract_arrays(images[:1])
            f = pair[32].extract_arrays(images[:64])
            result[key] = {"cos_min": float((f * reference).sum(1).min()), "ips": 0.0, "ms": float("inf"),
                           "model_ips": 0.0}
        for _ in range(args.repeats):  # interleaved, so that a burst of load hits every cell alike
            for key, pair in cells.items():
                result[key]["ips"] = max(result[key]["ips"], throughput(pair[32].extract_arrays, images))
                result[key]["ms"] = min(result[key]["ms"], latency_ms(pair[1].extract_arrays, images, args.calls))
                result[key]["model_ips"] = max(result[key]["model_ips"], _model_throughput(pair[32], batches))
        base = result[("fp32", "onnxruntime")]["ips"]
        model_base = result[("fp32", "onnxruntime")]["model_ips"]
        rows[name] = {f"{p}/{r}": {**cell, "x_fp32_onnxruntime": cell["ips"] / base,
                                   "model_x_fp32_onnxruntime": cell["model_ips"] / model_base}
                      for (p, r), cell in result.items()}
        for key, cell in rows[name].items():
            print(f"{name} {key}: {cell['ips']:.1f} images/s (x{cell['x_fp32_onnxruntime']:.2f} fp32 onnxruntime), "
                  f"model alone {cell['model_ips']:.1f} (x{cell['model_x_fp32_onnxruntime']:.2f}), {cell['ms']:.2f} ms, "
                  f"cosine min {cell['cos_min']:.4f}", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def _model_throughput(predictor, batches: List[torch.Tensor]) -> float:
    """images/s of the predictor's model or runtime on preprocessed float32 batches."""
    run = predictor._runtime
    if run is None:
        def run(x):
            with torch.inference_mode():
                return predictor.model(x)
    start = time.perf_counter()
    for x in batches:
        run(x)
    return sum(len(x) for x in batches) / (time.perf_counter() - start)


def accuracy_rows(trained: Sequence[str], precisions: Sequence[str]) -> Dict[str, object]:
    """R-1/mAP of each trained run's model at each precision on its test set (tools/export.py --check-on)."""
    sys.path.insert(0, ROOT)
    from reid.export.pipeline import run_export
    from reid.export.request import ExportRequest
    from reid.inference import load_predictor

    out: Dict[str, object] = {}
    folder = tempfile.mkdtemp(prefix="bench_accuracy_")
    for pair in trained:
        name, run = pair.split("=", 1)
        predictor = load_predictor(run=run, device="cpu")
        test = list(predictor.cfg.DATASETS.TESTS)[0]
        variants = [(p, q) for p in precisions for q in (_quantizers() if p == "int8" else ["onnxruntime"])]
        for precision, quantizer in variants:
            label = precision if quantizer == "onnxruntime" else f"{precision} ({quantizer})"
            path = os.path.join(folder, f"{name}_{precision}_{quantizer}.onnx")
            request = ExportRequest([path], precision=precision, calibration=list(predictor.cfg.DATASETS.NAMES)[:1],
                                    check_on=[test], max_map_drop=100.0, quantizer=quantizer)
            run_export(request, predictor.model, predictor.cfg, log=lambda line: None)
            with open(path + ".report.json", encoding="utf-8") as f:
                acc = json.load(f)["accuracy"]
            out[f"{name}/{label}"] = {"run": run, "dataset": test, "size": list(predictor.input_size), **acc}
            print(f"{name} {label}: fp32 mAP {acc['pytorch_fp32']['mAP']:.2f} -> {acc['exported']['mAP']:.2f} "
                  f"(drop {acc['map_drop']:+.2f}), R-1 {acc['pytorch_fp32']['R-1']:.2f} -> {acc['exported']['R-1']:.2f}",
                  flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def main(argv: Sequence[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torchreid-python", help="python of an environment with torchreid 0.2.5 (omit to skip it)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--images", type=int, default=256, help="crops per throughput pass")
    p.add_argument("--calls", type=int, default=40, help="single-image calls per latency pass")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", nargs="+", default=None, choices=list(MODELS),
                   help="default: all but vit_small (torchreid has none); with --precisions all")
    p.add_argument("--precisions", nargs="+", choices=("fp32", "fp16", "int8"), default=None,
                   help="measure these precisions of our exports instead of the comparison with torchreid")
    p.add_argument("--accuracy-only", action="store_true", help="with --precisions and --trained: no speed table")
    p.add_argument("--trained", action="append", default=[], metavar="NAME=RUN",
                   help="with --precisions: R-1/mAP of this training run's model at each precision on its test set")
    p.add_argument("--out", default="", help="JSON file for the results")
    p.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--jobs", help=argparse.SUPPRESS)
    p.add_argument("--images-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reference:
        args.images = args.images_file
        run_torchreid(args)
        return 0
    torch.set_num_threads(args.threads)
    images = crops(args.images)
    backends = ["torch", "onnxruntime"]
    try:
        import openvino  # noqa: F401
        backends.append("openvino")
    except ImportError:
        print("openvino is not installed: its column is left out (pip install openvino)", flush=True)
    if args.precisions:
        args.models = args.models or list(MODELS)
        rows = {} if args.accuracy_only else precision_table(args, images, backends[1:])
        accuracy = accuracy_rows(args.trained, args.precisions)
        print(f"\n{platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}")
        print("| model | precision | runtime | model alone: images/s (batch 32) | x fp32 ONNX Runtime | "
              "end to end: images/s | x fp32 ONNX Runtime | latency batch 1 (ms) | min cosine to PyTorch fp32 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, cells in rows.items():
            for key, c in cells.items():
                precision, runtime = key.split("/")
                print(f"| {name} | {precision} | {runtime} | {c['model_ips']:.1f} | {c['model_x_fp32_onnxruntime']:.2f} | "
                      f"{c['ips']:.1f} | {c['x_fp32_onnxruntime']:.2f} | {c['ms']:.2f} | {c['cos_min']:.4f} |")
        if accuracy:
            print("\n| model (trained run) | precision | test set | R-1 fp32 -> file | mAP fp32 -> file | mAP drop |")
            print("|---|---|---|---|---|---|")
            for key, a in accuracy.items():
                name, precision = key.split("/")
                print(f"| {name} | {precision} | {a['dataset']} | {a['pytorch_fp32']['R-1']:.2f} -> "
                      f"{a['exported']['R-1']:.2f} | {a['pytorch_fp32']['mAP']:.2f} -> {a['exported']['mAP']:.2f} | "
                      f"{a['map_drop']:+.2f} |")
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump({"threads": args.threads, "speed": rows, "accuracy": accuracy}, f, indent=2)
        return 0
    args.models = args.models or [m for m in MODELS if MODELS[m][1]]
    work = tempfile.mkdtemp(prefix="bench_extract_")
    results: Dict[str, Dict[str, object]] = {}
    jobs = {}
    for name in args.models:
        model, predictors = our_predictors(name, args.threads, backends)
        reference = predictors["torch"][32].extract_arrays(images[:64])
        row: Dict[str, object] = {"feature_dim": int(model.feature_dim)}
        for backend, pair in predictors.items():
            pair[32].extract_arrays(images[:32])  # warm-up
            pair[1].extract_arrays(images[:1])
            row[f"{backend}_max_abs_diff"] = float(np.abs(pair[32].extract_arrays(images[:64]) - reference).max())
        best = {b: {"ips": 0.0, "ms": float("inf")} for b in predictors}
        for _ in range(args.repeats):  # interleaved, so that a burst of load hits every backend alike
            for backend, pair in predictors.items():
                best[backend]["ips"] = max(best[backend]["ips"], throughput(pair[32].extract_arrays, images))
                best[backend]["ms"] = min(best[backend]["ms"], latency_ms(pair[1].extract_arrays, images, args.calls))
        row.update({f"{b}_{k}": v for b, cell in best.items() for k, v in cell.items()})
        results[name] = row
        print(name, json.dumps(row), flush=True)
        jobs[name] = _torchreid_file(model, os.path.join(work, f"{name}.pth"))
    if args.torchreid_python:
        np.save(os.path.join(work, "images.npy"), np.stack(images))
        out = os.path.join(work, "torchreid.json")
        subprocess.run([args.torchreid_python, os.path.abspath(__file__), "--reference", "--jobs", json.dumps(jobs),
                        "--images-file", os.path.join(work, "images.npy"), "--out", out, "--threads",
                        str(args.threads), "--repeats", str(args.repeats), "--calls", str(args.calls)], check=True,
                       env=dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1"))
        with open(out, encoding="utf-8") as f:
            for name, cell in json.load(f).items():
                results[name].update({f"torchreid_{k}": v for k, v in cell.items()})
    print(f"\n{platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}")
    print("| model | backend | images/s (batch 32) | x torchreid | latency batch 1 (ms) | torchreid / ours | "
          "max abs diff to PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name, row in results.items():
        ref_ips, ref_ms = row.get("torchreid_ips"), row.get("torchreid_ms")
        for backend in backends + (["torchreid"] if ref_ips else []):
            ips, ms = row[f"{backend}_ips"], row[f"{backend}_ms"]
            ratio = f"{ips / ref_ips:.2f}" if ref_ips else "-"
            lat = f"{ref_ms / ms:.2f}" if ref_ms else "-"
            diff = f"{row[f'{backend}_max_abs_diff']:.1e}" if backend != "torchreid" else "-"
            label = backend if backend != "torchreid" else f"torchreid FeatureExtractor ({row['torchreid_model']})"
            print(f"| {name} | {label} | {ips:.1f} | {ratio} | {ms:.2f} | {lat} | {diff} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"threads": args.threads, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
