"""A training run as a Hugging Face model repository: weights, config, a machine-readable summary
and a model card, in one folder that ``--weights DIR`` (or ``--weights hf://ORG/NAME`` once pushed)
loads back with identical features.

The folder (written by reid.inference.publishing.publish_run; this module holds its parts):

* ``model.safetensors``: the inference model's state dict (no identity head: it is not part of the
  features), with the config in the file's ``cfg`` metadata, so the file alone is a model;
* ``config.yaml``: the run's config (the files it named cleared: they are the trainer's, not yours);
* ``reid_config.json``: what a program needs without reading the config: the format, input size,
  pixel normalisation, feature size, distance, architecture, and the files;
* ``README.md``: the model card. Its YAML header carries the Hub's metadata (library, tags, the
  dataset, a ``model-index`` with R-1 / mAP / mINP), its text the numbers, the commands that reproduce
  and evaluate them, and the training config;
* ``model.onnx`` when asked (tools/publish.py --onnx, through tools/export.py).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

#: The file that marks a folder as a published model of this toolkit.
MARKER = "reid_config.json"
WEIGHTS, CONFIG, CARD, ONNX = "model.safetensors", "config.yaml", "README.md", "model.onnx"
FORMAT = "circle-reid"


@dataclass(frozen=True)
class Scores:
    """A run's test numbers on one dataset (percent), from tools/test.py's metrics.json or the run's
    last evaluation record."""

    dataset: str
    rank1: float
    mAP: float
    mINP: Optional[float]
    source: str  # the file the numbers were read from


def published_folder(path: str) -> bool:
    """True when `path` is a folder written by :func:`write_model_repo`."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MARKER))


def folder_files(path: str) -> Dict[str, str]:
    """``{"weights": ..., "config": ...}`` absolute paths of a published folder (ValueError, one line,
    naming what is missing)."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{os.path.join(path, MARKER)} cannot be read ({e}); publish the run again.") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ValueError(f"{os.path.join(path, MARKER)} is not a {FORMAT} model summary (format "
                         f"{info.get('format') if isinstance(info, dict) else None!r}).")
    files = {}
    for key, default in (("weights", WEIGHTS), ("config", CONFIG)):
        name = info.get("files", {}).get(key, default)
        if not isinstance(name, str) or os.path.basename(name) != name:  # the summary may not point elsewhere
            raise ValueError(f"{os.path.join(path, MARKER)} names {key} {name!r}: only a file of the folder is read.")
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            raise ValueError(f"The published model {path} lacks its {key} file {name}; download or publish it again.")
        files[key] = full
    return files


def read_scores(run_dir: str) -> Optional[Scores]:
    """The run's test numbers: tools/test.py's ``test/metrics.json`` (the first dataset, plain
    ranking), else the last ``"eval"`` record of ``metrics.jsonl``; None when the run was never tested."""
    tested = os.path.join(run_dir, "test", "metrics.json")
    if os.path.isfile(tested):
        with open(tested, encoding="utf-8") as f:
            results = json.load(f).get("results", {})
        for dataset, kinds in results.items():
            plain = kinds.get("plain") if isinstance(kinds, dict) else None
            if isinstance(plain, dict) and "R-1" in plain and "mAP" in plain:
                return Scores(dataset, float(plain["R-1"]), float(plain["mAP"]), plain.get("mINP"), tested)
    records = os.path.join(run_dir, "metrics.jsonl")
    last: Optional[Scores] = None
    if os.path.isfile(records):
        with open(records, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill: the others still count
                if r.get("type") == "eval" and "R-1" in r and "mAP" in r:
                    last = Scores(str(r.get("dataset", "")), float(r["R-1"]), float(r["mAP"]), r.get("mINP"), records)
    return last


def summary(cfg: Any, feature_dim: int, has_onnx: bool) -> Dict[str, Any]:
    """The ``reid_config.json`` content for config `cfg`."""
    files = {"weights": WEIGHTS, "config": CONFIG}
    if has_onnx:
        files["onnx"] = ONNX
    return {
        "format": FORMAT, "input_size": [int(v) for v in cfg.INPUT.SIZE_TEST],
        "pixel_mean": [float(v) for v in cfg.MODEL.PIXEL_MEAN], "pixel_std": [float(v) for v in cfg.MODEL.PIXEL_STD],
        "pixel_range": "0-255, RGB", "feature_dim": int(feature_dim), "metric": str(cfg.TEST.METRIC),
        "architecture": {"meta": str(cfg.MODEL.META_ARCHITECTURE), "backbone": str(cfg.MODEL.BACKBONE.NAME),
                         "head": str(cfg.MODEL.HEADS.NAME)},
        "files": files,
    }


def model_card(name: str, info: Mapping[str, Any], scores: Optional[Scores], config_text: str,
               train_command: str) -> str:
    """README.md: the Hub's YAML metadata, then the numbers, the commands and the training config."""
    header: List[str] = ["---", "library_name: circle-reid", "pipeline_tag: image-feature-extraction", "tags:",
                         "- person-re-identification", "- re-identification", "- circle-reid",
                         f"- {info['architecture']['backbone']}"]
    if scores is not None:
        header += ["datasets:", f"- {scores.dataset}", "model-index:", f"- name: {name}", "  results:",
                   "  - task:", "      type: image-feature-extraction", "      name: Person re-identification",
                   "    dataset:", f"      name: {scores.dataset}", f"      type: {scores.dataset}", "    metrics:",
                   "    - type: rank-1", f"      value: {scores.rank1:.2f}", "    - type: mAP",
                   f"      value: {scores.mAP:.2f}"]
        if scores.mINP is not None:
            header += ["    - type: mINP", f"      value: {float(scores.mINP):.2f}"]
    header.append("---")
    size = info["input_size"]
    body = [f"# {name}", "",
            f"A person re-identification model trained with circle-reid: {info['architecture']['meta']} on "
            f"{info['architecture']['backbone']} with the {info['architecture']['head']} head. It maps a "
            f"{size[0]}x{size[1]} crop to a {info['feature_dim']}-d feature; compare features by "
            f"{info['metric']} distance.", ""]
    if scores is not None:
        mINP = f"{float(scores.mINP):.2f}" if scores.mINP is not None else "-"
        body += ["## Results", "", "| dataset | R-1 | mAP | mINP |", "|---|---|---|---|",
                 f"| {scores.dataset} | {scores.rank1:.2f} | {scores.mAP:.2f} | {mINP} |", "",
                 f"Single query, no re-ranking, read from `{os.path.basename(scores.source)}` of the training run.", ""]
    else:
        body += ["## Results", "", "The run was not evaluated before publishing.", ""]
    body += ["## Use", "", "```bash", f"python tools/extract.py --weights hf://{name} --input crops/ --output gallery.npz",
             f"python tools/test.py --weights hf://{name}", "```", "",
             "Or with a local copy of this repository: `--weights path/to/folder`.", "",
             "## Reproduce", "", "```bash", train_command, "```", "", "## Training config", "", "```yaml",
             config_text.rstrip(), "```", ""]
    return "\n".join(header + [""] + body)


__all__ = ["CARD", "CONFIG", "FORMAT", "MARKER", "ONNX", "Scores", "WEIGHTS", "folder_files", "model_card",
           "published_folder", "read_scores", "summary"]
