"""Ingest: what the other tools write, into a store, in batches of one transaction each.

    source = CropFolderSource("crops/", model)              # or TrackSource, GallerySource
    count = ingest(store, "demo", source, batch_size=200)   # an IngestCount of the whole input

A source (:class:`IngestSource`) first *plans* its input: one :class:`Planned` tracklet per person and
camera, with its source key, in arrival order (start time), every name, file and row checked, so a
bad input fails in one line before anything is written. Then, batch by batch, the tracklets this model
already holds in the store are skipped without reading a crop or running the model (a re-run after a
stop costs only what is left), the rest are *built* (crops read, features computed) and written by
:meth:`reid.store.store.Store.add_tracklets` in one transaction.

Idempotent and safe to stop: the same input gives the same keys, which the store keeps unique; a run
killed (even ``kill -9``) keeps every batch committed before it, whole, and nothing of the batch being
written (crop files are written before the rows that name them: at worst orphan files, harmless).

The sources: reid/store/ingest_tracks.py (tracker / linker results with their sequences or videos),
reid/store/ingest_images.py (a folder of crops, a saved gallery). Times are seconds since 1970 UTC.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from sqlalchemy import select

from .records import NewTracklet
from .schema import MAX_KEY, Model, Tracklet, TrackletFeature
from .store import IN_CHUNK, IngestCount, ModelInfo, Store
from .times import parse_time

#: Tracklets per transaction unless told: small enough that a stop loses little work, large enough that
#: the model runs on full batches and each commit's cost (a sync to disk) is spread over many rows.
DEFAULT_BATCH = 200
#: The false accept rate whose calibrated threshold a new model gets when none is asked for.
DEFAULT_FAR = 1e-2
#: A stored tracklet whose start differs from the input's by more than this is another input's.
CHANGED_SECONDS = 1e-3
#: ``progress(done, total)``: tracklets handled so far (written or skipped) of the input's total.
Progress = Callable[[int, int], None]



@dataclass(frozen=True)
class Planned:
    """One tracklet a source will build: its source key, when it starts, and what the source needs."""

    key: str
    start: float
    item: Any


class IngestSource:
    """Where tracklets come from (module docstring): :meth:`plan` is cheap and checks the whole input,
    :meth:`build` reads crops and computes features for the planned tracklets it is given."""

    #: Shown in the progress bar and the final line ("tracks", "crops", "gallery").
    kind = "input"
    _planned: Optional[List[Planned]] = None

    def plan(self) -> List[Planned]:
        """Every tracklet of the input, checked, in arrival order (what :meth:`planned` keeps)."""
        raise NotImplementedError

    def planned(self) -> List[Planned]:
        """:meth:`plan`, made once: a tool plans before it loads its model (a bad input fails at once),
        and :func:`ingest` then uses the same plan."""
        if self._planned is None:
            self._planned = self.plan()
        return self._planned

    def build(self, planned: Sequence[Planned]) -> List[NewTracklet]:
        """The planned tracklets with their sightings: crops read, features computed."""
        raise NotImplementedError


def source_key(*parts: Any) -> str:
    """The parts joined by ":" as a source key; a key longer than the store keeps (deep paths) ends in
    a hash of the whole instead, so it stays unique and the same for the same input."""
    key = ":".join(str(p) for p in parts)
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key[:MAX_KEY - 66] + "#" + digest + "#"


def stored_tracklets(store: Store, model: ModelInfo, keys: Sequence[str]) -> Dict[str, float]:
    """Key -> start time of the tracklets among `keys` that already hold the model's feature: nothing of
    them is left to write (their sightings' features were written in the same transaction as the
    tracklet's)."""
    found: Dict[str, float] = {}
    with store.session() as s:
        for start in range(0, len(keys), IN_CHUNK):
            part = list(keys[start:start + IN_CHUNK])
            found.update(s.execute(select(Tracklet.source, Tracklet.start)
                                   .join(TrackletFeature, TrackletFeature.tracklet_id == Tracklet.id)
                                   .where(TrackletFeature.model_id == model.id, Tracklet.source.in_(part))).all())
    return found


def in_batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """`items` in consecutive slices of `size`."""
    if size < 1:
        raise ValueError(f"batch size {size} must be >= 1.")
    for start in range(0, len(items), size):
        yield items[start:start + size]


def check_unique(planned: Sequence[Planned], what: str) -> None:
    """One line when two planned tracklets share a key (two inputs that would be one tracklet)."""
    seen = set()
    for p in planned:
        if p.key in seen:
            raise ValueError(f"{what}: two tracklets have the source key {p.key[:200]!r}; give each input its own "
                             "name (--source-name).")
        seen.add(p.key)


def ingest(store: Store, model_name: str, source: IngestSource, batch_size: int = DEFAULT_BATCH,
           progress: Optional[Progress] = None, link: bool = True) -> IngestCount:
    """Write what `source` holds into `store` under the model (registered before), `batch_size` tracklets
    per transaction (module docstring); returns the counts of the whole input (``skipped_tracklets``:
    those the store already held with this model's features, or held and given only new features)."""
    model = store.model(model_name)
    planned = source.planned()
    total = IngestCount()
    done = 0
    if progress is not None:
        progress(0, len(planned))
    for batch in in_batches(planned, batch_size):
        known = stored_tracklets(store, model, [p.key for p in batch])
        todo = [p for p in batch if p.key not in known]
        count = store.add_tracklets(model.name, source.build(todo), link=link) if todo else IngestCount()
        count.skipped_tracklets += len(batch) - len(todo)
        # a key stored with another start: not this input again but another under the same names (a tracker
        # run again over the same sequences); the stored tracklet is kept, and the caller says so
        changed = [p.key for p in batch if p.key in known and abs(known[p.key] - p.start) > CHANGED_SECONDS]
        count.changed_tracklets += len(changed)
        count.changed_example = count.changed_example or (changed[0] if changed else "")
        count.tracklet_ids = []  # ids of a whole input are not needed, and would grow with it
        total.add(count)
        done += len(batch)
        if progress is not None:
            progress(done, len(planned))
    return total


def model_threshold(model: Any, far: float, threshold: Optional[float] = None) -> Tuple[Optional[float], str]:
    """``(cosine similarity, where it is from)`` to record for an appearance model
    (:class:`reid.tracking.appearance.AppearanceModel`): `threshold` when given, else the model's threshold
    calibrated at false accept rate `far` (thresholds.json beside its checkpoint, or the one its exported
    file carries), else ``(None, why)``: the store then links nothing until a threshold is recorded."""
    if threshold is not None:
        return float(threshold), "given (--threshold)"
    if getattr(model, "predictor", None) is None:
        return None, "the model has no calibrated threshold"
    from reid.inference.decision_thresholds import model_similarity

    try:
        similarity, path, description = model_similarity(model.predictor, far, other="pass --threshold S")
    except ValueError as e:  # no calibration: stored, not linked (the reason is shown)
        return None, str(e)
    return float(similarity), f"{path}; {description}"


def recorded_threshold(store: Store, name: str) -> Optional[Tuple[float, str]]:
    """``(threshold, where it is from)`` the store records for the model `name`, or None (no such model,
    or no threshold). Read from the database, not the store's short-lived list of models: another
    process (tools/serve.py --calibrate) may have just recorded it."""
    with store.session() as s:
        row = s.execute(select(Model.threshold, Model.threshold_source).where(Model.name == name)).first()
    if row is None or row[0] is None:
        return None
    return float(row[0]), row[1] or ""


def register_appearance_model(store: Store, name: str, model: Any, far: Optional[float] = None,
                              threshold: Optional[float] = None) -> Tuple[ModelInfo, str]:
    """Register `model` (an AppearanceModel) under `name` with its weights identity and threshold
    (:func:`model_threshold`, at `far` or DEFAULT_FAR); returns the store's record and where its threshold
    came from. A threshold the store already records for the model is kept unless `threshold` or `far`
    is given: it may be one calibrated on reviewed identities (tools/serve.py --calibrate), which a
    routine ingest at the default false accept rate must not undo."""
    if threshold is None and far is None:
        if recorded_threshold(store, name) is not None:
            # registered without a threshold (the weights are still checked): the recorded one stays
            info = store.register_model(name, dict(model.identity), int(model.feature_dim))
            return info, info.threshold_source
    similarity, why = model_threshold(model, DEFAULT_FAR if far is None else far, threshold)
    info = store.register_model(name, dict(model.identity), int(model.feature_dim), threshold=similarity,
                                threshold_source=why if similarity is not None else "")
    return info, why


__all__ = ["DEFAULT_BATCH", "DEFAULT_FAR", "IngestSource", "Planned", "Progress", "check_unique", "in_batches",
           "ingest", "model_threshold", "parse_time", "recorded_threshold", "register_appearance_model", "source_key",
           "stored_tracklets"]
