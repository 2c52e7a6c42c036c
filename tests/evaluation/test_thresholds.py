"""Calibrated decision thresholds: written from a held-out split, read back with checks."""
import numpy as np
import pytest

from reid.evaluation import compute_distance, verification_metrics
from reid.evaluation.thresholds import (
    THRESHOLDS_FILE,
    calibrate,
    find_thresholds,
    load_thresholds,
    save_thresholds,
    similarity_at,
)


def split(seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, 16)).astype(np.float32)
    q_pids, g_pids = rng.integers(0, 20, 60), rng.integers(0, 20, 300)
    q = centers[q_pids] + 0.8 * rng.standard_normal((60, 16)).astype(np.float32)
    g = centers[g_pids] + 0.8 * rng.standard_normal((300, 16)).astype(np.float32)
    return q, g, q_pids, g_pids, rng.integers(0, 3, 60), rng.integers(0, 3, 300)


def test_a_calibrated_similarity_accepts_exactly_what_verification_accepts(tmp_path):
    q, g, *ids = split()
    record = calibrate(q, g, *ids, fars=(0.1, 0.01))
    v = verification_metrics(compute_distance(q, g), *ids, fars=(0.1, 0.01))
    for far in (0.1, 0.01):
        entry = record["thresholds"][f"{far:g}"]
        assert entry["distance"] == v["threshold"][far] and entry["tar"] == v["tar"][far]
        assert entry["similarity"] == pytest.approx(1 - v["threshold"][far], abs=1e-12)
    path = save_thresholds(str(tmp_path), record)
    assert path.endswith(THRESHOLDS_FILE) and find_thresholds(str(tmp_path / "model_final.pth")) == path
    (tmp_path / "other").mkdir()
    assert find_thresholds(None, str(tmp_path)) == path and find_thresholds(str(tmp_path / "other")) is None
    back = load_thresholds(path)
    assert similarity_at(back, 0.01, path) == record["thresholds"]["0.01"]["similarity"]
    with pytest.raises(ValueError, match=r"has thresholds for FAR 0.01, 0.1, not 0.001"):
        similarity_at(back, 1e-3, path)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        similarity_at(back, 3, path)


@pytest.mark.parametrize("content, what", [
    ("not json", "not JSON"),
    ("[1, 2]", "no 'thresholds' mapping"),
    ('{"thresholds": {"0.01": {"similarity": 7}}}', "entry '0.01'"),
    ('{"thresholds": {"2": {"similarity": 0.5}}}', "entry '2'"),
    ('{"thresholds": {"0.01": {"similarity": NaN}}}', "entry"),
])
def test_a_damaged_thresholds_file_is_one_line(tmp_path, content, what):
    path = tmp_path / THRESHOLDS_FILE
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"{THRESHOLDS_FILE}' is damaged \({what}.*--threshold"):
        load_thresholds(str(path))
