"""The sightings store: a database (the truth), the crop files it owns, and each model's vectors.

    store = Store("site-store")                       # SQLite in site-store/store.db
    store = Store("site-store", "postgresql+psycopg://reid@127.0.0.1:5432/reid")
    store.register_model("demo", identity, dim=512, threshold=0.62)
    store.add_tracklets("demo", tracklets)            # one transaction; idempotent
    store.search("demo", vector, k=10, cameras=[2, 3], start=t0, end=t1)

The folder holds ``store.json`` (which database it belongs to), ``crops/`` and ``vectors/``. A
folder and a database are paired when the store is made: opening a folder with another store's
database is refused (its crops would not be the database's).
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from reid.utils.file_io import atomic_write_text

from .crops import CropFiles
from .database import WRITE_LOCK, meta_value, open_database, shown
from .online_linking import LinkRules, link_new_tracklets
from .records import NewTracklet, NotInStore
from .schema import (MAX_NAME, Camera, Feature, Identity, Link, Meta, Model, Sighting, Tracklet,
                     TrackletFeature)
from .vectors import ModelVectors, model_vectors_info, vector_bytes

STORE_FILE = "store.json"
#: Seconds a server reuses the list of models before it reads it again (Store(models_seconds=...)).
MODELS_SECONDS = 1.0
#: Rows per IN (...) query (SQLite's bound-parameter limit is far above; keeps statements small).
IN_CHUNK = 500


@dataclass
class ModelInfo:
    """A model the store keeps features of."""

    id: int
    name: str
    dim: int
    identity: Dict[str, Any]
    threshold: Optional[float]  # cosine similarity: at or above, one person
    threshold_source: str


@dataclass
class IngestCount:
    """What one :meth:`Store.add_tracklets` call wrote."""

    tracklets: int = 0
    sightings: int = 0
    features: int = 0
    skipped_tracklets: int = 0
    tracklet_ids: List[int] = field(default_factory=list)
    linked: int = 0  # new tracklets that joined an existing identity
    changed_tracklets: int = 0  # skipped, though stored with another start (another input under the same keys)
    changed_example: str = ""  # the key of one of them

    def add(self, other: "IngestCount") -> None:
        for name in ("tracklets", "sightings", "features", "skipped_tracklets", "linked", "changed_tracklets"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.tracklet_ids += other.tracklet_ids
        self.changed_example = self.changed_example or other.changed_example


def _chunks(values: Sequence[Any], size: int = IN_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


class Store:
    """A store of sightings (module docstring)."""

    def __init__(self, folder: str, database: Optional[str] = None, backend: str = "exact",
                 rules: Optional[LinkRules] = None, models_seconds: float = 0.0, background_index: bool = False) -> None:
        rules = (rules or LinkRules()).check()  # a rule that cannot work is one line, not links silently never made
        self.folder = os.path.abspath(folder)
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise ValueError(f"store folder {self.folder} is a file; give a folder.")
        os.makedirs(self.folder, exist_ok=True)
        self.database = database or f"sqlite:///{os.path.join(self.folder, 'store.db')}"
        self.engine = open_database(self.database)
        try:
            self._pair_folder()
        except BaseException:  # refused: no connection left open
            self.engine.dispose()
            raise
        self.crops = CropFiles(os.path.join(self.folder, "crops"))
        self.backend = backend
        self.rules = rules
        self._vectors: Dict[int, ModelVectors] = {}
        self._models: Optional[tuple] = None  # (time.monotonic(), [ModelInfo]) of the last read
        self.models_seconds = models_seconds  # reuse the list of models this long (a server: MODELS_SECONDS)
        self.background_index = background_index  # a server: new rows join faiss indexes off the request path
        self._lock = threading.Lock()

    def _pair_folder(self) -> None:
        path = os.path.join(self.folder, STORE_FILE)
        store_id = meta_value(self.engine, "store_id")
        if not store_id:
            with self.session() as s:
                store_id = s.scalar(select(Meta.value).where(Meta.key == "store_id"))
                if not store_id:
                    store_id = uuid.uuid4().hex
                    s.add(Meta(key="store_id", value=store_id))
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                try:
                    recorded = json.load(f).get("store_id")
                except (ValueError, AttributeError):
                    raise ValueError(f"{path} is damaged; it must be the store.json this toolkit wrote.") from None
            if recorded != store_id:
                raise ValueError(f"store folder {self.folder} belongs to another database than "
                                 f"{shown(self.database)} (store ids {recorded} and {store_id}); give the folder "
                                 "and the database of one store.")
        else:
            with Session(self.engine) as s:
                held = int(s.scalar(select(func.count(Sighting.id))) or 0)
            if held:  # its crops are in the folder that first wrote it; a new folder would hold none of them
                raise ValueError(f"database {shown(self.database)} already holds a store ({held} sightings) whose crops "
                                 f"are in another folder than {self.folder}; give that folder (every writer and the "
                                 "server share one).")
            atomic_write_text(path, json.dumps({"store_id": store_id, "format_version": 1}, indent=1))

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed when the block ends, rolled back on an exception."""
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def writing(self) -> Iterator[Session]:
        """A session in one transaction that first takes the store's write lock (it updates one row of
        ``store_meta``): writers that read, decide and write (ingest with linking, review decisions) take
        turns, in one process or several, on SQLite and PostgreSQL, so none decides on a state another is
        changing (two merges crossing, two ingests of one tracklet)."""
        with self.session() as s:
            s.execute(update(Meta).where(Meta.key == WRITE_LOCK).values(value=Meta.value))
            yield s

    # -- models ------------------------------------------------------------------------------
    def register_model(self, name: str, identity: Dict[str, Any], dim: int, threshold: Optional[float] = None,
                       threshold_source: str = "") -> ModelInfo:
        """The model `name`, added when new. The same name with other weights is refused (its
        features would be another space); a threshold given updates the recorded one."""
        if not name or len(name) > MAX_NAME:
            raise ValueError(f"model name {name[:80]!r} must have 1..{MAX_NAME} characters.")
        if threshold is not None and not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} must be a cosine similarity in [-1, 1].")
        text = json.dumps(identity, sort_keys=True, default=str)
        with self.session() as s:
            row = s.scalar(select(Model).where(Model.name == name))
            if row is None:
                row = Model(name=name, identity=text, dim=int(dim), threshold=threshold,
                            threshold_source=threshold_source, created=time.time())
                s.add(row)
                s.flush()
            else:
                if _weights(json.loads(row.identity)) != _weights(identity) or row.dim != int(dim):
                    raise ValueError(f"model {name!r} in this store has other weights ({_weights(json.loads(row.identity))}"
                                     f", {row.dim}-d); give these weights another --model-name.")
                if threshold is not None:
                    row.threshold, row.threshold_source = float(threshold), threshold_source
            info = _model_info(row)
        self._models = None  # committed: the next read sees it
        return info

    def model(self, name: Optional[str] = None) -> ModelInfo:
        """The model `name` (None: the only one); one line listing the models when it is not there."""
        rows = self.models()
        if name is None and len(rows) == 1:
            return rows[0]
        for r in rows:
            if r.name == name:
                return r
        listed = ", ".join(r.name for r in rows) or "none yet: ingest with --model-name"
        raise NotInStore(f"model {name!r} is not in this store (its models: {listed}).")

    def models(self) -> List[ModelInfo]:
        """Every model of the store. With `models_seconds` (a server: a search asks several times per
        request) read at most that often: this object's own changes are seen at once, others' within it."""
        cached = self._models
        if cached is not None and time.monotonic() - cached[0] < self.models_seconds:
            return cached[1]
        with Session(self.engine) as s:
            rows = [_model_info(r) for r in s.scalars(select(Model).order_by(Model.id))]
        self._models = (time.monotonic(), rows)
        return rows

    def vectors(self, model: ModelInfo) -> ModelVectors:
        """The model's vectors, loaded (or rebuilt) on first use and refreshed from the database."""
        with self._lock:
            vec = self._vectors.get(model.id)
            if vec is None:
                vec = ModelVectors(self.engine, model.id, model.dim, os.path.join(self.folder, "vectors"),
                                   backend=self.backend, background_adds=self.background_index)
                vec.load()
                self._vectors[model.id] = vec
                return vec
        vec.refresh(wait=False)  # a search does not wait for another thread's refresh: it uses the rows held
        return vec

    def save_vectors(self) -> List[str]:
        """Save every loaded model's vectors (a restart then loads instead of reading the database)."""
        return [p for p in (v.save() for v in self._vectors.values()) if p]

    # -- writing -----------------------------------------------------------------------------
    def add_tracklets(self, model_name: str, tracklets: Sequence[NewTracklet], link: bool = True) -> IngestCount:
        """Write `tracklets` with their sightings, crops and features under the model, in one
        transaction; tracklets already in the store (same source key) add only the features this model
        lacks. New tracklets are linked online (reid/store/online_linking.py) unless `link` is False."""
        model = self.model(model_name)
        for t in tracklets:
            t.check()
            for s in t.sightings:
                if np.asarray(s.feature).size != model.dim:
                    raise ValueError(f"sighting {s.source!r}: a {np.asarray(s.feature).size}-d feature; model "
                                     f"{model.name!r} has {model.dim}-d features.")
                # NaN, inf or all zeros: no direction; it would rank as NaN and no index could be built over it
                if not np.all(np.isfinite(s.feature)) or not np.any(s.feature):
                    raise ValueError(f"sighting {s.source!r}: its feature is all zeros or holds NaN or inf; "
                                     "a feature must be a finite, non-zero vector.")
        count = IngestCount()
        now = time.time()
        crops = {id(s): self.crops.put(s.crop) for t in tracklets for s in t.sightings}  # files before rows
        with self.writing() as s:
            existing = {}
            for part in _chunks([t.source for t in tracklets]):
                existing.update(s.execute(select(Tracklet.source, Tracklet.id).where(Tracklet.source.in_(part))).all())
            self._cameras(s, tracklets)
            new = [t for t in tracklets if t.source not in existing]
            seen = set()
            new = [t for t in new if not (t.source in seen or seen.add(t.source))]
            for t in tracklets:
                if t.source in existing:
                    count.skipped_tracklets += 1
                    count.features += self._missing_features(s, model, t)
            identities = [Identity(created=now) for _ in new]
            s.add_all(identities)
            s.flush()
            rows = [Tracklet(camera_id=int(t.camera), source=t.source, start=t.start, end=t.end,
                             identity_id=i.id, created=now) for t, i in zip(new, identities)]
            s.add_all(rows)
            s.flush()
            sightings = []
            for t, row in zip(new, rows):
                for x in t.sightings:
                    sightings.append(Sighting(tracklet_id=row.id, camera_id=int(t.camera), time=float(x.time),
                                              frame=x.frame, x=float(x.box[0]), y=float(x.box[1]),
                                              w=float(x.box[2]), h=float(x.box[3]), crop=crops[id(x)],
                                              source=x.source, created=now))
            s.add_all(sightings)
            s.flush()
            flat = [x for t in new for x in t.sightings]
            s.add_all([Feature(sighting_id=row.id, model_id=model.id, vector=vector_bytes(x.feature))
                       for row, x in zip(sightings, flat)])
            s.add_all([TrackletFeature(tracklet_id=row.id, model_id=model.id, vector=vector_bytes(t.pooled()))
                       for t, row in zip(new, rows)])
            s.flush()
            count.tracklets, count.sightings = len(rows), len(sightings)
            count.features += len(sightings)
            count.tracklet_ids = [r.id for r in rows]
            if link and rows:
                count.linked = link_new_tracklets(s, model, [r.id for r in rows], self.rules, now)
        return count

    def _cameras(self, s: Session, tracklets: Sequence[NewTracklet]) -> None:
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        known = set(s.scalars(select(Camera.id)))
        # another writer may add the same new camera meanwhile: its row stands, this insert does nothing
        insert = postgresql_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
        for t in tracklets:
            if int(t.camera) not in known:
                s.execute(insert(Camera).values(id=int(t.camera), name=t.camera_name or f"camera {t.camera}")
                          .on_conflict_do_nothing(index_elements=[Camera.id]))
                known.add(int(t.camera))
        s.flush()

    def _missing_features(self, s: Session, model: ModelInfo, t: NewTracklet) -> int:
        """Features of this model for an existing tracklet's sightings (ingest with a second model)."""
        ids = dict(s.execute(select(Sighting.source, Sighting.id).where(
            Sighting.source.in_([x.source for x in t.sightings]))).all())
        have = set(s.scalars(select(Feature.sighting_id).where(Feature.model_id == model.id,
                                                                Feature.sighting_id.in_(list(ids.values())))))
        added = [Feature(sighting_id=ids[x.source], model_id=model.id, vector=vector_bytes(x.feature))
                 for x in t.sightings if x.source in ids and ids[x.source] not in have]
        s.add_all(added)
        tid = s.scalar(select(Tracklet.id).where(Tracklet.source == t.source))
        if added and s.scalar(select(TrackletFeature.id).where(TrackletFeature.tracklet_id == tid,
                                                               TrackletFeature.model_id == model.id)) is None:
            s.add(TrackletFeature(tracklet_id=tid, model_id=model.id, vector=vector_bytes(t.pooled())))
        return len(added)

    # -- reading -----------------------------------------------------------------------------
    def search(self, model_name: Optional[str], vector: np.ndarray, k: int = 10,
               cameras: Optional[Sequence[int]] = None, start: Optional[float] = None,
               end: Optional[float] = None, exclude_sighting: Optional[int] = None) -> List[Dict[str, Any]]:
        """The `k` sightings most like `vector`, best first, each with its camera, time, box, crop,
        tracklet, identity and score (cosine similarity)."""
        model = self.model(model_name)
        vec = self.vectors(model)
        hits = vec.search(vector, k + (exclude_sighting is not None), cameras, start, end)
        ids = [int(i) for i in hits.sighting_ids]
        rows = self.sightings(ids)
        out = []
        for sid, score in zip(ids, hits.scores):
            if sid == exclude_sighting or sid not in rows:
                continue
            out.append(dict(rows[sid], score=float(score)))
        return out[:k]

    def sightings(self, ids: Sequence[int]) -> Dict[int, Dict[str, Any]]:
        """Sighting id -> its fields (with its tracklet's identity), for the ids that exist."""
        out: Dict[int, Dict[str, Any]] = {}
        # plain rows (no ORM objects): a search asks this on every request
        query = select(*Sighting.__table__.columns, Tracklet.identity_id).join(
            Tracklet, Tracklet.id == Sighting.tracklet_id)
        with self.engine.connect() as c:
            for part in _chunks(list(ids)):
                for row in c.execute(query.where(Sighting.id.in_(part))):
                    out[row.id] = sighting_dict(row, row.identity_id)
        return out

    def sighting_vector(self, model_name: Optional[str], sighting_id: int) -> np.ndarray:
        """A sighting's feature under the model; KeyError when it has none."""
        model = self.model(model_name)
        with self.engine.connect() as c:
            blob = c.scalar(select(Feature.vector).where(Feature.sighting_id == sighting_id,
                                                         Feature.model_id == model.id))
        if blob is None:
            raise NotInStore(f"sighting {sighting_id} has no feature of model {model.name!r}.")
        return np.frombuffer(blob, np.float32).copy()

    def identity(self, identity_id: int) -> Dict[str, Any]:
        """An identity with its tracklets and their sightings per camera (time order), and its links;
        KeyError when there is none. A merged identity says which one it went into."""
        with Session(self.engine) as s:
            ident = s.get(Identity, identity_id)
            if ident is None:
                raise NotInStore(f"identity {identity_id} is not in the store.")
            tracklets = s.scalars(select(Tracklet).where(Tracklet.identity_id == identity_id)
                                  .order_by(Tracklet.start, Tracklet.id)).all()
            sightings = s.scalars(select(Sighting).where(Sighting.tracklet_id.in_([t.id for t in tracklets]))
                                  .order_by(Sighting.time, Sighting.id)).all() if tracklets else []
            links = s.scalars(select(Link).where(Link.identity_id == identity_id).order_by(Link.id)).all()
        per_camera: Dict[int, List[Dict[str, Any]]] = {}
        for sg in sightings:
            per_camera.setdefault(sg.camera_id, []).append(sighting_dict(sg, identity_id))
        return {"id": ident.id, "merged_into": ident.merged_into, "created": ident.created,
                "tracklets": [tracklet_dict(t) for t in tracklets],
                "cameras": [{"camera": c, "sightings": v} for c, v in sorted(per_camera.items())],
                "links": [link_dict(x) for x in links]}

    def counts(self) -> Dict[str, int]:
        """Rows per table (what /health and the ingest report show)."""
        with Session(self.engine) as s:
            return {name: int(s.scalar(select(func.count()).select_from(table)) or 0) for name, table in (
                ("cameras", Camera), ("sightings", Sighting), ("tracklets", Tracklet), ("features", Feature),
                ("identities", Identity), ("links", Link))}

    def vectors_info(self) -> Dict[str, Any]:
        """Per loaded model: rows, index, recall (module reid.store.vectors)."""
        return {str(k): model_vectors_info(v) for k, v in self._vectors.items()}


def _weights(identity: Dict[str, Any]) -> str:
    """The part of a weights identity that says which weights (hash), for comparing two."""
    for key in ("weights_sha256", "state_sha256", "sha256", "file_sha256"):
        if identity.get(key):
            return f"{key} {str(identity[key])[:16]}"
    return json.dumps(identity, sort_keys=True, default=str)


def _model_info(row: Model) -> ModelInfo:
    return ModelInfo(row.id, row.name, row.dim, json.loads(row.identity), row.threshold, row.threshold_source)


def sighting_dict(sg: Any, identity_id: Optional[int]) -> Dict[str, Any]:
    """A sighting (an ORM object or a row of its columns) as the API returns it."""
    return {"id": sg.id, "camera": sg.camera_id, "time": sg.time, "frame": sg.frame,
            "box": [sg.x, sg.y, sg.w, sg.h], "crop": sg.crop, "tracklet": sg.tracklet_id, "identity": identity_id}


def tracklet_dict(t: Tracklet) -> Dict[str, Any]:
    """A tracklet as the API returns it."""
    return {"id": t.id, "camera": t.camera_id, "start": t.start, "end": t.end, "identity": t.identity_id,
            "source": t.source}


def link_dict(x: Link) -> Dict[str, Any]:
    """A link as the API returns it."""
    return {"id": x.id, "tracklet": x.tracklet_id, "identity": x.identity_id, "score": x.score,
            "made_by": x.made_by, "by": x.by_whom, "status": x.status, "created": x.created}


__all__ = ["IngestCount", "ModelInfo", "STORE_FILE", "Store", "link_dict", "sighting_dict", "tracklet_dict"]
