"""Publish a training run as a Hugging Face model repository (tools/publish.py; the folder's parts
are described in reid/export/model_repo.py), and push it with huggingface_hub."""
from __future__ import annotations

import json
import os
from typing import Callable, Optional

from reid.config import FILE_KEYS
from reid.export.model_repo import CARD, CONFIG, MARKER, WEIGHTS, model_card, read_scores, summary
from reid.utils.file_io import atomic_write_text, build_folder_atomically, check_output_folder

from .loading import build_inference_model, config_from_run

Log = Callable[[str], None]


def _clear_file_keys(cfg) -> None:
    """Empty the keys that name the trainer's files: a published config names none."""
    for key in FILE_KEYS:
        node = cfg
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = type(node[leaf])()


def publish_run(run_dir: str, output: str, name: str, onnx: Optional[Callable[[str], None]] = None,
                log: Log = print) -> str:
    """Write `run_dir`'s model as a model repository in `output` (created whole, or not at all; an
    existing non-empty folder is refused). `name` is the repository's name (``org/model``) in the card;
    `onnx(path)` writes the ONNX export when given. Returns `output`."""
    cfg, weights = config_from_run(run_dir)
    model = build_inference_model(cfg, weights, device="cpu")
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    feature_dim = int(getattr(model, "feature_dim", 0) or 0)
    published = cfg.clone()
    published.defrost()
    _clear_file_keys(published)
    published.MODEL.DEVICE = "cpu" if str(cfg.MODEL.DEVICE).startswith("cuda") else str(cfg.MODEL.DEVICE)
    config_text = published.dump()
    scores = read_scores(run_dir)
    check_output_folder(output, "--output")
    if os.path.isdir(output) and os.listdir(output):
        raise ValueError(f"--output {output!r} is not empty: name a new folder (a published model is written whole "
                         "into a folder of its own).")

    def build(folder: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(folder)
        save_file(state, os.path.join(folder, WEIGHTS), metadata={"cfg": config_text, "format": "circle-reid"})
        atomic_write_text(os.path.join(folder, CONFIG), config_text)
        if onnx is not None:
            onnx(os.path.join(folder, "model.onnx"))
        info = summary(published, feature_dim, onnx is not None)
        atomic_write_text(os.path.join(folder, MARKER), json.dumps(info, indent=2) + "\n")
        command = f"python tools/train.py --config-file {CONFIG} OUTPUT_DIR output/{name.rsplit('/', 1)[-1]}"
        atomic_write_text(os.path.join(folder, CARD), model_card(name, info, scores, config_text, command))

    build_folder_atomically(output, build, MARKER)
    shown = f"R-1 {scores.rank1:.2f} / mAP {scores.mAP:.2f} on {scores.dataset}" if scores else "no test numbers"
    log(f"Published {run_dir} ({os.path.basename(weights)}, {shown}) as {output}")
    return output


def push_folder(folder: str, repo_id: str, private: bool = False, log: Log = print) -> str:
    """Upload a published folder to the Hugging Face Hub as model repository `repo_id` (created when
    missing); returns the repository's URL. Needs huggingface_hub and a token (`hf auth login` or HF_TOKEN)."""
    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise ImportError("--push uploads with huggingface_hub: pip install huggingface_hub.") from None
    api = HfApi()
    url = api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="model",
                      commit_message="Publish with circle-reid tools/publish.py")
    log(f"Pushed {folder} to {url}")
    return str(url)


__all__ = ["publish_run", "push_folder"]
