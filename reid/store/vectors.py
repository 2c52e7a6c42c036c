"""A model's vectors in memory and its search index, kept in step with the database (the truth).

:class:`ModelVectors` holds every feature row of one model (feature id, sighting, camera, time,
the vector) in arrays that grow as rows are added, and a search index (reid.search: "exact",
"faiss", "ivf" or "hnsw", approximate ones tuned to a recall target). New rows are added to the
index as they arrive (faiss adds them to its lists; rows not yet added are searched exactly), and
once the rows reach :data:`REBUILD_GROWTH` times those the index was trained on, a new one is built
in a background thread and swapped in, so neither an insert nor a search waits for a rebuild.

In step with the database: :meth:`ModelVectors.refresh` reads the rows whose feature id is past
the last one held (another process may have written them); when the database's count or id sum
of the rows held differs from the memory's (rows removed, a database restored from a backup) the
whole thing is rebuilt from the database. Saved as one ``.npz`` (arrays and a fingerprint) plus
the index file (reid.search.save_index); loaded only when its fingerprint matches the database.

Filters (cameras, a time window): reid/store/filtered_search.py. Searches share the faiss index; an
add takes it alone (a server adds from a thread of its own).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from reid.utils.file_io import atomic_write
from reid.utils.read_write_lock import ReadWriteLock

from . import filtered_search
from .filtered_search import EXACT_FILTER_ROWS, Hits
from .schema import Feature, Sighting

logger = logging.getLogger(__name__)

#: Build a new index (in the background) when the rows reach this many times those it was trained on.
REBUILD_GROWTH = 2.0
#: ... and never for fewer rows than this.
MIN_REBUILD_ROWS = 2000
#: How far below the largest held feature id a refresh looks for rows committed late, and how often.
LOOKBACK_IDS = 5000
LOOKBACK_SECONDS = 1.0
#: Seconds between whole-fingerprint checks of the rows held against the database.
VERIFY_SECONDS = 30.0
#: Rows read from the database per query when loading.
READ_CHUNK = 20000
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Fingerprint:
    """Count, largest id and id sum of a model's feature rows (up to an id): what must agree."""

    count: int
    max_id: int
    id_sum: int


def database_fingerprint(session: Session, model_id: int, up_to: Optional[int] = None) -> Fingerprint:
    """The fingerprint of the model's feature rows in the database (those with id <= `up_to`)."""
    query = select(func.count(Feature.id), func.max(Feature.id), func.sum(Feature.id)).where(
        Feature.model_id == model_id)
    if up_to is not None:
        query = query.where(Feature.id <= up_to)
    count, max_id, id_sum = session.execute(query).one()
    return Fingerprint(int(count or 0), int(max_id or 0), int(id_sum or 0))


class _Rows:
    """Growable column arrays; readers take a length and see only rows below it."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self.n = 0
        self.camera_min, self.camera_max = 0, 0  # the range of camera numbers held (a filter's lookup table)
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        old = getattr(self, "feats", None)
        fresh = (np.zeros(capacity, np.int64), np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
                 np.zeros(capacity, np.float64), np.zeros((capacity, self.dim), np.float32))
        if old is not None:
            for new, cur in zip(fresh, (self.feature_id, self.sighting_id, self.camera, self.time, self.feats)):
                new[:self.n] = cur[:self.n]
        self.feature_id, self.sighting_id, self.camera, self.time, self.feats = fresh

    def append(self, feature_id: np.ndarray, sighting_id: np.ndarray, camera: np.ndarray, times: np.ndarray,
               feats: np.ndarray) -> None:
        m = len(feature_id)
        if self.n + m > len(self.feature_id):
            self._alloc(max(2 * len(self.feature_id), self.n + m))
        end = self.n + m
        if m:
            self.camera_min = min(self.camera_min, int(np.min(camera)))
            self.camera_max = max(self.camera_max, int(np.max(camera)))
        self.feature_id[self.n:end] = feature_id
        self.sighting_id[self.n:end] = sighting_id
        self.camera[self.n:end] = camera
        self.time[self.n:end] = times
        self.feats[self.n:end] = feats
        self.n = end  # published last: a reader with the old length never sees a half row


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows L2-normalised (float32)."""
    vectors = np.asarray(vectors, np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


_NO_LOCK = nullcontext()


class _State(NamedTuple):
    rows: "_Rows"
    index: Any
    indexed: int


class ModelVectors:
    """The vectors of one model (module docstring). Thread-safe: one writer, many readers."""

    @property
    def rows(self) -> "_Rows":
        return self._state.rows

    @property
    def index(self) -> Any:
        return self._state.index

    @property
    def indexed(self) -> int:
        return self._state.indexed

    def __init__(self, engine: Engine, model_id: int, dim: int, folder: Optional[str] = None,
                 backend: str = "exact", target_recall: float = 0.95, background_adds: bool = False) -> None:
        self.engine = engine
        self.model_id = int(model_id)
        self.dim = int(dim)
        self.folder = folder
        self.backend = backend
        self.target_recall = target_recall
        self._lock = threading.RLock()
        self._index_lock = ReadWriteLock()  # faiss indexes: searches together, an add alone
        self._rebuilder: Optional[threading.Thread] = None
        # a server: new rows join the faiss index in a thread of their own (searched exactly meanwhile), so
        # the search whose refresh found them does not wait while each row is compared with every IVF list
        self.background_adds = background_adds
        self._adder: Optional[threading.Thread] = None
        self.trained_on = 0  # rows the index was built (trained) on
        # rows, index and how many rows the index holds (the first ones), replaced as one: a search reads
        # them once, so a rebuild or a new index never shows it one without the others
        self._state = _State(_Rows(self.dim), None, 0)
        self._max_id = 0  # the largest feature id held (rows written late by another writer come after it)
        self._looked_back = 0.0  # time.monotonic() of the last look for rows committed late
        self.rebuilds = 0  # times the rows were re-read from the database because they disagreed
        self._sum = 0
        self._verified = 0.0  # time.monotonic() of the last whole-fingerprint check

    # -- keeping in step -------------------------------------------------------------------
    def _query(self):
        return (select(Feature.id, Feature.sighting_id, Sighting.camera_id, Sighting.time, Feature.vector)
                .join(Sighting, Sighting.id == Feature.sighting_id).where(Feature.model_id == self.model_id))

    def _append(self, rows: "_Rows", chunk: Sequence[Any]) -> None:
        fid, sid, cam, t, vec = zip(*chunk)
        feats = np.frombuffer(b"".join(vec), np.float32).reshape(len(chunk), self.dim)
        rows.append(np.array(fid), np.array(sid), np.array(cam), np.array(t, np.float64), unit_rows(feats))
        self._sum += int(np.sum(np.array(fid, dtype=np.int64)))
        self._max_id = max(self._max_id, int(max(fid)))

    def _read(self, session: Session, after: int, rows: "_Rows") -> int:
        """Append to `rows` the rows with feature id > `after`, in id order; returns how many."""
        added = 0
        while True:
            chunk = session.execute(self._query().where(Feature.id > after).order_by(Feature.id)
                                    .limit(READ_CHUNK)).all()
            if not chunk:
                return added
            self._append(rows, chunk)
            after = int(chunk[-1][0])
            added += len(chunk)

    def _read_late(self, session: Session) -> int:
        """Append rows with ids below the largest held that were committed after it was read (writers
        commit out of id order on PostgreSQL); looks LOOKBACK_IDS back. Counting first keeps the common
        case (nothing late) to one indexed count. Returns how many."""
        rows, n = self.rows, self.rows.n
        low = max(0, self._max_id - LOOKBACK_IDS)
        window = (Feature.model_id == self.model_id, Feature.id > low, Feature.id <= self._max_id)
        held = rows.feature_id[max(0, n - 4 * LOOKBACK_IDS):n]  # rows come in id order but for late ones
        held = held[held > low]
        if int(session.scalar(select(func.count(Feature.id)).where(*window)) or 0) == len(held):
            return 0
        there = np.array(session.scalars(select(Feature.id).where(*window)).all(), np.int64)
        everything = rows.feature_id[:n]  # a mismatch is rare: compare with every row held, not the recent ones
        missing = np.setdiff1d(there, everything[everything > low])
        for start in range(0, len(missing), READ_CHUNK):
            part = [int(i) for i in missing[start:start + READ_CHUNK]]
            self._append(rows, session.execute(self._query().where(Feature.id.in_(part))).all())
        return len(missing)

    def _fingerprint(self) -> Fingerprint:
        return Fingerprint(self.rows.n, self._max_id, self._sum)

    def rebuild(self, counted: bool = True) -> None:
        """Forget everything and read the model's rows from the database again (`counted`: a
        disagreement, counted in ``rebuilds``; a first build is not)."""
        with self._lock:
            rows, self._sum, self._max_id = _Rows(self.dim), 0, 0
            with Session(self.engine) as session:
                self._read(session, 0, rows)
            self.rebuilds += int(counted)
            n = rows.n
            index = self._build(rows, n) if self.backend != "exact" and n else None
            self.trained_on = n if index is not None else 0
            # published whole: searches meanwhile ran on the rows held before
            self._state = _State(rows, index, n if (index is not None or self.backend == "exact") else 0)

    def refresh(self, verify: Optional[bool] = None, wait: bool = True) -> int:
        """Read rows other writers added; returns how many. The cheap check (the largest feature id,
        from the model's index) runs every time; the whole fingerprint (count and id sum of the rows
        held) when `verify`, when the database's largest id went down, and every VERIFY_SECONDS, and a
        disagreement rebuilds from the database. With `wait` False a refresh already under way in
        another thread is not waited for (a search then runs on the rows held)."""
        if not self._lock.acquire(blocking=wait):
            return 0
        try:
            with Session(self.engine) as session:
                held_max = self._max_id
                latest = int(session.scalar(select(func.max(Feature.id)).where(Feature.model_id == self.model_id)) or 0)
                added = self._read(session, held_max, self.rows) if latest > held_max else 0
                if verify or time.monotonic() - self._looked_back > LOOKBACK_SECONDS:
                    self._looked_back = time.monotonic()
                    added += self._read_late(session)
                if verify is None:
                    verify = latest < held_max or time.monotonic() - self._verified > VERIFY_SECONDS
                if verify:
                    self._verified = time.monotonic()
                    held = self._fingerprint()
                    if database_fingerprint(session, self.model_id, held.max_id) != held:
                        logger.warning("the vectors of model %d disagree with the database (%d rows held); "
                                       "rebuilding from the database", self.model_id, held.count)
                        session.close()
                        self.rebuild()
                        return self.rows.n
            if added or (self.background_adds and self.index is not None and self.indexed < self.rows.n):
                self._maybe_reindex()
            return added
        finally:
            self._lock.release()

    def _maybe_reindex(self) -> None:
        """Keep the index over every row: new rows are added to it (faiss adds to its lists; the
        trained quantizer stays), and once the rows reach REBUILD_GROWTH times those it was trained
        on, a new index is built in a background thread and swapped in (searches go on meanwhile)."""
        rows, index, indexed = self._state
        n = rows.n
        if self.backend == "exact" or n == 0:
            self._state = _State(rows, None, n if self.backend == "exact" else 0)
            return
        if index is None:
            self._state = _State(rows, self._build(rows, n), n)
            self.trained_on = n
            return
        if n > indexed:
            if not self.background_adds:
                self._add_new_rows(rows, index)
            elif self._adder is None:
                self._adder = threading.Thread(target=self._add_new_rows, args=(rows, index, True), daemon=True,
                                               name=f"index-add-model-{self.model_id}")
                self._adder.start()
        if n >= REBUILD_GROWTH * max(self.trained_on, MIN_REBUILD_ROWS) and self._rebuilder is None:
            self._rebuilder = threading.Thread(target=self._rebuild_index, args=(rows, n), daemon=True,
                                               name=f"reindex-model-{self.model_id}")
            self._rebuilder.start()

    def _add_new_rows(self, rows: "_Rows", index: Any, background: bool = False) -> None:
        """Add the rows the index lacks to it (in the background: until none are left, unless the rows
        or the index were replaced meanwhile) and publish the new count."""
        try:
            while True:
                state = self._state
                n = rows.n
                if state.rows is not rows or state.index is not index or state.indexed >= n:
                    return
                self._add(index, rows.feats[state.indexed:n])
                with self._lock if background else _NO_LOCK:
                    if self._state.index is index:  # not swapped for a rebuilt one meanwhile
                        self._state = _State(rows, index, n)
                if not background:
                    return
        except Exception:  # searches go on exactly over the rows the index lacks; the next refresh tries again
            logger.exception("adding rows to the index of model %d failed", self.model_id)
        finally:
            if background:
                self._adder = None

    def _add(self, index: Any, feats: np.ndarray) -> None:
        """Append rows to a faiss index. An IVF index's lists are found first, outside the write lock
        (the costly part: every row against every centroid), so searches wait only for the append."""
        x = np.ascontiguousarray(feats, np.float32)
        import faiss
        from faiss.contrib.ivf_tools import add_preassigned

        native = index.index
        if isinstance(native, faiss.IndexIVF):
            _, lists = native.quantizer.search(x, 1)
            with self._index_lock.writing():
                add_preassigned(native, x, np.ascontiguousarray(lists[:, 0]))
            return
        with self._index_lock.writing():
            native.add(x)

    def _build(self, rows: "_Rows", n: int) -> Any:
        from reid.search import build_index

        return build_index(rows.feats[:n], backend=self.backend, target_recall=self.target_recall)

    def _rebuild_index(self, rows: "_Rows", n: int) -> None:
        try:
            index = self._build(rows, n)
            with self._lock:  # rows added while it was built join it before the swap
                if self._state.rows is not rows:  # the rows were read again meanwhile: other positions
                    return
                if rows.n > n:
                    self._add(index, rows.feats[n:rows.n])
                self._state = _State(rows, index, rows.n)
                self.trained_on = n
        except Exception:  # the old index keeps serving; the next growth tries again
            logger.exception("rebuilding the index of model %d failed; the previous index is kept", self.model_id)
        finally:
            self._rebuilder = None

    # -- files -------------------------------------------------------------------------------
    def _paths(self) -> Tuple[str, str]:
        assert self.folder is not None
        base = os.path.join(self.folder, f"model-{self.model_id}")
        return base + ".npz", base + ".index"

    def save(self) -> Optional[str]:
        """Write the rows (and the index) under the folder; returns the .npz path (None without a folder)."""
        if self.folder is None:
            return None
        os.makedirs(self.folder, exist_ok=True)
        arrays_path, index_path = self._paths()
        with self._lock:
            rows, index, indexed = self._state
            n = rows.n
            fp = self._fingerprint()
            info = {"format_version": FORMAT_VERSION, "model_id": self.model_id, "dim": self.dim,
                    "backend": self.backend, "indexed": indexed if index is not None else 0,
                    "fingerprint": fp.__dict__}
            if index is not None:
                from reid.search import save_index

                with self._index_lock.reading():
                    save_index(index, index_path)
            atomic_write(arrays_path, lambda f: np.savez(
                f, feature_id=rows.feature_id[:n], sighting_id=rows.sighting_id[:n], camera=rows.camera[:n],
                time=rows.time[:n], feats=rows.feats[:n], info=np.array(json.dumps(info))))
        return arrays_path

    def load(self) -> str:
        """Take the saved rows when they agree with the database, else rebuild; then refresh.
        Returns what happened ("loaded", "rebuilt" or "built")."""
        with self._lock:
            what = "built"
            if self.folder is not None and os.path.isfile(self._paths()[0]):
                what = "loaded" if self._load_saved() else "rebuilt"
            if what != "loaded":
                self.rebuild(counted=what == "rebuilt")
            self.refresh(verify=True)
            return what

    def _load_saved(self) -> bool:
        arrays_path, index_path = self._paths()
        try:
            with np.load(arrays_path, allow_pickle=False) as z:
                info = json.loads(str(z["info"]))
                arrays = {k: z[k] for k in ("feature_id", "sighting_id", "camera", "time", "feats")}
            if not isinstance(info, dict) or info.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format version {info.get('format_version') if isinstance(info, dict) else None}, "
                                 f"not {FORMAT_VERSION}")
            fp = Fingerprint(**info["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("%s cannot be read (%s); rebuilding from the database", arrays_path, e)
            return False
        with Session(self.engine) as session:
            agrees = database_fingerprint(session, self.model_id, fp.max_id) == fp
        if not agrees or info.get("dim") != self.dim or info.get("backend") != self.backend \
                or arrays["feats"].shape != (fp.count, self.dim):
            logger.warning("%s does not agree with the database; rebuilding from the database", arrays_path)
            return False
        rows = _Rows(self.dim, max(1024, fp.count))
        rows.append(arrays["feature_id"], arrays["sighting_id"], arrays["camera"], arrays["time"], arrays["feats"])
        self._sum, self._max_id = fp.id_sum, fp.max_id
        index, indexed = None, 0
        if info.get("indexed") and os.path.isfile(index_path):
            from reid.search import load_index

            index, indexed = load_index(index_path), int(info["indexed"])
            self.trained_on = indexed
        self._state = _State(rows, index, rows.n if self.backend == "exact" else indexed)
        return True

    # -- search ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.rows.n

    def search(self, query: np.ndarray, k: int, cameras: Optional[Sequence[int]] = None,
               start: Optional[float] = None, end: Optional[float] = None) -> Hits:
        """The `k` rows most similar to `query` (a ``[D]`` vector) among those seen by `cameras` within
        ``[start, end]`` (seconds since 1970; None: no bound)."""
        rows, index, indexed = self._state  # one consistent view, whatever a refresh or rebuild does meanwhile
        n = rows.n
        indexed = min(indexed, n) if index is not None else 0
        q = unit_rows(np.asarray(query, np.float32).reshape(1, -1))[0]
        if q.shape[0] != self.dim:
            raise ValueError(f"query has {q.shape[0]} values; this model's features have {self.dim}.")
        return filtered_search.search(rows, n, index, indexed, q, k, filtered_search.filter_mask(
            rows, n, cameras, start, end), self._index_lock.reading)

def vector_bytes(vector: np.ndarray) -> bytes:
    """The bytes a feature row is stored as (float32, L2-normalised)."""
    return unit_rows(np.asarray(vector, np.float32).reshape(1, -1))[0].tobytes()


def model_vectors_info(vectors: ModelVectors) -> Dict[str, Any]:
    """What /health and the benchmarks report about a model's vectors."""
    return {"rows": len(vectors), "indexed": vectors.indexed, "backend": vectors.backend,
            "measured_recall": getattr(vectors.index, "measured_recall", 1.0 if vectors.backend == "exact" else None),
            "rebuilds": vectors.rebuilds}


__all__ = ["EXACT_FILTER_ROWS", "Fingerprint", "Hits", "ModelVectors", "database_fingerprint", "model_vectors_info",
           "unit_rows", "vector_bytes"]
