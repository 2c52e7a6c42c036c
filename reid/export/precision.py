"""fp16 and int8 versions of an exported ONNX model (``tools/export.py --precision``).

Both start from the fp32 file :func:`reid.export.writer.export_onnx` writes and keep its
contract: float32 pixels in, float32 L2-normalised features out, the batch axis free. Only the
arithmetic inside changes.

* **fp16**: ONNX Runtime's float16 converter (``onnxruntime.transformers.float16``, shipped with
  onnxruntime) with the inputs and outputs kept float32. The L2 normalisation at the end stays
  float32: the sum of squares of a 2048-d feature overflows float16's 65,504 long before the
  feature itself does. fp16 is for GPUs (TensorRT, CUDA); on a CPU the runtimes compute it in fp32
  with casts around (docs/inference.md measures it).
* **int8**: static post-training quantization with ONNX Runtime's quantizer (QDQ format:
  QuantizeLinear/DequantizeLinear pairs around Conv, Gemm and MatMul, which ONNX Runtime,
  OpenVINO and TensorRT all read), weights per output channel (symmetric int8), activations
  per tensor (uint8), their ranges calibrated on real crops (:class:`CropReader`). The other
  operators (activations, pooling, additions, the normalisation) stay float. Layers whose
  quantization costs too much stay float too: when the features of the quantized model fall
  below `min_cosine` of the fp32 model's on held-out calibration crops, the inputs of the
  quantized operators are ranked by their signal-to-quantization-noise ratio (SQNR, dB; ONNX
  Runtime's ``qdq_loss_debug``) and the worst ones are kept float until the features agree
  (:func:`quantize_int8` returns which, and the export records them).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from reid.utils.file_io import atomic_write

from .options import MIN_CALIBRATION_IMAGES

logger = logging.getLogger(__name__)

QUANTIZED_OPS = ("Conv", "Gemm", "MatMul")  # the compute; everything else stays float
NNCF_HINT = "pip install nncf openvino (or pip install 'circle-reid[openvino]')"
DEFAULT_MIN_COSINE = 0.99
MIN_GAIN = 0.001  # how much closer (mean cosine) a layer kept float must bring the features
#: How far features of a batch may differ from the same images one at a time, per precision
#: (unit vectors; fp32 runtimes agree to ~1e-6, reduced precision keeps its rounding per image).
BATCH_TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "int8": 2e-3}
PARITY_BATCHES = (1, 7, 32)


def _onnx():
    import onnx

    return onnx


def _nncf():
    try:
        import nncf
    except ImportError as e:
        raise ImportError(f"--quantizer nncf needs NNCF: {NNCF_HINT}.") from e
    return nncf


def _normalisation_tail(model) -> List[str]:
    """Names of the nodes that compute the L2 norm the output is divided by: every ancestor of the
    final Div's denominator that the numerator (the unnormalised feature) does not depend on."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    last = producer.get(graph.output[0].name)
    if last is None or last.op_type != "Div" or len(last.input) != 2:
        return []

    def ancestors(tensor: str) -> Dict[str, Any]:
        seen: Dict[str, Any] = {}
        stack = [tensor]
        while stack:
            node = producer.get(stack.pop())
            if node is not None and node.name not in seen:
                seen[node.name] = node
                stack.extend(node.input)
        return seen

    feature = ancestors(last.input[0])
    return [last.name] + [name for name in ancestors(last.input[1]) if name not in feature]


def _name_nodes(model) -> None:
    """Give every unnamed node a unique name (the converters and the quantizer select nodes by name)."""
    used = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)


def _drop_repeated_nodes(model) -> None:
    """Remove exact repeats of a node (same name, inputs, outputs, attributes). The float16 converter
    inserts one Cast per float32 consumer of a float16 tensor, each with the same name and output,
    when one tensor feeds two kept-float32 nodes (the feature feeds both the norm and the division);
    a repeat computes what the first does, and ONNX refuses two nodes of one name."""
    graph = model.graph
    keep = list({node.SerializeToString(): node for node in graph.node}.values())  # a repeat serialises alike
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)
    infos = {}
    for info in graph.value_info:
        infos.setdefault(info.name, info)  # the first of each name
    del graph.value_info[:]
    graph.value_info.extend(infos.values())


def convert_fp16(src: str, dst: str) -> List[str]:
    """Write the fp16 version of the fp32 ONNX file `src` to `dst` (atomically); returns the names
    of the nodes kept float32 (the L2 normalisation), which the caller records."""
    onnx = _onnx()
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.load(src)
    _name_nodes(model)
    tail = _normalisation_tail(model)
    half = convert_float_to_float16(model, keep_io_types=True, node_block_list=tail,
                                    op_block_list=list(DEFAULT_OP_BLOCK_LIST))
    _drop_repeated_nodes(half)
    data = half.SerializeToString()
    atomic_write(dst, lambda f: f.write(data))
    return tail


# ------------------------------------------------------------------ int8
class CropReader:
    """ONNX Runtime's calibration reader over pixel batches: ``get_next()`` returns the feeds of the
    next batch (``{input name: float32 [b, 3, H, W]}``), None at the end; ``rewind()`` restarts."""

    def __init__(self, input_name: str, pixels: np.ndarray, batch_size: int = 16) -> None:
        self.input_name, self.pixels, self.batch_size = input_name, pixels, int(batch_size)
        self._it: Iterator[Dict[str, np.ndarray]] = iter(())
        self.rewind()

    def rewind(self) -> None:
        # A generator: one batch is converted at a time, whatever the number of crops.
        self._it = ({self.input_name: np.ascontiguousarray(self.pixels[i:i + self.batch_size], dtype=np.float32)}
                    for i in range(0, len(self.pixels), self.batch_size))

    def get_next(self) -> Optional[Dict[str, np.ndarray]]:
        return next(self._it, None)

    def __len__(self) -> int:
        return -(-len(self.pixels) // self.batch_size)

    def __iter__(self):
        self.rewind()
        return self

    def __next__(self) -> Dict[str, np.ndarray]:
        return next(self._it)


def _reader_class():
    """:class:`CropReader` as a subclass of ONNX Runtime's ``CalibrationDataReader`` (its quantizer
    checks the type); built on first use so that this module imports without onnxruntime."""
    from onnxruntime.quantization import CalibrationDataReader

    return type("OrtCropReader", (CropReader, CalibrationDataReader), {})


@dataclass
class QuantizationResult:
    """What :func:`quantize_int8` did: the settings, the nodes kept float and why, and how close the
    int8 features are to the fp32 ones on the held-out calibration crops."""

    method: str
    calibration_images: int
    held_out_images: int
    quantized_nodes: int
    kept_float: List[Dict[str, Any]] = field(default_factory=list)
    cosine_mean: float = 1.0
    cosine_min: float = 1.0
    min_cosine: float = DEFAULT_MIN_COSINE
    quantizer: str = "onnxruntime"

    def record(self) -> Dict[str, Any]:
        """JSON-able, for the exported file's metadata (its keys are the file format's: "quantised_nodes"
        keeps the spelling files were written with)."""
        return {"format": f"QDQ ({'onnxruntime.quantization' if self.quantizer == 'onnxruntime' else 'nncf'})",
                "quantizer": self.quantizer, "weights": "int8, per output channel, symmetric",
                "activations": "uint8, per tensor",
                "ops": list(QUANTIZED_OPS) if self.quantizer == "onnxruntime" else "NNCF's choice (performance preset)", "calibration_method": self.method,
                "calibration_images": self.calibration_images, "held_out_images": self.held_out_images,
                "quantised_nodes": self.quantized_nodes, "kept_float": self.kept_float,
                "cosine_to_fp32_held_out": {"mean": round(self.cosine_mean, 6), "min": round(self.cosine_min, 6)},
                "min_cosine": self.min_cosine}


def _features(path: str, reader: CropReader) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # the quantized graph's fusion notes are not the user's business
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, feeds)[0] for feeds in reader], axis=0)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two feature sets (the files' features are unit vectors already)."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(axis=1)


def _quantize_nncf(src: str, dst: str, reader: CropReader, exclude: Sequence[str]) -> None:
    """NNCF's post-training quantization of the ONNX file (QDQ pairs where OpenVINO fuses them)."""
    onnx, nncf = _onnx(), _nncf()
    model = onnx.load(src)
    feeds = list(iter(reader))
    transformer = any(node.op_type == "Softmax" for node in model.graph.node)
    options: Dict[str, Any] = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    # The L2 normalisation stays float: quantized, the features are no longer unit vectors.
    options["ignored_scope"] = nncf.IgnoredScope(names=list(exclude) + _normalisation_tail(model), validate=False)
    quiet = logging.getLogger("nncf")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # NNCF logs each step at INFO
    try:
        quantized = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds),
                                  preset=nncf.QuantizationPreset.PERFORMANCE, **options)
    finally:
        quiet.setLevel(level)
    onnx.save(quantized, dst)


def _quantize(src: str, dst: str, reader: CropReader, method: str, exclude: Sequence[str],
              quantizer: str = "onnxruntime") -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if quantizer == "nncf":
        _quantize_nncf(src, dst, reader, exclude)
        return
    methods = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}
    reader.rewind()
    quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=list(QUANTIZED_OPS), nodes_to_exclude=list(exclude),
                    calibrate_method=methods[method],
                    extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})


def _input_sqnr(qdq_path: str, reader: CropReader, nodes: Dict[str, Any]) -> Dict[str, float]:
    """SQNR (dB) of each quantized node's input activation: the float tensor against its
    quantized-dequantized copy inside the int8 model (``qdq_loss_debug``: low = coarse for its range)."""
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        compute_signal_to_quantization_noice_ratio,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    folder = tempfile.mkdtemp(prefix="reid_sqnr_")
    try:
        augmented = os.path.join(folder, "qdq_augmented.onnx")
        modify_model_output_intermediate_tensors(qdq_path, augmented)
        matches = create_activation_matching(collect_activations(augmented, iter(reader)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # A tensor that is zero on every crop (a dead channel group) has no signal to lose: not ranked.
    sqnr = {name: compute_signal_to_quantization_noice_ratio(m["pre_qdq"], m["post_qdq"])
            for name, m in matches.items() if "pre_qdq" in m and "post_qdq" in m
            and any(np.abs(a).max() > 0 for a in m["pre_qdq"])}
    return {name: float(sqnr[node.input[0]]) for name, node in nodes.items() if node.input[0] in sqnr}


def quantize_int8(src: str, dst: str, pixels: np.ndarray, method: str = "minmax",
                  min_cosine: float = DEFAULT_MIN_COSINE, held_out: float = 0.25,
                  log: Callable[[str], None] = logger.info, quantizer: str = "onnxruntime") -> QuantizationResult:
    """Write the int8 (QDQ) version of the fp32 ONNX file `src` to `dst` (atomically).

    `pixels` (``[N, 3, H, W]``, uint8 or float, the file's input convention) are the calibration
    crops: the last `held_out` share checks the result (cosine of the int8 features to the fp32
    ones), the rest calibrates the activation ranges with `method` ("minmax" or "percentile").
    Quantized operators whose input quantizes worst are kept float until the mean cosine is at
    least `min_cosine` (at most half of them; then the file is written as it is and the result
    says how close it came). `quantizer` "onnxruntime" or "nncf" places the QDQ pairs (NNCF chooses
    its own ranges: `method` is ONNX Runtime's).
    """
    onnx = _onnx()
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if quantizer == "nncf":
        _nncf()
    n = len(pixels)
    if n < MIN_CALIBRATION_IMAGES:  # with one crop the check would run on the crop it was calibrated on
        raise ValueError(f"int8 needs at least {MIN_CALIBRATION_IMAGES} calibration crops (one held out checks the "
                         f"int8 features against fp32); got {n}: give more crops.")
    n_check = max(1, int(round(n * held_out)))
    calibration, check = pixels[:n - n_check], pixels[n - n_check:]
    folder = tempfile.mkdtemp(prefix="reid_int8_")
    try:
        # ONNX Runtime's recommended preparation: shapes inferred, the graph optimised (BatchNorm
        # folded into the convolutions), so that the quantizer sees the graph the runtime runs.
        pre = os.path.join(folder, "prepared.onnx")
        named = onnx.load(src)
        _name_nodes(named)
        onnx.save(named, os.path.join(folder, "named.onnx"))
        quant_pre_process(os.path.join(folder, "named.onnx"), pre, skip_symbolic_shape=True)
        prepared = onnx.load(pre)
        input_name = prepared.graph.input[0].name
        targets = {node.name: node for node in prepared.graph.node if node.op_type in QUANTIZED_OPS}
        Reader = _reader_class()
        calib_reader = Reader(input_name, calibration)
        check_reader = Reader(input_name, check)
        reference = _features(pre, check_reader)
        out = os.path.join(folder, "int8.onnx")
        best = os.path.join(folder, "best.onnx")
        excluded: List[str] = []  # kept float in the best file so far
        kept: List[Dict[str, Any]] = []
        sqnr: Optional[Dict[str, float]] = None
        trial: List[str] = []
        score = None
        while True:
            _quantize(pre, out, calib_reader, method, excluded + trial, quantizer)
            cos = _cosines(_features(out, check_reader), reference)
            log(f"int8 with {len(targets) - len(excluded) - len(trial)} of {len(targets)} {'/'.join(QUANTIZED_OPS)} "
                f"nodes quantized: cosine to fp32 on {len(check)} held-out crops mean {cos.mean():.4f}, min {cos.min():.4f}")
            # Layers stay float only where that brings the features closer (by 0.001 at least): a
            # float layer costs speed, which is what int8 is for.
            if score is not None and cos.mean() < score[0] + MIN_GAIN:
                log("keeping those layers in float does not bring the features closer; they are quantized")
                break
            shutil.copyfile(out, best)
            excluded += trial
            kept += [{"node": name, "op": targets[name].op_type, "input_sqnr_db": round(sqnr[name], 2)}
                     for name in trial] if sqnr else []
            score = (float(cos.mean()), float(cos.min()))
            if score[0] >= min_cosine or len(excluded) >= len(targets) // 2:
                break
            if sqnr is None:  # measured once, on ONNX Runtime's fully quantized model (its QDQ names are known)
                proxy = out
                if quantizer != "onnxruntime":
                    proxy = os.path.join(folder, "ort_full.onnx")
                    _quantize(pre, proxy, calib_reader, method, [])
                sqnr = _input_sqnr(proxy, Reader(input_name, calibration[:16]), targets)
            ranked = [name for name in sorted(sqnr, key=sqnr.get) if name not in excluded]
            # 1, 1, 2, 4, ... nodes more each round, never more than half of them in float; none left: done
            trial = ranked[:min(max(1, len(excluded)), len(targets) // 2 - len(excluded))]
            if not trial:
                break
        data = open(best, "rb").read()
        atomic_write(dst, lambda f: f.write(data))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if score[0] < min_cosine:
        log(f"note: the int8 features reach cosine {score[0]:.4f} of fp32 on held-out crops (target {min_cosine}); "
            "the accuracy check (--check-on) says what that costs, and real crops of the cameras calibrate best")
    return QuantizationResult(method if quantizer == "onnxruntime" else "nncf", len(calibration), n_check,
                              len(targets) - len(excluded), kept, score[0], score[1], float(min_cosine), quantizer)


def batch_parity(run: Callable[..., np.ndarray], pixels: np.ndarray, batches: Sequence[int] = PARITY_BATCHES,
                 camids: Optional[Any] = None) -> Dict[int, float]:
    """Largest absolute difference of the features of `pixels` computed in batches of each size
    against the same images one at a time (the bug users hit: a file whose batch axis is wrong).

    `pixels` must hold at least ``max(batches)`` images; `run` maps ``[B, 3, H, W]`` float32 to ``[B, D]``,
    and with `camids` (one camera id per image, sliced with the images) ``run(images, camids)``.
    """
    n = max(batches)
    if len(pixels) < n:
        raise ValueError(f"batch parity needs {n} images, got {len(pixels)}.")
    x = np.ascontiguousarray(pixels[:n], dtype=np.float32)

    def features(size: int) -> np.ndarray:
        parts = [run(x[i:i + size]) if camids is None else run(x[i:i + size], camids[i:i + size])
                 for i in range(0, n, size)]
        return np.concatenate(parts, axis=0)

    single = features(1)
    return {int(b): float(np.abs(features(b) - single).max()) for b in batches if b != 1}


__all__ = [
    "BATCH_TOLERANCE",
    "DEFAULT_MIN_COSINE",
    "PARITY_BATCHES",
    "QUANTIZED_OPS",
    "QuantizationResult",
    "batch_parity",
    "convert_fp16",
    "quantize_int8",
]
