"""What tools/export.py, tools/extract.py and tools/search.py do, as plain functions.

The tools only parse arguments; everything here takes ordinary values, prints through
`log`, and raises exceptions whose messages name the file or value at fault.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

from reid.data.download import DownloadUnavailableError
from reid.engine.checkpoint import CheckpointError
from reid.modeling.backbones.resnet import PretrainedWeightsError
from reid.utils.file_io import atomic_write_text

from .draw import save_matches_picture
from .export import DEFAULT_OPSET, ExportCheck, compare_with_export, export_format, export_model
from .gallery import Gallery, gallery_format, load_gallery, require_safetensors, save_gallery
from .predictor import Predictor, load_predictor
from .search import BACKENDS, build_index
from .sources import collect_entries, collect_images

Log = Callable[[str], None]


class ExportMismatchError(RuntimeError):
    """An exported model's outputs differ from the PyTorch model's by more than the tolerance."""


# Errors that come from what a user typed or pointed at; the tools print their message
# (which names the file or value) instead of a traceback.
# What a user's input or environment causes (an unknown name is an UnknownNameError, a
# ValueError); anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, OSError, ImportError, CheckpointError, ExportMismatchError, PretrainedWeightsError,
               DownloadUnavailableError)


def run_user_command(command: Callable[[], Any]) -> int:
    """Run a tool's work; a user mistake (USER_ERRORS) prints ``error: ...`` and gives exit code 1."""
    try:
        command()
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


class ConsoleProgress:
    """Progress of a long extraction on stderr.

    On a terminal, one line rewritten in place; in a log file, a line every 10% so the file
    stays short but still shows that the job is alive.
    """

    def __init__(self, desc: str, stream: Optional[TextIO] = None) -> None:
        self.desc = desc
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._next_pct = 10

    def __call__(self, done: int, total: int) -> None:
        pct = 100 * done // max(total, 1)
        if self.tty:
            end = "\n" if done >= total else ""
            self.stream.write(f"\r{self.desc}: {done}/{total} images ({pct}%){end}")
        elif pct >= self._next_pct or done >= total:
            self.stream.write(f"{self.desc}: {done}/{total} images ({pct}%)\n")
            self._next_pct = (pct // 10 + 1) * 10
        self.stream.flush()


# ---------------------------------------------------------------------------- arguments
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The ways to name a trained model, shared by the three tools."""
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


def model_meta(predictor: Predictor) -> Dict[str, str]:
    """Strings that identify how features were made; stored with a gallery."""
    cfg = predictor.cfg
    h, w = predictor.input_size
    return {
        "weights": os.path.abspath(cfg.MODEL.WEIGHTS) if cfg.MODEL.WEIGHTS else "",
        "meta_architecture": str(cfg.MODEL.META_ARCHITECTURE),
        "backbone": str(cfg.MODEL.BACKBONE.NAME),
        "input_size": f"{h}x{w}",
        "flip": str(predictor.flip),
        "feature_dim": str(predictor.feature_dim),
    }


# ---------------------------------------------------------------------------- export
def export_command(predictor: Predictor, outputs: Sequence[str], input_size: Optional[Sequence[int]] = None,
                   opset: int = DEFAULT_OPSET, check: bool = True, tol: float = 1e-4,
                   log: Log = print) -> List[Optional[ExportCheck]]:
    """Export the predictor's model to each of `outputs` (format from the extension) and check it.

    Each check runs the exported file and PyTorch on the same random inputs (batch sizes 1
    and 3) and logs the largest absolute difference; an ONNX check without onnxruntime is
    skipped with a note (None in the result). Raises ExportMismatchError when a difference
    exceeds `tol`, after every file has been written and checked.
    """
    if not outputs:
        raise ValueError("No output files given; pass e.g. --output model.onnx model.ts.")
    for out in outputs:
        export_format(out)  # fail on a bad extension before any slow work
    size = list(input_size) if input_size else list(predictor.input_size)
    checks: List[Optional[ExportCheck]] = []
    for out in outputs:
        export_model(predictor.model, out, size, opset=opset)
        log(f"wrote {export_format(out)} model {out} (input float32 [batch, 3, {size[0]}, {size[1]}] "
            f"RGB 0-255, output L2-normalised [batch, {predictor.feature_dim}])")
        if not check:
            checks.append(None)
            continue
        try:
            result = compare_with_export(predictor.model, out, size)
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


# ---------------------------------------------------------------------------- extract
def extract_command(predictor: Predictor, sources: Sequence[str], output: str, progress: bool = True,
                    log: Log = print) -> Gallery:
    """Features of every image in `sources` (folders, list files, images) saved to `output`.

    Paths are stored absolute, so a search run from another folder still finds the images.
    When every image comes from ``path pid camid`` list lines, the pids and camids are saved
    too (a search then reports them); when only some are labelled, none are saved and the
    log says why.
    """
    fmt = gallery_format(output)  # a bad extension fails now, not after an hour of extraction
    if fmt == "safetensors":
        require_safetensors()
    entries = collect_entries(sources)
    paths = [os.path.abspath(p) for p in entries.paths]
    pids, camids = entries.label_arrays()
    labelled = entries.num_labelled
    if 0 < labelled < len(paths):
        log(f"note: {labelled} of {len(paths)} images have 'path pid camid' labels; labels are saved only "
            "when every image has one, so this gallery has none")
    log(f"extracting features of {len(paths)} images (batch {predictor.batch_size}, "
        f"device {predictor.device}, flip {predictor.flip})")
    feats = predictor.extract_paths(paths, progress=ConsoleProgress("extract") if progress else None)
    gallery = Gallery(feats=feats, paths=paths, pids=pids, camids=camids, meta=model_meta(predictor))
    save_gallery(gallery, output)
    what = "paths, pids and camids" if pids is not None else "paths"
    log(f"saved {len(gallery)} features ({gallery.dim}-d) with their {what} to {output}")
    return gallery


# ---------------------------------------------------------------------------- search
def _check_gallery_fits(predictor: Predictor, gallery: Gallery, gallery_path: str, log: Log) -> None:
    if predictor.feature_dim != gallery.dim:
        made_by = gallery.meta.get("weights") or "an unknown model"
        raise ValueError(
            f"Gallery {gallery_path!r} holds {gallery.dim}-d features (made by {made_by}) but the "
            f"query model gives {predictor.feature_dim}-d features. Use the model that built the "
            "gallery, or rebuild the gallery with tools/extract.py and this model."
        )
    mine = model_meta(predictor)
    for key in ("weights", "input_size", "flip"):
        theirs = gallery.meta.get(key)
        if theirs is not None and theirs != mine[key]:
            log(f"warning: the gallery was made with {key} {theirs!r}, the queries use {mine[key]!r}; "
                "scores are only meaningful when both come from the same model and settings.")


def search_command(predictor: Predictor, gallery_path: str, queries: Sequence[str], k: int = 10,
                   backend: str = "exact", draw_dir: Optional[str] = None, json_path: Optional[str] = None,
                   tile_height: int = 128, log: Log = print) -> List[Dict[str, Any]]:
    """Top-`k` gallery matches of every query image: printed, and optionally drawn / saved.

    Returns one dict per query: ``{"query": path, "matches": [{"rank", "score", "path",
    "index", ("pid", "camid")}...]}``.
    """
    if str(backend).lower() not in BACKENDS:
        raise ValueError(f"Unknown search backend {backend!r}; use one of: {', '.join(BACKENDS)}.")
    gallery = load_gallery(gallery_path)
    _check_gallery_fits(predictor, gallery, gallery_path, log)
    index = build_index(gallery.feats, backend=backend, device=predictor.device)
    q_paths = collect_images(queries)
    q_feats = predictor.extract_paths(q_paths)
    result = index.search(q_feats, k)
    records: List[Dict[str, Any]] = []
    for qi, q_path in enumerate(q_paths):
        matches = []
        for rank, (gi, score) in enumerate(zip(result.indices[qi], result.scores[qi]), start=1):
            m: Dict[str, Any] = {"rank": rank, "score": float(score), "path": gallery.paths[gi], "index": int(gi)}
            if gallery.pids is not None:
                m["pid"] = int(gallery.pids[gi])
            if gallery.camids is not None:
                m["camid"] = int(gallery.camids[gi])
            matches.append(m)
        records.append({"query": q_path, "matches": matches})
        log(f"query {qi + 1}/{len(q_paths)}: {q_path}")
        for m in matches:
            extra = "".join(f"  {key} {m[key]}" for key in ("pid", "camid") if key in m)
            log(f"  {m['rank']:>3}  {m['score']:.4f}  {m['path']}{extra}")
        if draw_dir:
            stem = os.path.splitext(os.path.basename(q_path))[0]
            picture = save_matches_picture(
                os.path.join(draw_dir, f"{qi:04d}_{stem}.jpg"), q_path,
                [m["path"] for m in matches], [m["score"] for m in matches], tile_height=tile_height,
                caption=q_path,
            )
            log(f"  picture: {picture}")
    if json_path:
        atomic_write_text(json_path, json.dumps(records, indent=1))
        log(f"saved the matches of {len(records)} queries to {json_path}")
    return records


__all__ = [
    "ConsoleProgress",
    "ExportMismatchError",
    "USER_ERRORS",
    "run_user_command",
    "add_model_arguments",
    "export_command",
    "extract_command",
    "model_meta",
    "predictor_from_args",
    "search_command",
]
