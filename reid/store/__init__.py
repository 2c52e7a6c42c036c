"""The sightings store: a database of cameras, sightings, features, identities, links and decisions.

    from reid.store import Store
    store = Store("site-store")                       # SQLite in site-store/store.db
    store.search("demo", vector, k=10, cameras=[2, 3])

- schema.py: the tables (SQLAlchemy 2: SQLite or PostgreSQL); database.py: opening one;
- store.py: :class:`Store` (writes in one transaction, idempotent, search, identities);
- records.py: what an ingest writes; crops.py: crop files the store owns; vectors.py: each model's
  vectors and index, kept in step with the database;
- online_linking.py: new tracklets join identities as they arrive; review.py: people's decisions,
  logged and undoable; queries.py: the page's lists; export.py: reviewed identities -> training data;
- ingest.py (+ ingest_tracks.py, ingest_images.py, times.py): what tools/ingest.py reads into a store.

Needs the ``service`` extra (``pip install "circle-reid[service]"``; docs/service.md).
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.store.store": ["IngestCount", "ModelInfo", "Store"],
    "reid.store.records": ["NewSighting", "NewTracklet"],
    "reid.store.online_linking": ["LinkRules"],
    "reid.store.review": ["NotFound", "ReviewError"],
    "reid.store.ingest": ["ingest"],
})

__all__ = sorted(__dir__())
