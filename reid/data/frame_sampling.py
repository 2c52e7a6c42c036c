"""Which frames of a tracklet a video sample uses.

A tracklet of ``n`` frames is reduced to ``DATALOADER.VIDEO.SEQ_LEN`` frame indices by the method
``DATALOADER.VIDEO.SAMPLER``:

* ``evenly``: one frame at the middle of each of ``seq_len`` equal segments of the tracklet,
  ``i_k = floor((2k + 1) * n / (2 * seq_len))`` for ``k = 0 .. seq_len - 1`` (deterministic; the
  usual choice at test time when a fixed number of frames is wanted).
* ``random``: ``seq_len`` distinct frames drawn uniformly without replacement, sorted into
  temporal order.
* ``consecutive``: a random start and ``seq_len`` consecutive frames.
* ``stride``: a random start and ``seq_len`` frames every ``DATALOADER.VIDEO.STRIDE`` frames.
* ``all``: every frame, in order (test); ``seq_len`` is ignored and the length is ``n``.

Short tracklets (``n < seq_len``) cannot give ``seq_len`` distinct frames; every method but
``all`` then returns the ``evenly`` indices, which for ``n < seq_len`` use every frame, in order,
each repeated ``floor(seq_len / n)`` or ``ceil(seq_len / n)`` times (``n=3, seq_len=5`` gives
``[0, 0, 1, 2, 2]``). Stretching rather than looping (``0 1 2 0 1``) keeps the clip's motion
monotone in time, and it is deterministic so it draws nothing from the generator.

Random methods take a seeded :class:`numpy.random.Generator` so that a resumed run draws the same
frames. :func:`test_chunks` splits an ``all`` sample into bounded chunks for test-time feature
extraction (pool each chunk, then merge, see :mod:`reid.modeling.temporal`).
"""
from __future__ import annotations

from numbers import Integral
from typing import Callable, List, Optional

import numpy as np

from reid.utils.registry import Registry

SAMPLER_REGISTRY = Registry("DATALOADER.VIDEO.SAMPLER")

# Methods that draw from the generator; the others are deterministic.
_RANDOM_METHODS = frozenset({"random", "consecutive", "stride"})


def _evenly(n: int, seq_len: int, stride: int, rng: Optional[np.random.Generator]) -> np.ndarray:
    # Integer arithmetic: exact for any n, and no float rounding ties at segment borders.
    k = np.arange(seq_len, dtype=np.int64)
    return (2 * k + 1) * n // (2 * seq_len)


def _random(n: int, seq_len: int, stride: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(n, size=seq_len, replace=False)).astype(np.int64)


def _strided(n: int, seq_len: int, stride: int, rng: np.random.Generator) -> np.ndarray:
    # A clip spans (seq_len - 1) * stride + 1 frames; when the tracklet is shorter than that (but
    # has at least seq_len frames) the step shrinks to the largest that fits, so the clip keeps
    # seq_len distinct frames instead of repeating its last one.
    if seq_len > 1:
        stride = min(stride, (n - 1) // (seq_len - 1))
    span = (seq_len - 1) * stride + 1
    start = int(rng.integers(0, n - span + 1))
    return start + stride * np.arange(seq_len, dtype=np.int64)


def _all(n: int, seq_len: int, stride: int, rng: Optional[np.random.Generator]) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


SAMPLER_REGISTRY.register("evenly")(_evenly)
SAMPLER_REGISTRY.register("random")(_random)
SAMPLER_REGISTRY.register("consecutive")(lambda n, seq_len, stride, rng: _strided(n, seq_len, 1, rng))
SAMPLER_REGISTRY.register("stride")(_strided)
SAMPLER_REGISTRY.register("all")(_all)

SAMPLING_METHODS = tuple(SAMPLER_REGISTRY.names())


def _is_positive_int(value: object) -> bool:
    # bool is an Integral, but SEQ_LEN: True is a config mistake, not 1.
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= 1


def check_sampling(method: str, seq_len: int, stride: int = 1) -> Callable:
    """Validate the video sampling settings; return the sampler of `method`.

    Raises:
        UnknownNameError: `method` is not in :data:`SAMPLING_METHODS` (the message lists them).
        ValueError: `seq_len` or `stride` is not a positive integer (one line naming the key).
    """
    fn = SAMPLER_REGISTRY.get(method)
    if not _is_positive_int(seq_len):
        raise ValueError(f"DATALOADER.VIDEO.SEQ_LEN must be a positive integer, got {seq_len!r}.")
    if not _is_positive_int(stride):
        raise ValueError(f"DATALOADER.VIDEO.STRIDE must be a positive integer, got {stride!r}.")
    return fn


def _check_length(n: int) -> int:
    if not isinstance(n, Integral) or isinstance(n, bool) or n < 1:
        raise ValueError(f"A tracklet must have at least one frame, got n={n!r}.")
    return int(n)


def sample_frames(n: int, method: str, seq_len: int, stride: int = 1,
                  rng: Optional[np.random.Generator] = None) -> np.ndarray:
    """Indices (int64, non-decreasing) of the frames of an `n`-frame tracklet that a sample uses.

    Args:
        n: the tracklet's number of frames (>= 1).
        method: one of :data:`SAMPLING_METHODS` (``DATALOADER.VIDEO.SAMPLER``).
        seq_len: frames per sample (``DATALOADER.VIDEO.SEQ_LEN``); ignored by ``all``.
        stride: step between frames of ``stride`` (``DATALOADER.VIDEO.STRIDE``).
        rng: the generator of ``random``, ``consecutive`` and ``stride``; required by them.

    Returns:
        ``seq_len`` indices in ``[0, n)`` (``n`` indices for ``all``); short tracklets are
        stretched as the module docstring describes.
    """
    fn = check_sampling(method, seq_len, stride)
    n = _check_length(n)
    key = str(method).lower()
    if key in _RANDOM_METHODS and not isinstance(rng, np.random.Generator):
        raise ValueError(f"DATALOADER.VIDEO.SAMPLER {method!r} draws at random: pass a numpy Generator as rng, "
                         f"got {type(rng).__name__}.")
    if key != "all" and n < seq_len:
        return _evenly(n, seq_len, stride, rng)
    return fn(n, seq_len, stride, rng)


def test_chunks(n: int, chunk: int) -> List[np.ndarray]:
    """Split the frames ``0 .. n-1`` of an ``all`` sample into consecutive chunks of at most
    `chunk` frames (the last may be shorter), so test-time memory is bounded by `chunk` frames.

    Raises:
        ValueError: ``n < 1`` or `chunk` is not a positive integer.
    """
    n = _check_length(n)
    if not _is_positive_int(chunk):
        raise ValueError(f"chunk (frames per test chunk) must be a positive integer, got {chunk!r}.")
    return np.split(np.arange(n, dtype=np.int64), np.arange(chunk, n, chunk))


# The name starts with "test_": keep pytest from collecting it where a test module imports it.
test_chunks.__test__ = False  # type: ignore[attr-defined]

__all__ = ["SAMPLER_REGISTRY", "SAMPLING_METHODS", "check_sampling", "sample_frames", "test_chunks"]
