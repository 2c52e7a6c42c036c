"""Calibrated decision thresholds: written from a held-out split, read back with checks."""
import numpy as np
import pytest

from reid.evaluation.thresholds import (
    THRESHOLDS_FILE,
    calibrate,
    calibrated_for,
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


def test_a_calibrated_similarity_accepts_the_pairs_its_far_and_tar_say(tmp_path):
    q, g, q_pids, g_pids, q_cams, g_cams = split()
    record = calibrate(q, g, q_pids, g_pids, q_cams, g_cams, fars=(0.1, 0.01))
    # Counted here, pair by pair, from cosine similarities (not through the verification code):
    # same id + same camera is junk; same id otherwise genuine; different ids impostors.
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    gn = g / np.linalg.norm(g, axis=1, keepdims=True)
    sim = qn.astype(np.float64) @ gn.T.astype(np.float64)
    same_id, same_cam = q_pids[:, None] == g_pids[None], q_cams[:, None] == g_cams[None]
    genuine, impostor = sim[same_id & ~same_cam], sim[~same_id]
    for far in (0.1, 0.01):
        entry = record["thresholds"][f"{far:g}"]
        accepted_impostors = float(np.mean(impostor > entry["similarity"] + 1e-6))
        assert accepted_impostors <= far  # the promise: never more false accepts than asked
        assert accepted_impostors >= far - 0.01  # and the threshold is not needlessly strict
        assert entry["tar"] == pytest.approx(np.mean(genuine > entry["similarity"] + 1e-6), abs=0.005)
    path = save_thresholds(str(tmp_path), record)
    assert path.endswith(THRESHOLDS_FILE) and find_thresholds(str(tmp_path / "model_final.pth")) == path
    (tmp_path / "other").mkdir()
    assert find_thresholds(str(tmp_path / "other" / "model_final.pth")) is None
    back = load_thresholds(path)
    assert similarity_at(back, 0.01, path) == record["thresholds"]["0.01"]["similarity"]
    with pytest.raises(ValueError, match=r"has thresholds for FAR 0.01, 0.1, not 0.001"):
        similarity_at(back, 1e-3, path)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        similarity_at(back, 3, path)


def test_thresholds_hold_only_for_the_weights_they_were_calibrated_on():
    record = {"weights": "model_best.pth", "thresholds": {"0.01": {"similarity": 0.5}}}
    assert calibrated_for(record, "/runs/a/model_best.pth")
    assert not calibrated_for(record, "/runs/a/model_0010.pth")


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
    with pytest.raises(ValueError, match=rf"{THRESHOLDS_FILE}' is damaged \({what}.*delete it and calibrate again"):
        load_thresholds(str(path))
