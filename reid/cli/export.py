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
    # a video model: clips [batch, frames, 3, H, W] in, one feature per clip (frame encoder + its pooling)
    python tools/export.py --run output/demo_video --output video.onnx --clips

--precision fp16|int8 writes ONNX files with that arithmetic (float32 pixels in and features out
as ever); each is checked before it is written: features at batch 7 and 32 equal those at batch 1
in every runtime installed, the cosine of its features to PyTorch fp32's, and with --check-on
R-1/mAP of both (--max-map-drop). What was measured goes into the file's metadata and
FILE.report.json. See docs/inference.md, "Choosing a precision".

--clips (a video model: MODEL.VIDEO.TEMPORAL pooling) writes fp32 files whose input is clips,
images [batch, frames, 3, H, W] with both axes dynamic, and whose output is each clip's feature, as
model(clips) gives it; every frame is a real one (there is no frame mask). They are checked against
PyTorch on clips of 1, 2 and 5 frames (1 to 32 clips) and record "clips": true in their metadata;
load them with reid.export.load_exported(path, clips=True) (loaders of images refuse them). Without
--clips a video model's files take single frames (each a clip of one frame). See docs/inference.md.

Load the results with onnxruntime.InferenceSession("r50.onnx") (input "images", output
"features"), torch.export.load("r50.pt2").module(), or reid.export.load_exported(path);
a model with SIE takes (images, camids). --for boxmot refuses it (BoxMOT gives crops only).
See docs/inference.md.
"""
from __future__ import annotations

import argparse
import os
import sys

from reid.config import value_range
from reid.export.options import (
    CALIBRATION_METHODS,
    DEFAULT_CALIBRATION_IMAGES,
    DEFAULT_OPSET,
    MIN_SIDE,
    PRECISIONS,
    QUANTIZERS,
    TRACKERS,
    is_exported_file,
)

from .args import config_int, float_in, int_in, parse_args, tool_parser
from .errors import run_main
from .model_args import add_model_arguments, check_model_arguments, predictor_from_args


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
                   help="arithmetic of the ONNX files: fp32 (default), fp16 (for GPUs) or int8 (static quantization, "
                        "needs --calibration); docs/inference.md, 'Choosing a precision'")
    p.add_argument("--calibration", nargs="+", metavar="SRC", default=None,
                   help="crops int8 is calibrated on and the checks run on: folders, list files or a dataset name "
                        "(its training images, under DATASETS.ROOT)")
    # 5,000 crops of 256x128 are 0.5 GB in memory; calibration ranges settle long before that.
    p.add_argument("--calibration-images", type=int_in(2, 5000), default=DEFAULT_CALIBRATION_IMAGES, metavar="N",
                   help=f"how many crops of --calibration, 2 to 5,000: a quarter of them is held out to check the "
                        f"int8 features (chosen with --seed; default: {DEFAULT_CALIBRATION_IMAGES})")
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
    p.add_argument("--clips", action="store_true",
                   help="a video model: write files that take clips [batch, frames, 3, H, W] (both axes dynamic) and "
                        "return one feature per clip, its frames pooled by MODEL.VIDEO.TEMPORAL (fp32 only)")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args, lists=("output", "calibration", "check_on"))

    def work() -> None:
        from reid.evaluation.thresholds import calibrated_for, find_thresholds, load_thresholds
        from reid.export.pipeline import run_export
        from reid.export.request import ExportRequest

        request = ExportRequest(  # every flag checked here, before the model is loaded
            args.output, input_size=args.input_size, opset=args.opset, check=not args.no_check, tol=args.tol,
            tracker=args.tracker, precision=args.precision, calibration=args.calibration or (),
            calibration_images=args.calibration_images, calibration_method=args.calibration_method,
            quantizer=args.quantizer, seed=args.seed, check_on=args.check_on or (), max_map_drop=args.max_map_drop,
            force=args.force, clips=args.clips)
        if args.weights and is_exported_file(args.weights):
            raise ValueError(f"--weights {args.weights} is an exported file; tools/export.py writes files from a "
                             f"checkpoint (--run DIR, or --weights FILE.pth). An exported file is scored with "
                             f"tools/test.py --weights {args.weights} (--query / --gallery for your own images) and run "
                             f"with tools/extract.py --weights {args.weights}.")
        predictor = predictor_from_args(args)
        weights = str(predictor.cfg.MODEL.WEIGHTS)
        thresholds = find_thresholds(weights)
        if thresholds and not calibrated_for(load_thresholds(thresholds), weights):
            print(f"note: {thresholds} was calibrated on other weights of the run than {os.path.basename(weights)}; "
                  "its thresholds are not stored in the exported model.")
            thresholds = None
        run_export(request, predictor.model, predictor.cfg, weights_sha256=predictor.weights_sha256,
                   thresholds=thresholds)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
