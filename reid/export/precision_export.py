"""Write an ONNX export at a precision (fp32, fp16, int8), measure what it costs, and keep or refuse it.

The order is that of ``tools/export.py --precision``: the fp32 ONNX file is written into a temporary
folder, converted (:mod:`reid.export.precision`), checked (batch parity at
1/7/32 in every runtime installed, the features' cosine to PyTorch fp32 on real crops, and with a
labelled set R-1/mAP of both: :mod:`reid.export.accuracy`), and only then written to the output
(atomically) with what was measured in its metadata. A file whose mAP drops by more than the allowed points is
not written (unless forced): nothing half-checked reaches the output path.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from reid.modeling import camera_count
from reid.utils.file_io import atomic_write, atomic_write_text

from .accuracy import AccuracyCheck, check_map_drop, compare_accuracy
from .exported import METADATA_KEY
from .precision import BATCH_TOLERANCE, PARITY_BATCHES, batch_parity, convert_fp16, quantize_int8
from .request import ExportRequest
from .runtimes import installed_runtimes, onnx_runner
from .writer import _wrap

Log = Callable[[str], None]
Transform = Callable[[torch.Tensor], torch.Tensor]


MIN_COSINE_FLOOR = 0.9  # mean cosine to fp32 below which a file is broken, whatever the labelled check says


class PrecisionCheckError(RuntimeError):
    """An export failed a check (batch parity, the cosine floor, or the mAP gate)."""


def torch_reference(model: nn.Module) -> Callable[..., np.ndarray]:
    """PyTorch fp32 features of raw pixels (the export's contract: L2-normalised, CPU, eval mode)."""
    wrapped = _wrap(model)

    def run(x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> np.ndarray:
        with torch.no_grad():
            args = (torch.as_tensor(x).float(),) + ((camids,) if camids is not None else ())
            return wrapped(*args).numpy()

    return run


@dataclass
class PrecisionReport:
    """What was measured for one exported file: written into its metadata and ``<file>.report.json``."""

    path: str
    precision: str
    conversion: Dict[str, Any] = field(default_factory=dict)
    batch_parity: Dict[str, Dict[str, float]] = field(default_factory=dict)
    cosine_to_fp32: Dict[str, Any] = field(default_factory=dict)
    accuracy: Optional[AccuracyCheck] = None
    forced: List[str] = field(default_factory=list)  # checks it failed and was written past (--force)

    def record(self) -> Dict[str, Any]:
        accuracy = None if self.accuracy is None else self.accuracy.record()
        out = {"precision": self.precision, "conversion": self.conversion, "batch_parity": self.batch_parity,
               "cosine_to_fp32": self.cosine_to_fp32, "accuracy": accuracy, "forced": self.forced}
        return {key: value for key, value in out.items() if value or key == "batch_parity"}  # empty parts left out

    def fail(self, line: str, force: bool, log: Log) -> None:
        """A failed gate: PrecisionCheckError unless `force`; then a warning, recorded in the file."""
        if not force:
            raise PrecisionCheckError(line)
        self.forced.append(line)
        log(f"warning: {line}")


def _camids(model: nn.Module, n: int, seed: int = 0) -> Optional[torch.Tensor]:
    cameras = camera_count(model)
    return torch.randint(0, cameras, (n,), generator=torch.Generator().manual_seed(seed)) if cameras else None


def _check_parity(path: str, precision: str, pixels: np.ndarray, to_input: Optional[Transform],
                  model: nn.Module, log: Log) -> Dict[str, Dict[str, float]]:
    tol = BATCH_TOLERANCE[precision]
    results: Dict[str, Dict[str, float]] = {}
    camids = _camids(model, max(PARITY_BATCHES))
    for runtime in installed_runtimes():
        diffs = batch_parity(onnx_runner(path, runtime, to_input), pixels, camids=camids)
        results[runtime] = {str(b): d for b, d in diffs.items()}
        line = ", ".join(f"batch {b} {d:.1e}" for b, d in diffs.items())
        ok = all(d <= tol for d in diffs.values())
        log(f"batch parity ({runtime}): features at {line} against one image at a time -> "
            f"{'OK' if ok else 'FAILED'} (tolerance {tol:g} for {precision})")
        if not ok:
            raise PrecisionCheckError(f"{path}: {runtime} gives other features at batch sizes "
                                      f"{', '.join(str(b) for b, d in diffs.items() if d > tol)} than one image at a time "
                                      f"({max(diffs.values()):.2e} > {tol:g}); report the model and the versions.")
    return results


MAX_CHECK_IMAGES = 256  # the cosine and parity checks run on at most this many of the crops


def _parity_pixels(pixels: Optional[np.ndarray], input_size: Sequence[int], seed: int = 0) -> np.ndarray:
    """The images of the checks: the crops given (at most 256), topped up to 32 with seeded smooth noise
    (distinct images: a batch axis that mixes images shows only between different ones)."""
    n = max(PARITY_BATCHES)
    given = np.asarray(pixels[:MAX_CHECK_IMAGES], dtype=np.float32) if pixels is not None and len(pixels) else None
    missing = n - (len(given) if given is not None else 0)
    if missing <= 0:
        return given
    h, w = int(input_size[0]), int(input_size[1])
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.randint(0, 256, (missing, 3, max(1, h // 8), max(1, w // 8)), generator=gen).float()
    noise = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False).numpy()
    return noise if given is None else np.concatenate([given, noise])


def _record_of(model) -> Dict[str, Any]:
    props = {p.key: p.value for p in model.metadata_props}
    return json.loads(props[METADATA_KEY]) if METADATA_KEY in props else {}


def _part(camids: Optional[torch.Tensor], i: int) -> Optional[torch.Tensor]:
    return None if camids is None else camids[i:i + 32]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def set_metadata(src: str, dst: str, updates: Dict[str, Any], base: Optional[str] = None) -> None:
    """Copy the ONNX file `src` to `dst` (atomically) with `updates` merged into its ``circle_reid``
    record; with `base`, the record starts from that file's (a converter may drop the metadata)."""
    import onnx

    model = onnx.load(src)
    props = {p.key: p for p in model.metadata_props}
    record = _record_of(onnx.load(base)) if base else _record_of(model)
    record.update(updates)
    if METADATA_KEY in props:
        props[METADATA_KEY].value = json.dumps(record)
    else:
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(record)
    data = model.SerializeToString()
    atomic_write(dst, lambda f: f.write(data))


def export_at_precision(model: nn.Module, path: str, input_size: Sequence[int], request: ExportRequest, *,
                        write_fp32: Callable[[str], None], pixels: Optional[np.ndarray] = None,
                        calibration: str = "", min_cosine: float = 0.99, to_input: Optional[Transform] = None,
                        check_batches: Optional[Callable[[], Iterable[Dict[str, Any]]]] = None, check_query: int = 0,
                        check_name: str = "", log: Log = print) -> PrecisionReport:
    """Write `model` to the ONNX file `path` at the `request`'s precision with every check; returns what
    was measured. The request was checked when it was made (and against `model`: ``check_model``).

    `write_fp32(tmp_path)` writes the fp32 ONNX file (the plain or the tracker export, with its
    metadata). `pixels` (uint8 ``[N, 3, H, W]`` raw pixels, the model's test transform; described by
    `calibration`) calibrate int8 (the request's quantizer and method) and are the crops of the
    parity and cosine checks (topped up with seeded smooth noise to 32 images). `to_input` maps raw
    pixels to the file's input convention. With `check_batches` (a factory of the labelled test
    loader's batches; `check_query` query images first) R-1 and mAP of the file and of PyTorch fp32
    are compared, and a drop of more than the request's ``max_map_drop`` points raises
    PrecisionCheckError (the file is not written) unless it says ``force``.
    """
    precision, force = request.precision, request.force
    # The system temporary folder: a job killed mid-export leaves nothing beside the output (which is
    # written atomically, from there, once every check has passed).
    folder = tempfile.mkdtemp(prefix="reid_export_")
    report = PrecisionReport(path, precision)
    try:
        fp32 = os.path.join(folder, "fp32.onnx")
        write_fp32(fp32)
        converted = os.path.join(folder, f"{precision}.onnx")
        if precision == "fp32":
            converted = fp32
        elif precision == "fp16":
            kept = convert_fp16(fp32, converted)
            report.conversion = {"converter": "onnxruntime.transformers.float16", "io": "float32",
                                 "kept_float": kept}
            log(f"fp16: {len(kept)} nodes of the L2 normalisation kept float32 (the sum of squares overflows float16)")
        else:
            calib = pixels.astype(np.float32)
            if to_input is not None:
                calib = to_input(torch.from_numpy(calib)).numpy()
            result = quantize_int8(fp32, converted, calib, method=request.calibration_method, min_cosine=min_cosine,
                                   log=log, quantizer=request.quantizer)
            report.conversion = {**result.record(), "calibration_source": calibration}
            kept = ", ".join(f"{k['node']} ({k['op']}, input SQNR {k['input_sqnr_db']:.1f} dB)" for k in result.kept_float)
            log(f"int8: {result.quantized_nodes} nodes quantized; kept in float: {kept or 'none'}")
        cameras = bool(camera_count(model))
        checks = _parity_pixels(pixels, input_size)
        report.batch_parity = _check_parity(converted, precision, checks, to_input, model, log)
        camids = _camids(model, len(checks))
        reference, run_file = torch_reference(model), onnx_runner(converted, "onnxruntime", to_input)
        cos = np.concatenate([_cosine(reference(torch.from_numpy(checks[i:i + 32]), _part(camids, i)),
                                      run_file(checks[i:i + 32], _part(camids, i)))
                              for i in range(0, len(checks), 32)])
        report.cosine_to_fp32 = {"mean": round(float(cos.mean()), 6), "min": round(float(cos.min()), 6),
                                 "images": len(checks), "on": "calibration crops" if pixels is not None else "seeded noise"}
        log(f"features against PyTorch fp32 on {len(checks)} {report.cosine_to_fp32['on']}: cosine mean "
            f"{cos.mean():.5f}, min {cos.min():.5f}")
        if cos.mean() < MIN_COSINE_FLOOR:
            # No labelled set may be given: features this far from fp32's are refused on their own.
            report.fail(f"{path}: its features are at cosine {cos.mean():.3f} of PyTorch fp32's on average (below "
                        f"{MIN_COSINE_FLOOR}); {'written anyway (--force)' if force else 'not written'}. Calibrate "
                        "on real crops of your cameras (--calibration), or use fp16.", force, log)
        if check_batches is not None:
            report.accuracy = compare_accuracy(torch_reference(model), run_file, check_batches(), check_query,
                                               dataset=check_name, uses_camids=cameras)
            log(f"accuracy: {report.accuracy}")
            refused = check_map_drop(report.accuracy, request.max_map_drop, path, force)
            if refused:
                report.fail(refused, force, log)
        set_metadata(converted, path, report.record(), base=fp32)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    atomic_write_text(report_path(path), json.dumps(report.record(), indent=2))
    return report


def report_path(path: str) -> str:
    """Where the report of the exported file `path` goes: ``<path>.report.json``."""
    return f"{path}.report.json"


__all__ = ["PrecisionCheckError", "PrecisionReport", "export_at_precision", "report_path", "set_metadata",
           "torch_reference"]
