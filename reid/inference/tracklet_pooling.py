"""A tracklet's crops pooled by the model's own temporal aggregation (``MODEL.VIDEO.TEMPORAL``).

The tracking tools pool the crops of a tracklet into one feature. For an image model they weigh
each crop's final feature by a hand-set quality (reid/tracking/tracklets.py); a video model was
trained to pool its frames itself: each crop's feature before the neck, pooled by the model's
temporal module (avg, max or learned attention), then the neck, as at its training and test
(reid/modeling/temporal.py, reid/evaluation/tracklet_extract.py). :class:`FramePooling` gives that
second path for a PyTorch predictor of a model with frame pooling (the Baseline); an exported file
has no separate frame encoder, so it pools with the hand-set weights.
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from reid.evaluation.extract import autocast_context, check_feature_batch
from reid.evaluation.tracklet_extract import check_video_model, pad_runs


class FramePooling:
    """Frame features and their pooling by the temporal module of `predictor`'s PyTorch model.

    Raises ValueError (one line) when the predictor runs an exported file or a model without frame
    pooling.
    """

    def __init__(self, predictor: Any) -> None:
        if getattr(predictor, "model", None) is None or getattr(predictor, "_runtime", None) is not None:
            raise ValueError("pooling crops by the model's own temporal aggregation needs the checkpoint in PyTorch "
                             "(an exported file has no separate frame encoder); use --backend torch or the hand-set "
                             "pooling.")
        self.predictor = predictor
        self.inner = check_video_model(predictor.model)
        self.method = str(predictor.cfg.MODEL.VIDEO.TEMPORAL)

    @torch.inference_mode()
    def frame_features(self, crops: List[np.ndarray]) -> np.ndarray:
        """Features before the neck of RGB uint8 crops (float32, not normalised): ``[N, D]``, or with
        the predictor's flip ``[N, 2D]``, each crop's then its mirror's (what :meth:`pool` takes)."""
        p = self.predictor
        out = []
        for start in range(0, len(crops), p.batch_size):
            batch = torch.stack([p.transform(c) for c in crops[start:start + p.batch_size]]).to(p.device)
            with autocast_context(p.device, p.amp):
                f = self.inner.frame_features(batch).float()
                if p.flip:  # the width is the last axis
                    f = torch.cat([f, self.inner.frame_features(torch.flip(batch, dims=[-1])).float()], dim=1)
            out.append(f.cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, 0), np.float32)

    @torch.inference_mode()
    def summarize(self, feats: np.ndarray, group: np.ndarray) -> List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Chunk summaries of frame features `feats` (:meth:`frame_features`) whose tracklet is `group`:
        per pass (the crops', then with flip the mirrors'), ``(values [S, D], log-masses [S], tracklet
        of each chunk [S])``; :meth:`merge` turns the summaries of any number of calls into features."""
        p = self.predictor
        group = np.asarray(group, np.int64)
        order = np.argsort(group, kind="stable")
        feats = torch.from_numpy(np.ascontiguousarray(feats[order])).to(p.device)
        owner = torch.from_numpy(group[order]).to(p.device)
        parts = []
        for part in feats.chunk(2, dim=1) if p.flip else (feats,):
            x, mask, rows = pad_runs(part.contiguous(), owner)
            with autocast_context(p.device, p.amp):
                summary = self.inner.temporal.summarize(x, mask)
            parts.append((summary.value.float(), summary.log_mass.float(), rows))
        return parts

    @torch.inference_mode()
    def merge(self, summaries: Sequence[List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]],
              num: int) -> np.ndarray:
        """L2-normalised ``[num, feature_dim]`` from the :meth:`summarize` results of the frames of
        `num` tracklets: each tracklet's chunks merged (exactly its frames pooled at once), then the
        neck; with flip, the mean of the crops' and the mirrors' (as the evaluator's flip:
        reid/evaluation/tracklet_extract.py). A tracklet without any frame gets zeros."""
        from reid.modeling.temporal import ChunkSummary

        p = self.predictor
        out = np.zeros((num, p.feature_dim), np.float32)
        summaries = [s for s in summaries if len(s) and len(s[0][2])]
        if not summaries:
            return out
        pooled = None
        for k in range(len(summaries[0])):
            values, masses, owners = (torch.cat(c) for c in zip(*(s[k] for s in summaries)))
            present = torch.unique(owners)
            merged = self.inner.temporal.merge_grouped(ChunkSummary(values, masses), owners, num)[present]
            with autocast_context(p.device, p.amp):
                f = self.inner.embed_pooled(merged).float()
            pooled = f if pooled is None else (pooled + f) / 2
        check_feature_batch(pooled, amp=p.amp)
        out[present.cpu().numpy()] = F.normalize(pooled, dim=1).cpu().numpy()
        return out

    def pool(self, feats: np.ndarray, group: np.ndarray, num: int) -> np.ndarray:
        """L2-normalised ``[num, feature_dim]``: row ``t`` pools the frame features of `feats` whose
        `group` is ``t`` (the model's temporal module, then its neck; see :meth:`merge`)."""
        return self.merge([self.summarize(feats, group)] if len(group) else [], num)


def find_tracklets(sources: Sequence[str]) -> List[Tuple[str, List[str]]]:
    """``(folder, frame paths)`` of every tracklet in `sources`: each folder that directly holds image
    files is one tracklet (its frames in natural order: ``f9`` before ``f10``); a source folder is
    searched recursively, in sorted order. One-line ValueError naming a source that is not a folder
    or that holds no image."""
    from reid.data.video.tracklets import list_frames

    found: List[Tuple[str, List[str]]] = []
    for source in sources:
        if not os.path.isdir(source):
            raise ValueError(f"{source}: not a folder; with --tracklets every input is a folder whose sub-folders "
                             "(or itself) hold one tracklet's frames each.")
        before = len(found)
        for folder, dirs, _ in os.walk(source):
            dirs.sort()
            frames = list_frames(folder)
            if frames:
                found.append((os.path.abspath(folder), frames))
        if len(found) == before:
            raise ValueError(f"{source}: no image in it or its sub-folders; a tracklet is a folder of its frames.")
    return found


def tracklet_folder_features(predictor: Any, tracklets: Sequence[Tuple[str, List[str]]],
                             progress: Optional[Callable[[int, int], None]] = None,
                             frames_per_step: int = 512) -> np.ndarray:
    """L2-normalised ``[T, feature_dim]``: each tracklet's frames pooled by the model's own temporal
    pooling (:class:`FramePooling`), at most `frames_per_step` frames in memory at a time whatever a
    tracklet's length (its pieces are pooled and merged, exactly as pooling it at once). A frame that
    cannot be read stops with an error naming it. `progress(done, total)` counts frames."""
    from reid.data.image_io import read_image

    pooling = FramePooling(predictor)
    frames = [(path, t) for t, (_, paths) in enumerate(tracklets) for path in paths]
    summaries = []
    for start in range(0, len(frames), frames_per_step):
        part = frames[start:start + frames_per_step]
        crops = [read_image(path) for path, _ in part]
        summaries.append(pooling.summarize(pooling.frame_features(crops), np.array([t for _, t in part], np.int64)))
        if progress is not None:
            progress(start + len(part), len(frames))
    return pooling.merge(summaries, len(tracklets))


def frame_pooling_of(predictor: Any) -> "FramePooling | None":
    """:class:`FramePooling` of `predictor`, or None where it cannot pool frames (an exported file,
    a model without a temporal module such as MGN)."""
    try:
        return FramePooling(predictor)
    except ValueError:
        return None


__all__ = ["FramePooling", "find_tracklets", "frame_pooling_of", "tracklet_folder_features"]
