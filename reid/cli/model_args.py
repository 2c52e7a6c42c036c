"""The options that name a trained model, shared by export, extract and search."""
from __future__ import annotations

import argparse
from typing import Any

from reid.inference.predictor import Predictor, load_predictor


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--run / --config-file / --weights / --device and trailing ``KEY VALUE`` overrides."""
    group = parser.add_argument_group("model (a run folder, or a weights file with or without its config)")
    group.add_argument("--run", metavar="DIR", help="training run folder (OUTPUT_DIR): config.yaml + model_final.pth")
    group.add_argument("--config-file", metavar="FILE", help="YAML config of the model (with --weights)")
    group.add_argument("--weights", metavar="FILE",
                       help="checkpoint to load (default with --run: model_final.pth); alone, its stored config is used")
    group.add_argument("--device", default=None, help="'cpu', 'cuda', 'cuda:N' or 'auto' (default: MODEL.DEVICE)")
    parser.add_argument("opts", nargs=argparse.REMAINDER, metavar="KEY VALUE",
                        help="config overrides, last on the command line (after a one-value option), e.g. TEST.FLIP True")


def predictor_from_args(args: argparse.Namespace, **kwargs: Any) -> Predictor:
    """Load the model named by :func:`add_model_arguments`' options."""
    return load_predictor(run=args.run, config_file=args.config_file, weights=args.weights,
                          opts=args.opts or None, device=args.device, **kwargs)


__all__ = ["add_model_arguments", "predictor_from_args"]
