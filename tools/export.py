#!/usr/bin/env python
"""Export a trained model to ONNX and/or TorchScript, and check it against PyTorch.

The exported model takes raw RGB pixels, float32 0-255, shaped [batch, 3, H, W] (batch is
free; H x W is INPUT.SIZE_TEST unless --input-size says otherwise) and returns
L2-normalised features [batch, D]: no mean/std preprocessing or normalisation is needed
around it. The format follows the extension: .onnx for ONNX (needs `pip install onnx`;
the check also needs onnxruntime), .ts or .pt for TorchScript.

After writing each file, the exported model and the PyTorch model run on the same random
inputs (batch sizes 1 and 3) and the largest absolute difference is printed; the tool
fails (exit code 1) when it exceeds --tol.

Examples:
    # both formats from a training run (config.yaml + model_final.pth)
    python tools/export.py --run output/market_r50_circle --output r50.onnx r50.ts
    # a checkpoint with an explicit config, at another input size
    python tools/export.py --config-file configs/Market1501/mgn_circle.yml \\
        --weights output/mgn/model_final.pth --output mgn.onnx --input-size 384 128
    # a checkpoint alone (it stores its config); skip the comparison
    python tools/export.py --weights model_final.pth --output model.ts --no-check

Load the results with onnxruntime.InferenceSession("r50.onnx") (input "images", output
"features") or torch.jit.load("r50.ts"). See docs/inference.md.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.inference.commands import add_model_arguments, export_command, predictor_from_args, run_user_command  # noqa: E402
from reid.inference.export import DEFAULT_OPSET  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", nargs="+", required=True, metavar="FILE",
                   help="files to write: .onnx (ONNX) and/or .ts / .pt (TorchScript)")
    p.add_argument("--input-size", nargs=2, type=int, metavar=("H", "W"),
                   help="input height and width (default: INPUT.SIZE_TEST of the model's config)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default: {DEFAULT_OPSET})")
    p.add_argument("--no-check", action="store_true", help="do not compare the exported model with PyTorch")
    p.add_argument("--tol", type=float, default=1e-4,
                   help="largest accepted absolute difference of the features (default: 1e-4)")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    def work() -> None:
        predictor = predictor_from_args(args)
        export_command(predictor, args.output, input_size=args.input_size, opset=args.opset,
                       check=not args.no_check, tol=args.tol)

    return run_user_command(work)


if __name__ == "__main__":
    sys.exit(main())
