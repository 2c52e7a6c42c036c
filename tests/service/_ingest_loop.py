"""Ingest batch after batch into a store until killed (tests/service/test_faults.py kills it with SIGKILL).

    python tests/service/_ingest_loop.py STORE_DIR DATABASE_URL MODEL [BATCHES]

Batch b holds BATCH tracklets ``b<b>-t<i>``, each of 1..3 sightings whose features and crops follow
from their source keys (``expected_tracklet``), so a test can tell exactly what a batch wrote. After
each batch commits, the script prints ``committed <b>``, saves the model's vectors
(Store.save_vectors; a kill may land in it) and prints ``saved <b>``. Batches already in the store are
written again (an idempotent no-op): a restarted loop goes on where the store stands.
"""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from reid.store.crops import encode_crop  # noqa: E402
from reid.store.records import NewSighting, NewTracklet  # noqa: E402

DIM = 16
BATCH = 60
T0 = 1_764_331_200.0


def _seed(key: str) -> int:
    return zlib.crc32(key.encode("utf-8"))


def expected_feature(source: str) -> np.ndarray:
    """The feature the loop writes for sighting `source` (float32, not normalised)."""
    return np.random.default_rng(_seed(source)).normal(size=DIM).astype(np.float32)


def expected_crop(source: str) -> bytes:
    rng = np.random.default_rng(_seed(source) ^ 0x5A5A)
    return encode_crop(rng.integers(0, 256, (12, 6, 3), dtype=np.uint8))


def sightings_of(source: str) -> int:
    return 1 + _seed(source) % 3


def expected_tracklet(batch: int, i: int) -> NewTracklet:
    source = f"b{batch}-t{i}"
    t = NewTracklet(source=source, camera=1 + i % 3)
    for k in range(sightings_of(source)):
        key = f"{source}/{k}"
        t.sightings.append(NewSighting(source=key, time=T0 + 1000 * batch + 10 * i + k, box=(1.0, 2.0, 6.0, 12.0),
                                       crop=expected_crop(key), feature=expected_feature(key), frame=k))
    return t


def batch_of(batch: int):
    return [expected_tracklet(batch, i) for i in range(BATCH)]


def main(argv) -> int:
    from reid.store.store import Store

    folder, url, model = argv[1], argv[2], argv[3]
    batches = int(argv[4]) if len(argv) > 4 else 10**6
    store = Store(folder, url)
    info = store.model(model)
    for b in range(batches):
        store.add_tracklets(model, batch_of(b))
        print(f"committed {b}", flush=True)
        store.vectors(info).refresh()
        store.save_vectors()
        print(f"saved {b}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
