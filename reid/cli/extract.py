"""Compute features for every image in folders or list files and save them with their paths.

Folders are searched recursively for .jpg, .jpeg, .png, .bmp, .tif, .tiff and .webp files
(sorted by path); a list file names one image per line (relative paths start from the list
file's folder; "path pid camid" lines work too, and their pids/camids are saved when every
image has them). Features are L2-normalised, made exactly
as the evaluator makes them (resize to INPUT.SIZE_TEST, TEST.FLIP, TEST.AMP), and saved
with the absolute path of each image to an .npz file (default) or a .safetensors file
(needs `pip install safetensors`). Progress is shown on stderr.

Examples:
    # a folder of crops, with the model of a training run
    python tools/extract.py --run output/market_r50_circle --input crops/ --output gallery.npz
    # two folders and a list file, bigger batches on the GPU, flip averaging on
    python tools/extract.py --run output/mgn --input cam1/ cam2/ more.txt --output g.npz \\
        --batch-size 256 --num-workers 8 --device cuda TEST.FLIP True
    # a checkpoint alone (it stores its config), safetensors output
    python tools/extract.py --weights model_final.pth --input crops/ --output gallery.safetensors
    # on a CPU: ONNX Runtime runs the exported model (faster than PyTorch; OpenVINO likewise)
    python tools/extract.py --run output/osnet --input crops/ --output g.npz --backend onnxruntime
    # a file tools/export.py wrote (it must hold the run's weights: checked by their hash)
    python tools/extract.py --run output/osnet --input crops/ --output g.npz --backend onnxruntime \\
        --exported osnet.onnx
    # an int8 file (tools/export.py --precision int8 --quantizer nncf: fastest in OpenVINO)
    python tools/extract.py --run output/osnet --input crops/ --output g.npz --backend openvino \\
        --exported osnet_int8.onnx --precision int8

An image that cannot be read (empty, truncated, not an image) stops the tool with an error
naming it; with --skip-corrupt (or DATASETS.SKIP_CORRUPT True) every image is read once first
and the unreadable ones are listed and left out.

Galleries of millions of crops: `torchrun --nproc_per_node N tools/extract.py ...` splits the
images into N contiguous shards (one per process; GPUs: one each) and rank 0 writes the one
gallery file, rows in the single-process order.

Search the result with tools/search.py. See docs/inference.md for the file format.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple

from reid.export.options import PRECISIONS, is_exported_file
from reid.inference.options import BACKEND_NAMES

from .args import config_int, parse_args, tool_parser
from .errors import one_line, run_main
from .model_args import add_model_arguments, check_model_arguments, predictor_from_args

if TYPE_CHECKING:  # the library loads torch: imported where the work starts, after the arguments
    import numpy as np

    from reid.search.gallery import Gallery
    from reid.inference.predictor import Predictor

Log = Callable[[str], None]


def extract_command(predictor: Predictor, sources: Sequence[str], output: str, progress: bool = True,
                    skip_corrupt: bool = False, log: Log = print, tracklets: bool = False) -> Optional[Gallery]:
    """Features of every image in `sources` (folders, list files, images) saved to `output`.

    Paths are stored absolute, so a search run from another folder still finds the images.
    When every image comes from ``path pid camid`` list lines, the pids and camids are saved
    too (a search then reports them); when only some are labelled, none are saved and the
    log says why. With `skip_corrupt`, every image is read once first and the unreadable ones
    are left out and listed; otherwise the first one stops the run with an error naming it.
    Under torchrun every process extracts its shard and rank 0 saves the gallery (the other
    ranks return None). With `tracklets`, each folder of frames in `sources` is one gallery item: its
    frames pooled by the model's own temporal pooling (reid/inference/tracklet_pooling.py), stored
    under the folder's path.
    """
    from reid.data.image_io import CorruptImageError
    from reid.search.gallery import Gallery, gallery_format, require_safetensors, save_gallery
    from reid.inference.sharding import extract_sharded
    from reid.data.sources import collect_entries
    from reid.utils.logger import progress_bar

    from reid.utils.file_io import check_output_file

    fmt = gallery_format(check_output_file(output))  # a bad extension or a folder fails now, not after an hour
    if fmt == "safetensors":
        require_safetensors()
    if tracklets:
        return _extract_tracklets(predictor, sources, output, progress, log)
    entries = collect_entries(sources)
    paths = [os.path.abspath(p) for p in entries.paths]
    pids, camids = entries.label_arrays()
    if skip_corrupt:
        paths, keep = _readable(paths, log)
        pids, camids = (None, None) if pids is None else (pids[keep], camids[keep])
    labelled = entries.num_labelled
    if 0 < labelled < len(paths):
        log(f"note: {labelled} of {len(paths)} images have 'path pid camid' labels; labels are saved only "
            "when every image has one, so this gallery has none")
    where = f"device {predictor.device}" if predictor.backend == "torch" else f"backend {predictor.backend}, cpu"
    log(f"extracting features of {len(paths)} images (batch {predictor.batch_size}, {where}, flip {predictor.flip})")
    try:
        with progress_bar(len(paths), "extract", enabled=progress, unit="img") as bar:
            feats = extract_sharded(predictor, paths, progress=lambda done, total: bar.update(done - bar.n),
                                    camids=camids)  # a model with SIE takes them
    except CorruptImageError as e:
        raise CorruptImageError(f"{one_line(e)} (Here: --skip-corrupt does that.)") from None
    if feats is None:  # another rank of a torchrun job: rank 0 writes the gallery
        return None
    gallery = Gallery(feats=feats, paths=paths, pids=pids, camids=camids, meta=predictor.describe())
    save_gallery(gallery, output)
    what = "paths, pids and camids" if pids is not None else "paths"
    log(f"saved {len(gallery)} features ({gallery.dim}-d) with their {what} to {output}")
    return gallery


def _extract_tracklets(predictor: Predictor, sources: Sequence[str], output: str, progress: bool,
                       log: Log) -> Gallery:
    """The gallery of the tracklet folders in `sources` (see :func:`extract_command`)."""
    from reid.inference.tracklet_pooling import FramePooling, find_tracklets, tracklet_folder_features
    from reid.search.gallery import Gallery, save_gallery
    from reid.utils.logger import progress_bar

    method = FramePooling(predictor).method  # a model that cannot pool frames fails before any image is read
    found = find_tracklets(sources)
    frames = sum(len(f) for _, f in found)
    log(f"extracting features of {len(found)} tracklets ({frames} frames, each tracklet's pooled by the model's "
        f"{method} pooling; device {predictor.device}, flip off)")
    with progress_bar(frames, "extract", enabled=progress, unit="frame") as bar:
        feats = tracklet_folder_features(predictor, found, progress=lambda done, total: bar.update(done - bar.n))
    meta = {**predictor.describe(), "tracklets": f"frames pooled by {method}"}
    gallery = Gallery(feats=feats, paths=[folder for folder, _ in found], pids=None, camids=None, meta=meta)
    save_gallery(gallery, output)
    log(f"saved {len(gallery)} tracklet features ({gallery.dim}-d) with their folders to {output}")
    return gallery


def _readable(paths: List[str], log: Log) -> Tuple[List[str], np.ndarray]:
    """The readable `paths` and their positions; each unreadable one is logged."""
    import numpy as np

    from reid.data.image_io import filter_readable

    bad = set(filter_readable([(p, 0, 0) for p in paths], warn=False)[1])
    for path in sorted(bad):
        log(f"skipped unreadable image: {path}")
    keep = np.asarray([p not in bad for p in paths], dtype=bool)
    if bad:
        log(f"skipped {len(bad)} unreadable of {len(paths)} images (listed above)")
    if not keep.any():
        raise ValueError(f"None of the {len(paths)} images could be read; check the --input paths.")
    return [p for p in paths if p not in bad], keep


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    p.add_argument("-i", "--input", nargs="+", required=True, metavar="SRC",
                   help="image folders (recursive), list files and/or image files")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="gallery file to write: .npz or .safetensors")
    p.add_argument("--batch-size", type=config_int("TEST.IMS_PER_BATCH"), default=None,
                   help="images per batch (default: TEST.IMS_PER_BATCH; bounded as it is)")
    p.add_argument("--num-workers", type=config_int("DATALOADER.NUM_WORKERS"), default=2,
                   help="image-reading processes (default: 2; 0 = none; bounded as DATALOADER.NUM_WORKERS)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--tracklets", action="store_true",
                   help="each folder of frames in --input is one tracklet: one feature per folder, its frames pooled by "
                        "the model's own temporal pooling (MODEL.VIDEO.TEMPORAL; PyTorch backend)")
    p.add_argument("--skip-corrupt", action="store_true",
                   help="leave out (and list) images that cannot be read; also on with DATASETS.SKIP_CORRUPT True")
    p.add_argument("--backend", default=None, choices=BACKEND_NAMES,
                   help="run the model with PyTorch (default for checkpoints and .pt2 files), or its ONNX export with "
                        "ONNX Runtime (default for .onnx files) or OpenVINO (CPU)")
    p.add_argument("--exported", metavar="FILE", default=None,
                   help="an exported file of tools/export.py (.onnx, or .pt2 with torch) to run instead of the weights "
                        "of --run / --weights, checked against them (an exported file alone: --weights FILE)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="with --backend onnxruntime/openvino: the file's arithmetic (default: what --exported records, "
                        "else fp32); fp16 exports now, int8 needs a file of tools/export.py --precision int8")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args, lists=("input",))
    exported = args.exported or (args.weights if args.weights and is_exported_file(args.weights) else None)
    if exported and args.backend == "torch" and str(exported).lower().endswith(".onnx"):
        parser.error(f"--exported {exported} runs with --backend onnxruntime or --backend openvino (their default: "
                     "onnxruntime); the torch backend runs the weights of --run / --weights, or a .pt2 program")
    if not exported and args.backend in (None, "torch") and args.precision not in (None, "fp32"):
        parser.error(f"--precision {args.precision} runs with --backend onnxruntime or openvino (the torch backend runs "
                     "the fp32 weights; TEST.AMP bf16 computes in bf16 with PyTorch)")
    if args.tracklets and (exported or args.backend not in (None, "torch") or args.skip_corrupt):
        parser.error("--tracklets pools frames with the checkpoint's own temporal module in PyTorch: leave out "
                     "--exported / --backend other than torch / --skip-corrupt")
    if args.precision == "int8" and not exported:
        parser.error("--precision int8 needs calibration crops: write the file with tools/export.py --precision int8 "
                     "--calibration CROPS and pass it with --weights (or --exported beside --run / --weights)")

    def work() -> None:
        import torch.distributed as dist

        from reid.engine.distributed import cleanup_distributed, init_distributed

        joined = not (dist.is_available() and dist.is_initialized())
        rank = init_distributed(args.device or "auto").rank  # a torchrun job: one shard per process
        try:
            predictor = predictor_from_args(args, batch_size=args.batch_size, num_workers=args.num_workers,
                                            backend=args.backend, exported=args.exported, precision=args.precision)
            skip = bool(args.skip_corrupt or predictor.cfg.DATASETS.SKIP_CORRUPT)
            if args.tracklets and rank != 0:
                return  # one process pools the tracklets (they are not sharded)
            extract_command(predictor, args.input, args.output, progress=not args.quiet and rank == 0,
                            skip_corrupt=skip, log=print if rank == 0 else (lambda _: None), tracklets=args.tracklets)
        finally:
            if joined:  # leave only a process group this call created
                cleanup_distributed()

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
