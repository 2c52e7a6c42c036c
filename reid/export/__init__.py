"""Exported models: written at every precision and checked, read back, run, and gated on accuracy.

    from reid.export import export_model, load_exported
    export_model(model, "model.onnx", input_size=(256, 128))   # raw pixels in, L2-normalised features out
    features = load_exported("model.onnx")(pixels)             # [B, 3, H, W] RGB 0-255

- writer.py: ``.pt2`` / ``.onnx`` files and their check against PyTorch; exported.py: reading and
  running them (``load_exported``); runtimes.py: ONNX files in ONNX Runtime and OpenVINO;
- request.py: what ``tools/export.py`` asks for, validated in one place, and carried out;
- precision.py: fp16 / int8 versions of an ONNX file; precision_export.py: convert, check, write;
  accuracy.py: R-1/mAP of a file against PyTorch fp32; calibration_crops.py: the crops and check set;
- boxmot.py: BoxMOT's input convention; identity.py: the weights' identity a file records;
  camera_ids.py: the second input of models with SIE; clips.py: video models' clip files
  ([batch, frames, 3, H, W], ``--clips``); options.py: names listed before torch loads.

Below ``reid.inference`` (its backends run these files); see docs/inference.md.
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.export.writer": ["ExportCheck", "ExportMismatchError", "NormalizedFeatureModel", "compare_with_export",
                           "export_model", "export_onnx", "export_program", "export_pt2"],
    "reid.export.exported": ["ExportedModel", "export_format", "load_exported", "run_exported"],
    "reid.export.precision_export": ["PrecisionCheckError", "PrecisionReport", "export_at_precision"],
    "reid.export.boxmot": ["export_for_boxmot"],
    "reid.export.identity": ["weights_hash"],
    "reid.export.options": ["PRECISIONS"],
})

__all__ = sorted(__dir__())
