"""Export a trained model to a torch.export program (.pt2) and/or ONNX, and check it against PyTorch.

The exported model takes raw RGB pixels, float32 0-255, shaped [batch, 3, H, W] (batch is
free; H x W is INPUT.SIZE_TEST unless --input-size says otherwise, and any other size is
refused) and returns L2-normalised features [batch, D]: no mean/std preprocessing or
normalisation is needed around it. A model with SIE (camera embedding) also takes each image's
camera id: a second input camids, int64 [batch]. The format follows the extension: .pt2 for a
torch.export program (needs only torch), .onnx for ONNX (torch.onnx.export with
dynamo=True; needs onnx and onnxscript, and the check needs onnxruntime).

After writing each file, the exported model and the PyTorch model run on the same random
inputs (batch sizes 1 and 7; the export example has batch 2) and the largest absolute
difference is printed; the tool fails (exit code 1) when it exceeds --tol.

Examples:
    # both formats from a training run (config.yaml + model_final.pth)
    python tools/export.py --run output/market_r50_circle --output r50.onnx r50.pt2
    # a checkpoint with an explicit config, at another input size
    python tools/export.py --config-file configs/Market1501/mgn_circle.yml \\
        --weights output/mgn/model_final.pth --output mgn.onnx --input-size 384 128
    # a checkpoint alone (it stores its config); skip the comparison
    python tools/export.py --weights model_final.pth --output model.pt2 --no-check
    # for a tracker: BoxMOT's ReID backend loads the file as it is (its input convention)
    python tools/export.py --run output/market_osnet --output osnet_x0_25_market.onnx --for boxmot
    # int8, calibrated on crops of your cameras; refused if its mAP on a labelled set drops by > 1 point
    python tools/export.py --run output/osnet --output osnet_int8.onnx --precision int8 \\
        --calibration crops/ --check-on my/query my/gallery
    # fp16 for a GPU runtime (TensorRT, CUDA); --quantizer nncf: the int8 file OpenVINO runs fastest
    python tools/export.py --run output/osnet --output osnet_fp16.onnx --precision fp16

--precision fp16|int8 writes ONNX files with that arithmetic (float32 pixels in and features out
as ever); each is checked before it is written: features at batch 7 and 32 equal those at batch 1
in every runtime installed, the cosine of its features to PyTorch fp32's, and with --check-on
R-1/mAP of both (--max-map-drop). What was measured goes into the file's metadata and
FILE.report.json. See docs/inference.md, "Choosing a precision".

Load the results with onnxruntime.InferenceSession("r50.onnx") (input "images", output
"features"), torch.export.load("r50.pt2").module(), or reid.inference.load_exported(path);
a model with SIE takes (images, camids). --for boxmot refuses it (BoxMOT gives crops only).
See docs/inference.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

from reid.config import value_range

from .args import config_int, float_in, int_in, parse_args, tool_parser
from .errors import run_main
from .model_args import add_model_arguments, check_model_arguments, predictor_from_args

if TYPE_CHECKING:  # the exporter loads torch: imported where the work starts, after the arguments
    from reid.inference.export import ExportCheck
    from reid.inference.predictor import Predictor

Log = Callable[[str], None]

#: ``reid.inference.export.DEFAULT_OPSET``, ``MIN_SIDE`` and ``reid.inference.trackers.TRACKERS``,
#: named here so that --help answers without loading torch (a test keeps them equal).
DEFAULT_OPSET = 18
MIN_SIDE = 16
TRACKERS = ("boxmot",)
#: ``reid.inference.precision.PRECISIONS``, ``CALIBRATION_METHODS`` and ``QUANTIZERS`` (a test keeps them equal).
PRECISIONS = ("fp32", "fp16", "int8")
CALIBRATION_METHODS = ("minmax", "percentile")
QUANTIZERS = ("onnxruntime", "nncf")


def export_command(predictor: Predictor, outputs: Sequence[str], input_size: Optional[Sequence[int]] = None,
                   opset: int = DEFAULT_OPSET, check: bool = True, tol: float = 1e-4,
                   log: Log = print, tracker: Optional[str] = None,
                   thresholds: Optional[str] = None, precision: str = "fp32",
                   calibration: Optional[Sequence[str]] = None, calibration_images: int = 300,
                   calibration_method: str = "minmax", seed: int = 0, check_on: Optional[Sequence[str]] = None,
                   max_map_drop: float = 1.0, force: bool = False,
                   quantizer: str = "onnxruntime") -> List[Optional[ExportCheck]]:
    """Export the predictor's model to each of `outputs` (format from the extension) and check it.

    With `tracker` ("boxmot") the files take that tracker's input convention instead of raw
    pixels (``reid.inference.trackers``). `thresholds` (a run's thresholds.json) is checked and goes
    into each file's metadata as ``decision_thresholds`` (FARs its split cannot resolve only under
    ``unresolved``, without a threshold).

    Each check runs the exported file and PyTorch on the same random inputs (batch sizes 1
    and 7; valid random camera ids for a model with SIE) and logs the largest absolute difference; an ONNX check without onnxruntime is
    skipped with a note (None in the result). Raises ExportMismatchError when a difference
    exceeds `tol`, after every file has been written and checked.

    `precision` "fp16" or "int8" writes ONNX files with that arithmetic
    (``reid.inference.precision_export``): int8 calibrated on `calibration_images` crops of
    `calibration` (folders, list files or a dataset name; chosen with `seed`; placed by `quantizer`,
    "onnxruntime" or "nncf"), which are also the
    crops the checks of every precision run on. With `check_on` (a dataset name, or a query and a
    gallery) each ONNX file and PyTorch fp32 are scored on it; a file losing more than
    `max_map_drop` mAP points is not written unless `force` (PrecisionCheckError).
    """
    from reid.inference.export import (
        CHECK_BATCH_SIZES,
        ExportMismatchError,
        check_opset,
        compare_with_export,
        export_format,
        export_model,
    )
    from reid.inference.identity import short
    from reid.modeling import camera_count
    from reid.inference.trackers import BoxMOTInput, check_tracker_export, check_tracker_model, export_for_boxmot

    if not outputs:
        raise ValueError("No output files given; pass e.g. --output model.onnx model.pt2.")
    from reid.utils.file_io import check_output_file

    from reid.inference.precision import INT8_NEEDS_CALIBRATION, INT8_NO_CAMIDS, check_precision

    precision = check_precision(precision)
    for out in outputs:
        if export_format(check_output_file(out)) == "onnx":  # a bad extension, folder or opset fails before slow work
            check_opset(opset)
        elif precision != "fp32":
            raise ValueError(f"--precision {precision} writes ONNX files (a .pt2 program computes in fp32, as PyTorch "
                             f"does); name {out} *.onnx, or leave --precision at fp32.")
    if precision == "int8" and not calibration:
        raise ValueError(INT8_NEEDS_CALIBRATION)
    if precision == "int8" and camera_count(predictor.model):
        raise ValueError(INT8_NO_CAMIDS)
    flags = [("--quantizer", "--precision int8", precision != "int8" and quantizer != "onnxruntime"),
             ("--calibration-method", "--precision int8", precision != "int8" and calibration_method != "minmax"),
             ("--force", "--check-on", force and not check_on),
             ("--max-map-drop", "--check-on", max_map_drop != 1.0 and not check_on)]
    for flag, applies_to, unused in flags:  # said, not silently ignored
        if unused:
            log(f"note: {flag} has no effect here: it applies to {applies_to}")
    size = list(input_size) if input_size else list(predictor.input_size)
    model, pixels = predictor.model, "RGB 0-255"
    if tracker:
        size = list(check_tracker_export(tracker, outputs, size))
        check_tracker_model(tracker, predictor.model)
        model, pixels = BoxMOTInput(predictor.model), "RGB/255 with ImageNet mean/std (BoxMOT)"
    cameras = camera_count(predictor.model)
    cameras = f" and camids int64 [batch] (camera ids 0..{cameras - 1}, SIE)" if cameras else ""
    # The weights' identity (their state's hash and file name): a later --exported with --run /
    # --weights is checked against it, and galleries made with the file record it.
    metadata = {"weights_sha256": predictor.weights_sha256}
    if predictor.cfg.MODEL.WEIGHTS:
        metadata["weights_file"] = os.path.basename(str(predictor.cfg.MODEL.WEIGHTS))
    log(f"the weights' identity goes into the metadata: sha256 {short(predictor.weights_sha256)}... of "
        f"{metadata.get('weights_file', 'the model given')}")
    if thresholds:
        from reid.evaluation.thresholds import load_thresholds, resolution_known

        record = load_thresholds(thresholds)  # checked as a whole before any of it is copied
        made = record.get("extraction")
        # The exported model computes one pass at `size` (no flip averaging): thresholds calibrated
        # on other features would not hold their FAR for its scores.
        if made is not None and (made["input_size"] != size or made["flip"]):
            log(f"note: {thresholds} was calibrated on features of input size {made['input_size']}"
                f"{' with flip averaging' if made['flip'] else ''}, not those of this export ({size}, one pass); "
                "its thresholds are not stored in the exported model.")
        elif resolution_known(record):
            metadata["decision_thresholds"] = record
            log(f"the run's calibrated thresholds ({thresholds}) go into the metadata")
        else:
            log(f"note: {thresholds} does not record how many pairs its thresholds rest on (not written by this "
                "toolkit's calibration); they are not stored in the exported model.")
    reduced = _PrecisionExport(predictor, size, precision, calibration, calibration_images, calibration_method, seed,
                               check_on, max_map_drop, force, tracker, log, quantizer)
    checks: List[Optional[ExportCheck]] = []
    for out in outputs:
        if export_format(out) == "onnx" and reduced.wanted:
            def write_fp32(path: str, out: str = out) -> None:
                if tracker:
                    export_for_boxmot(predictor.model, path, size, opset=opset, metadata=metadata)
                else:
                    export_model(model, path, size, opset=opset, metadata=metadata)

            reduced.write(out, write_fp32)
        elif tracker:
            export_for_boxmot(predictor.model, out, size, opset=opset, metadata={**metadata, "precision": "fp32"})
        elif reduced.check:
            log(f"note: --check-on scores ONNX files; {out} is a torch.export program, which computes as PyTorch does "
                "(checked against it below)")
            export_model(model, out, size, opset=opset, metadata={**metadata, "precision": "fp32"})
        else:
            export_model(model, out, size, opset=opset, metadata={**metadata, "precision": "fp32"})
        log(f"wrote {export_format(out)} model {out} ({reduced.precision_of(out)}; input float32 [batch, 3, {size[0]}, "
            f"{size[1]}] {pixels}{cameras}, output L2-normalised [batch, {predictor.feature_dim}])")
        if not check or reduced.precision_of(out) != "fp32":  # reduced precision: checked as it was written
            checks.append(None)
            continue
        try:
            result = compare_with_export(model, out, size, batch_sizes=CHECK_BATCH_SIZES)
        except ImportError as e:
            log(f"check of {out} skipped: {e}")
            checks.append(None)
            continue
        log(f"check: {result} -> {'OK' if result.passed(tol) else f'FAILED (tolerance {tol:g})'}")
        checks.append(result)
    bad = [c for c in checks if c is not None and not c.passed(tol)]
    if bad:
        raise ExportMismatchError(
            f"{len(bad)} exported model(s) differ from PyTorch by more than {tol:g}: "
            + "; ".join(f"{c.path} ({c.max_abs_diff:.2e})" for c in bad)
            + ". Try another --opset, or report the model and versions."
        )
    return checks


class _PrecisionExport:
    """The ONNX outputs of one export command at a precision, with their crops and checks (read once)."""

    def __init__(self, predictor: Predictor, size: Sequence[int], precision: str, calibration: Optional[Sequence[str]],
                 num: int, method: str, seed: int, check_on: Optional[Sequence[str]], max_map_drop: float, force: bool,
                 tracker: Optional[str], log: Log, quantizer: str = "onnxruntime") -> None:
        self.predictor, self.size, self.precision, self.log = predictor, list(size), precision, log
        self.quantizer = quantizer
        self.method, self.max_map_drop, self.force = method, max_map_drop, force
        self.wanted = precision != "fp32" or bool(calibration) or bool(check_on)
        self.cfg = predictor.cfg.clone()
        self.cfg.defrost()
        self.cfg.INPUT.SIZE_TEST = [int(s) for s in size]
        self.pixels, self.source = None, ""
        self.check = None
        self.to_input = None
        if tracker:
            from reid.inference.trackers import boxmot_input

            self.to_input = boxmot_input
        if not self.wanted:
            return
        from reid.inference.calibration_crops import check_set, load_calibration
        from reid.modeling import takes_camera_ids

        if check_on:  # read (and refused) before any slow work
            if len(check_on) == 2 and takes_camera_ids(predictor.model):
                from .common import check_folder_cameras

                folders = self.cfg.clone()
                folders.DATASETS.FOLDERS.QUERY_PATH, folders.DATASETS.FOLDERS.GALLERY_PATH = map(str, check_on)
                check_folder_cameras(folders)  # the evaluation's bookkeeping cameras are not the images'
            self.check = check_set(self.cfg, check_on)
            log(f"accuracy check on {self.check[0]}: {len(self.check[1])} query / {len(self.check[2])} gallery images")
        if calibration:
            self.pixels, self.source = load_calibration(self.cfg, calibration, num, seed)
            log(f"calibration crops: {self.source}")

    def precision_of(self, out: str) -> str:
        from reid.inference.export import export_format

        return self.precision if export_format(out) == "onnx" else "fp32"

    def write(self, out: str, write_fp32: Callable[[str], None]) -> None:
        from reid.inference.calibration_crops import check_loader
        from reid.inference.precision_export import export_at_precision, report_path

        name, query, gallery = self.check if self.check else ("", [], [])
        export_at_precision(
            self.predictor.model, out, self.size, self.precision, write_fp32=write_fp32, pixels=self.pixels,
            calibration=self.source, method=self.method, quantizer=self.quantizer, to_input=self.to_input,
            check_batches=(lambda: check_loader(self.cfg, query, gallery)) if self.check else None,
            check_query=len(query), check_name=name, max_map_drop=self.max_map_drop, force=self.force, log=self.log)
        self.log(f"report: {report_path(out)}")


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    p.add_argument("-o", "--output", nargs="+", required=True, metavar="FILE",
                   help="files to write: .pt2 (torch.export program) and/or .onnx (ONNX)")
    p.add_argument("--input-size", nargs=2, type=config_int("INPUT.SIZE_TEST", low=MIN_SIDE), metavar=("H", "W"),
                   help=f"input height and width, {MIN_SIDE} to {value_range('INPUT.SIZE_TEST')[1]} px each "
                        "(default: INPUT.SIZE_TEST of the model's config)")
    p.add_argument("--opset", type=int_in(DEFAULT_OPSET), default=DEFAULT_OPSET,
                   help=f"ONNX opset, {DEFAULT_OPSET} up to the newest the installed onnx writes (default: {DEFAULT_OPSET})")
    p.add_argument("--no-check", action="store_true", help="do not compare the exported model with PyTorch")
    p.add_argument("--for", dest="tracker", choices=TRACKERS, default=None,
                   help="write a model that this tracker loads as it is (boxmot: ONNX in BoxMOT's input convention)")
    p.add_argument("--tol", type=float, default=1e-4,
                   help="largest accepted absolute difference of the features (default: 1e-4)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="arithmetic of the ONNX files: fp32 (default), fp16 (for GPUs) or int8 (static quantisation, "
                        "needs --calibration); docs/inference.md, 'Choosing a precision'")
    p.add_argument("--calibration", nargs="+", metavar="SRC", default=None,
                   help="crops int8 is calibrated on and the checks run on: folders, list files or a dataset name "
                        "(its training images, under DATASETS.ROOT)")
    # 5,000 crops of 256x128 are 0.5 GB in memory; calibration ranges settle long before that.
    p.add_argument("--calibration-images", type=int_in(1, 5000), default=300, metavar="N",
                   help="how many crops of --calibration, at most 5,000 (chosen with --seed; default: 300)")
    p.add_argument("--calibration-method", choices=CALIBRATION_METHODS, default="minmax",
                   help="int8 activation ranges: minmax (default) or percentile (99.999th, robust to outliers)")
    p.add_argument("--quantizer", choices=QUANTIZERS, default="onnxruntime",
                   help="who places int8's QDQ pairs: onnxruntime (default; for ONNX Runtime, TensorRT, BoxMOT) or nncf "
                        "(OpenVINO's NNCF: the file OpenVINO runs fastest; pip install nncf openvino)")
    p.add_argument("--seed", type=int_in(0), default=0, help="which calibration crops are chosen (default: 0)")
    p.add_argument("--check-on", nargs="+", metavar="SRC", default=None,
                   help="score each ONNX file and PyTorch fp32 on this labelled set: a dataset name (under "
                        "DATASETS.ROOT), or a query and a gallery (folders of identity sub-folders or list files)")
    p.add_argument("--max-map-drop", type=float_in(0.0, 100.0), default=1.0, metavar="POINTS",
                   help="with --check-on: a file losing more mAP points than this is not written (default: 1.0)")
    p.add_argument("--force", action="store_true", help="write a file that loses more than --max-map-drop anyway")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args, lists=("output", "calibration", "check_on"))
    if args.precision == "int8" and not args.calibration:
        parser.error("--precision int8 needs calibration crops: pass --calibration with a folder, list file or dataset "
                     "name of a few hundred crops of your cameras")

    def work() -> None:
        from reid.evaluation.thresholds import calibrated_for, find_thresholds, load_thresholds

        predictor = predictor_from_args(args)
        weights = str(predictor.cfg.MODEL.WEIGHTS)
        thresholds = find_thresholds(weights)
        if thresholds and not calibrated_for(load_thresholds(thresholds), weights):
            print(f"note: {thresholds} was calibrated on other weights of the run than {os.path.basename(weights)}; "
                  "its thresholds are not stored in the exported model.")
            thresholds = None
        export_command(predictor, args.output, input_size=args.input_size, opset=args.opset,
                       check=not args.no_check, tol=args.tol, tracker=args.tracker, thresholds=thresholds,
                       precision=args.precision, calibration=args.calibration,
                       calibration_images=args.calibration_images, calibration_method=args.calibration_method,
                       seed=args.seed, check_on=args.check_on, max_map_drop=args.max_map_drop, force=args.force,
                       quantizer=args.quantizer)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
