"""Which frames of a tracklet a video sample uses: hand-computed indices, order, seeds, errors."""
from __future__ import annotations

import numpy as np
import pytest

from reid.data import frame_sampling as fs
from reid.utils.registry import UnknownNameError


def rng(seed=0):
    return np.random.default_rng(seed)


def test_methods_listed():
    assert fs.SAMPLING_METHODS == ("all", "consecutive", "evenly", "random", "stride")


@pytest.mark.parametrize("n, seq_len, expected", [
    (10, 4, [1, 3, 6, 8]),          # segments of 2.5 frames, middles at 1.25, 3.75, 6.25, 8.75
    (8, 4, [1, 3, 5, 7]),           # segments of 2 frames: the second frame of each
    (4, 4, [0, 1, 2, 3]),           # exactly seq_len frames: all of them
    (100, 1, [50]),                 # one frame: the middle
    (3, 5, [0, 0, 1, 2, 2]),        # short: stretched, every frame, in order
    (1, 3, [0, 0, 0]),
])
def test_evenly_hand_computed(n, seq_len, expected):
    out = fs.sample_frames(n, "evenly", seq_len)
    assert out.dtype == np.int64
    assert out.tolist() == expected


def test_evenly_is_deterministic_and_ignores_rng():
    assert fs.sample_frames(37, "evenly", 8, rng=rng(1)).tolist() == fs.sample_frames(37, "evenly", 8).tolist()


def test_all_returns_every_frame_whatever_seq_len():
    assert fs.sample_frames(5, "all", 8).tolist() == [0, 1, 2, 3, 4]
    assert fs.sample_frames(12, "ALL", 4).tolist() == list(range(12))


@pytest.mark.parametrize("method", ["random", "consecutive", "stride"])
def test_random_methods_sorted_in_range_and_seeded(method):
    for n in (8, 9, 50, 301):
        a = fs.sample_frames(n, method, 8, stride=3, rng=rng(7))
        b = fs.sample_frames(n, method, 8, stride=3, rng=rng(7))
        assert a.dtype == np.int64 and len(a) == 8
        assert np.array_equal(a, b)                      # same seed, same frames (a resumed run)
        assert np.all(np.diff(a) > 0)                    # distinct, temporal order
        assert a.min() >= 0 and a.max() < n


def test_random_differs_across_seeds_and_covers_tracklet():
    draws = {tuple(fs.sample_frames(40, "random", 4, rng=rng(s))) for s in range(20)}
    assert len(draws) > 15
    seen = np.unique(np.concatenate([fs.sample_frames(40, "random", 4, rng=rng(s)) for s in range(200)]))
    assert seen.tolist() == list(range(40))


def test_random_continues_the_generator_stream():
    g = rng(3)
    first, second = fs.sample_frames(30, "random", 5, rng=g), fs.sample_frames(30, "random", 5, rng=g)
    g2 = rng(3)
    assert fs.sample_frames(30, "random", 5, rng=g2).tolist() == first.tolist()
    assert fs.sample_frames(30, "random", 5, rng=g2).tolist() == second.tolist()


def test_stride_steps_and_start_range():
    starts = set()
    for s in range(300):
        out = fs.sample_frames(20, "stride", 4, stride=3, rng=rng(s))
        assert np.all(np.diff(out) == 3)
        starts.add(int(out[0]))
    # A clip spans (4 - 1) * 3 + 1 = 10 frames, so it starts anywhere in 0 .. 10.
    assert starts == set(range(11))


def test_consecutive_ignores_stride():
    for s in range(50):
        out = fs.sample_frames(20, "consecutive", 5, stride=4, rng=rng(s))
        assert np.all(np.diff(out) == 1)


def test_stride_shrinks_to_fit_a_tracklet_shorter_than_the_span():
    # seq_len 4 at stride 5 spans 16 frames; 10 frames fit a step of (10 - 1) // 3 = 3 at most.
    out = fs.sample_frames(10, "stride", 4, stride=5, rng=rng(0))
    assert np.all(np.diff(out) == 3) and out[0] in (0, 1) and out[-1] <= 9
    assert fs.sample_frames(4, "stride", 4, stride=5, rng=rng(0)).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("method", ["evenly", "random", "consecutive", "stride"])
def test_short_tracklets_stretch_in_order(method):
    out = fs.sample_frames(3, method, 8, stride=2, rng=rng(0))
    assert out.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    counts = np.bincount(fs.sample_frames(5, method, 12, stride=2, rng=rng(0)))
    assert counts.tolist() and counts.min() >= 2 and counts.max() <= 3 and counts.sum() == 12


@pytest.mark.parametrize("n", [0, -2])
def test_empty_tracklet_is_an_error(n):
    with pytest.raises(ValueError, match=r"^A tracklet must have at least one frame, got n=" + str(n)):
        fs.sample_frames(n, "evenly", 4)


def test_unknown_method_lists_valid_names():
    with pytest.raises(UnknownNameError) as err:
        fs.sample_frames(10, "dense", 4)
    msg = str(err.value)
    assert "DATALOADER.VIDEO.SAMPLER" in msg and "'dense'" in msg and "\n" not in msg
    for name in fs.SAMPLING_METHODS:
        assert name in msg


@pytest.mark.parametrize("seq_len", [0, -1, 2.0, True, "4"])
def test_bad_seq_len(seq_len):
    with pytest.raises(ValueError, match=r"^DATALOADER\.VIDEO\.SEQ_LEN must be a positive integer, got"):
        fs.check_sampling("evenly", seq_len, 1)


@pytest.mark.parametrize("stride", [0, -3, 1.5, None])
def test_bad_stride(stride):
    with pytest.raises(ValueError, match=r"^DATALOADER\.VIDEO\.STRIDE must be a positive integer, got"):
        fs.sample_frames(10, "stride", 4, stride=stride, rng=rng())


def test_check_sampling_accepts_good_values_and_numpy_ints():
    assert callable(fs.check_sampling("Random", np.int64(8), np.int32(2)))


@pytest.mark.parametrize("method", ["random", "consecutive", "stride"])
def test_random_methods_need_a_generator(method):
    with pytest.raises(ValueError, match=rf"^DATALOADER\.VIDEO\.SAMPLER '{method}' draws at random"):
        fs.sample_frames(10, method, 4)
    with pytest.raises(ValueError, match="numpy Generator"):
        fs.sample_frames(10, method, 4, rng=np.random.RandomState(0))


@pytest.mark.parametrize("n, chunk, expected", [
    (10, 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),
    (8, 4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (3, 10, [[0, 1, 2]]),
    (2, 1, [[0], [1]]),
])
def test_test_chunks(n, chunk, expected):
    out = fs.test_chunks(n, chunk)
    assert [c.tolist() for c in out] == expected
    assert all(c.dtype == np.int64 for c in out)
    assert np.concatenate(out).tolist() == fs.sample_frames(n, "all", 1).tolist()


def test_test_chunks_errors():
    with pytest.raises(ValueError, match=r"^A tracklet must have at least one frame"):
        fs.test_chunks(0, 4)
    with pytest.raises(ValueError, match=r"^chunk \(frames per test chunk\) must be a positive integer, got 0"):
        fs.test_chunks(5, 0)


def test_test_chunks_is_not_collected_by_pytest():
    assert fs.test_chunks.__test__ is False
