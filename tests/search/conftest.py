"""Fixtures of the inference tests."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    """Run with one faiss (OpenMP) thread when faiss is installed, restoring the count afterwards.

    On a small shared machine OpenMP threads that spin-wait for each other make small faiss
    builds (k-means, PQ training) about 10x slower than one thread.
    """
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
