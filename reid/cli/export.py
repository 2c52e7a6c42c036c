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

from .args import config_int, int_in, parse_args, tool_parser
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


def export_command(predictor: Predictor, outputs: Sequence[str], input_size: Optional[Sequence[int]] = None,
                   opset: int = DEFAULT_OPSET, check: bool = True, tol: float = 1e-4,
                   log: Log = print, tracker: Optional[str] = None,
                   thresholds: Optional[str] = None) -> List[Optional[ExportCheck]]:
    """Export the predictor's model to each of `outputs` (format from the extension) and check it.

    With `tracker` ("boxmot") the files take that tracker's input convention instead of raw
    pixels (``reid.inference.trackers``). `thresholds` (a run's thresholds.json) is checked and goes
    into each file's metadata as ``decision_thresholds`` (FARs its split cannot resolve only under
    ``unresolved``, without a threshold).

    Each check runs the exported file and PyTorch on the same random inputs (batch sizes 1
    and 7; valid random camera ids for a model with SIE) and logs the largest absolute difference; an ONNX check without onnxruntime is
    skipped with a note (None in the result). Raises ExportMismatchError when a difference
    exceeds `tol`, after every file has been written and checked.
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
    from reid.inference.camera_ids import model_cameras
    from reid.inference.trackers import BoxMOTInput, check_tracker_export, check_tracker_model, export_for_boxmot

    if not outputs:
        raise ValueError("No output files given; pass e.g. --output model.onnx model.pt2.")
    from reid.utils.file_io import check_output_file

    for out in outputs:
        if export_format(check_output_file(out)) == "onnx":  # a bad extension, folder or opset fails before slow work
            check_opset(opset)
    size = list(input_size) if input_size else list(predictor.input_size)
    model, pixels = predictor.model, "RGB 0-255"
    if tracker:
        size = list(check_tracker_export(tracker, outputs, size))
        check_tracker_model(tracker, predictor.model)
        model, pixels = BoxMOTInput(predictor.model), "RGB/255 with ImageNet mean/std (BoxMOT)"
    cameras = model_cameras(predictor.model)
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
    checks: List[Optional[ExportCheck]] = []
    for out in outputs:
        if tracker:
            export_for_boxmot(predictor.model, out, size, opset=opset, metadata=metadata)
        else:
            export_model(model, out, size, opset=opset, metadata=metadata)
        log(f"wrote {export_format(out)} model {out} (input float32 [batch, 3, {size[0]}, {size[1]}] "
            f"{pixels}{cameras}, output L2-normalised [batch, {predictor.feature_dim}])")
        if not check:
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
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args, lists=("output",))

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
                       check=not args.no_check, tol=args.tol, tracker=args.tracker, thresholds=thresholds)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
