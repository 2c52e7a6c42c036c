"""What an exported model costs in accuracy: the exported file and the PyTorch fp32 model on the same
labelled query/gallery images (``tools/export.py --check-on``).

Both see the same pixel batches (the test transform of the model's config), so every difference
in R-1, mAP and the features comes from the file: its precision (fp16, int8) or its runtime. The
features are compared image by image (cosine: mean and minimum), the rankings by the Market-1501
protocol (:func:`reid.evaluation.rank.evaluate_rank_from_features`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import torch

from reid.evaluation.rank import evaluate_rank_from_features

# (pixels float32 [B, 3, H, W] 0-255, camera ids int64 [B] or None) -> features [B, D]
FeatureFn = Callable[[torch.Tensor, Optional[torch.Tensor]], np.ndarray]


def _scores(feats: np.ndarray, pids: np.ndarray, camids: np.ndarray, num_query: int) -> Dict[str, float]:
    q, g = slice(0, num_query), slice(num_query, None)
    res = evaluate_rank_from_features(feats[q], feats[g], pids[q], pids[g], camids[q], camids[g], max_rank=1)
    return {"R-1": round(100.0 * float(res["cmc"][0]), 4), "mAP": round(100.0 * float(res["mAP"]), 4)}


@dataclass(frozen=True)
class AccuracyCheck:
    """R-1 and mAP (percent) of the PyTorch fp32 model (`reference`) and of the exported file
    (`exported`) on one query/gallery set, and the cosine of their features image by image."""

    dataset: str
    num_query: int
    num_gallery: int
    reference: Dict[str, float]
    exported: Dict[str, float]
    cosine_mean: float
    cosine_min: float

    @property
    def map_drop(self) -> float:
        """mAP points lost by the exported file (negative: it scored higher)."""
        return self.reference["mAP"] - self.exported["mAP"]

    def record(self) -> Dict[str, Any]:
        """JSON-able, for the exported file's metadata and the report."""
        return {"dataset": self.dataset, "query": self.num_query, "gallery": self.num_gallery,
                "pytorch_fp32": self.reference, "exported": self.exported, "map_drop": round(self.map_drop, 4),
                "cosine_to_fp32": {"mean": round(self.cosine_mean, 6), "min": round(self.cosine_min, 6)}}

    def __str__(self) -> str:
        r, e = self.reference, self.exported
        return (f"{self.dataset} ({self.num_query} query / {self.num_gallery} gallery): PyTorch fp32 R-1 {r['R-1']:.2f} "
                f"mAP {r['mAP']:.2f}; exported R-1 {e['R-1']:.2f} mAP {e['mAP']:.2f} (mAP drop {self.map_drop:+.2f}); "
                f"feature cosine mean {self.cosine_mean:.4f}, min {self.cosine_min:.4f}")


def compare_accuracy(reference: FeatureFn, exported: FeatureFn, batches: Iterable[Dict[str, Any]], num_query: int,
                     dataset: str = "", uses_camids: bool = False) -> AccuracyCheck:
    """Run `reference` and `exported` on every batch of `batches` (the test loader's dicts: ``images``,
    ``targets``, ``camids``; query images first, `num_query` of them) and score both.

    Raises ValueError when the set has no identity that a query shares with the gallery (nothing to
    rank: e.g. folders of images without identity sub-folders).
    """
    ref, got, pids, cams = [], [], [], []
    for batch in batches:
        images = batch["images"].float()
        camids = torch.as_tensor(batch["camids"], dtype=torch.int64)
        ids = camids if uses_camids else None
        ref.append(np.asarray(reference(images, ids), dtype=np.float32))
        got.append(np.asarray(exported(images, ids), dtype=np.float32))
        pids.append(np.asarray(batch["targets"], dtype=np.int64))
        cams.append(camids.numpy())
    if not ref:
        raise ValueError(f"--check-on {dataset}: no images to check on.")
    a, b = np.concatenate(ref), np.concatenate(got)
    p, c = np.concatenate(pids), np.concatenate(cams)
    if not np.isin(p[:num_query], p[num_query:]).any():
        raise ValueError(f"--check-on {dataset}: no query identity appears in the gallery, so nothing can be ranked; "
                         "give labelled images (identity sub-folders, or list files of 'path identity [camid]').")
    cos = (a * b).sum(axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return AccuracyCheck(dataset, num_query, len(p) - num_query, _scores(a, p, c, num_query), _scores(b, p, c, num_query),
                         float(cos.mean()), float(cos.min()))


def check_map_drop(check: AccuracyCheck, max_drop: float, path: str, force: bool) -> Optional[str]:
    """None when `check` is within `max_drop` mAP points; otherwise the one line that says so
    (an error unless `force`, then a warning)."""
    if check.map_drop <= max_drop:
        return None
    what = "written anyway (--force)" if force else "not written"
    return (f"{path}: mAP drops by {check.map_drop:.2f} points on {check.dataset} ({check.reference['mAP']:.2f} -> "
            f"{check.exported['mAP']:.2f}), more than --max-map-drop {max_drop:g}; {what}. Calibrate on more, real "
            "crops of your cameras (--calibration), try --calibration-method percentile, or use fp16.")


__all__: List[str] = ["AccuracyCheck", "FeatureFn", "check_map_drop", "compare_accuracy"]
