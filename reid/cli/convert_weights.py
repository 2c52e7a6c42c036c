"""Convert a fast-reid or torchreid checkpoint into this toolkit's format, printing the key mapping.

Such checkpoints load directly wherever weights are loaded (MODEL.WEIGHTS of
tools/train.py and tools/test.py, --weights of extract/export/search). Converting once gives
a file that also stores its config, so that `--weights OUT` works alone, and that
fine-tunes like any checkpoint of this toolkit. The conversion is strict: every tensor of
the file must fit the model of --config-file (see docs/inference.md and docs/osnet.md).

Examples:
  python tools/convert_weights.py market_bot_R50-ibn.pth bot_r50_ibn.pth \\
      --config-file configs/Market1501/bot_resnet50_ibn.yml
  python tools/convert_weights.py market_sbs_R50.pth sbs_r50.pth \\
      --config-file configs/Market1501/sbs_resnet50.yml MODEL.BACKBONE.STEM_POOL pad
  python tools/convert_weights.py osnet_x0_25_msmt17.pt osnet_x0_25_msmt17.pth \\
      --config-file configs/MSMT17/osnet_x0_25_torchreid.yml
  python tools/extract.py --weights bot_r50_ibn.pth --input crops/ --output gallery.npz
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from reid.config import load_config

from .args import parse_args
from .errors import run_main

if TYPE_CHECKING:  # the model code loads torch: imported where the work starts, after the arguments
    from reid.modeling.formats import ConvertedWeights

Log = Callable[[str], None]


def convert_command(src: str, dst: str, config_file: str, opts: Sequence[str] = (),
                    log: Log = print) -> ConvertedWeights:
    """Write fast-reid or torchreid checkpoint `src` as this toolkit's checkpoint `dst` for `config_file`'s model.

    The output holds ``model`` (the converted weights, with the identity classifier when the
    config's model takes it), ``cfg`` (the config, ``MODEL.HEADS.NUM_CLASSES`` set to the
    classifier's classes, or 0 when it was dropped) and ``converted_from``.
    """
    from reid.engine.checkpoint_files import load_model_state, model_state, read_checkpoint, save_checkpoint
    from reid.modeling import build_model
    from reid.modeling.formats import convert_foreign_state, detect_format, known_markers, mapping_table

    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError(f"Output {dst!r} is the input file; write the converted checkpoint to another path.")
    state = model_state(read_checkpoint(src))
    fmt = detect_format(state)
    if fmt is None:
        raise ValueError(
            f"{src} is not a checkpoint of another toolkit (it has none of their key names: {known_markers()}); "
            "checkpoints of this toolkit need no conversion."
        )
    base = ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.WEIGHTS", ""]
    classes = fmt.classifier_classes(state)
    # A head that does not fit is left out, not initialised randomly: fine-tuning then asks for --drop-head.
    for num_classes in (classes, 0):
        cfg = load_config(config_file, list(opts) + base + ["MODEL.HEADS.NUM_CLASSES", num_classes])
        model = build_model(cfg)
        converted = convert_foreign_state(model, state, src, log=False)
        if not converted.head_dropped:
            break
    load_model_state(model, converted.state, src)
    save_checkpoint(dst, model=model.state_dict(), cfg=cfg.dump(), converted_from=os.path.abspath(src))
    log(f"{converted.description} {src}: key mapping")
    log(mapping_table(converted.mapping))
    for note in converted.notes:
        log(f"note: {note}")
    head = f"identity classifier loaded ({classes} classes)" if classes and not converted.head_dropped else \
        "no identity classifier"
    log(f"wrote {dst}: {len(converted.state)} tensors from {len(converted.mapping)} {converted.label} tensors, {head}, "
        f"config {config_file} stored in the file")
    return converted


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Convert IN to OUT for --config-file's model; returns the exit code (1 with ``error:`` on bad input)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # IN and OUT before the overrides: the first two positional words are the files.
    parser.add_argument("input", metavar="IN", help="fast-reid or torchreid checkpoint")
    parser.add_argument("output", metavar="OUT", help="checkpoint to write in this toolkit's format")
    parser.add_argument("--config-file", default="", metavar="FILE",
                        help="YAML config of the checkpoint's architecture (may use _BASE_)")
    parser.add_argument("opts", nargs="*", metavar="KEY VALUE", help="config overrides, e.g. MODEL.BACKBONE.STEM_POOL pad")
    args = parse_args(parser, argv)
    if not args.config_file:
        parser.error("--config-file is required: the config of the checkpoint's architecture "
                     "(e.g. configs/Market1501/bot_resnet50.yml for a fast-reid BoT R50, "
                     "configs/MSMT17/osnet_x0_25_torchreid.yml for torchreid's osnet_x0_25_msmt17)")

    def work() -> None:
        convert_command(args.input, args.output, args.config_file, args.opts or [])

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
