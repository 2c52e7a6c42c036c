"""Calibrated decision thresholds: written from a held-out split with the pairs behind them, refused
at FARs the split cannot resolve, read back checked as a whole."""
import copy
import json

import numpy as np
import pytest

from reid.evaluation.confidence import pairs_to_resolve, rate_interval, rate_upper_bound
from reid.evaluation.thresholds import (
    THRESHOLDS_FILE,
    calibrate,
    calibrated_for,
    describe_threshold,
    extraction_difference,
    find_thresholds,
    identities_to_resolve,
    load_thresholds,
    resolution_known,
    save_thresholds,
    similarity_at,
)


def split(seed=0, ids=20, queries=60, gallery=300):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((ids, 16)).astype(np.float32)
    q_pids, g_pids = rng.integers(0, ids, queries), rng.integers(0, ids, gallery)
    q = centers[q_pids] + 0.8 * rng.standard_normal((queries, 16)).astype(np.float32)
    g = centers[g_pids] + 0.8 * rng.standard_normal((gallery, 16)).astype(np.float32)
    return q, g, q_pids, g_pids, rng.integers(0, 3, queries), rng.integers(0, 3, gallery)


def pair_similarities(q, g, q_pids, g_pids, q_cams, g_cams):
    """Genuine and impostor cosine similarities, counted pair by pair (not through the verification
    code): same id + same camera is junk; same id otherwise genuine; different ids impostors."""
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    gn = g / np.linalg.norm(g, axis=1, keepdims=True)
    sim = qn.astype(np.float64) @ gn.T.astype(np.float64)
    same_id, same_cam = q_pids[:, None] == g_pids[None], q_cams[:, None] == g_cams[None]
    return sim[same_id & ~same_cam], sim[~same_id]


def test_a_calibrated_similarity_accepts_the_pairs_its_far_and_tar_say(tmp_path):
    data = split()
    record = calibrate(*data, fars=(0.1, 0.01))
    genuine, impostor = pair_similarities(*data)
    assert record["num_impostor"] == impostor.size and record["num_genuine"] == genuine.size
    assert record["num_identities"] == 20 and record["unresolved"] == {}
    for far in (0.1, 0.01):
        entry = record["thresholds"][f"{far:g}"]
        accepted = int(np.sum(impostor > entry["similarity"] + 1e-6))
        assert accepted / impostor.size <= far  # the promise: never more false accepts than asked
        assert accepted / impostor.size >= far - 0.01  # and the threshold is not needlessly strict
        # The counts behind it, and their 95% bounds from those counts.
        assert entry["num_impostor"] == impostor.size and entry["num_genuine"] == genuine.size
        assert abs(entry["accepted_impostors"] - accepted) <= 1 and entry["accepted_impostors"] <= far * impostor.size
        assert entry["far_upper"] == pytest.approx(rate_upper_bound(entry["accepted_impostors"], impostor.size))
        assert entry["far_reached"] <= far < entry["far_upper"]
        assert entry["tar"] == pytest.approx(np.mean(genuine > entry["similarity"] + 1e-6), abs=0.005)
        assert entry["tar_interval"] == pytest.approx(list(rate_interval(entry["accepted_genuine"], genuine.size)))
        assert entry["tar_interval"][0] < entry["tar"] < entry["tar_interval"][1]
    path = save_thresholds(str(tmp_path), record)
    assert path.endswith(THRESHOLDS_FILE) and find_thresholds(str(tmp_path / "model_final.pth")) == path
    (tmp_path / "other").mkdir()
    assert find_thresholds(str(tmp_path / "other" / "model_final.pth")) is None
    back = load_thresholds(path)
    assert back["thresholds"] == record["thresholds"] and resolution_known(back)
    assert similarity_at(back, 0.01, path) == record["thresholds"]["0.01"]["similarity"]
    line = describe_threshold(back, 0.01)
    assert f"of {impostor.size:,} validation impostor pairs accepted" in line and "Clopper-Pearson" in line
    with pytest.raises(ValueError, match=r"has thresholds for FAR 0.01, 0.1, not 0.001"):
        similarity_at(back, 1e-3, path)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        similarity_at(back, 3, path)


def few_impostors():
    """The issue's split: 3 identities, 4 queries and 24 gallery crops, 69 impostor pairs."""
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((3, 16)).astype(np.float32)
    q_pids = np.array([0, 0, 1, 2])
    g_pids = np.array([0] * 3 + [1] * 10 + [2] * 11)
    q = centers[q_pids] + 0.5 * rng.standard_normal((4, 16)).astype(np.float32)
    g = centers[g_pids] + 0.5 * rng.standard_normal((24, 16)).astype(np.float32)
    return q, g, q_pids, g_pids, np.zeros(4, np.int64), np.ones(24, np.int64)


def test_a_far_the_split_cannot_resolve_gets_no_threshold_and_is_refused_with_the_identities_it_needs(tmp_path):
    data = few_impostors()
    impostors = pair_similarities(*data)[1].size
    assert impostors == 69
    record = calibrate(*data, fars=(1e-4, 0.1))
    assert set(record["thresholds"]) == {"0.1"}  # 69 >= 29 pairs: FAR 0.1 can be shown
    assert record["unresolved"] == {"0.0001": {"num_impostor": 69, "num_genuine": record["num_genuine"],
                                               "impostors_needed": 29956}}
    path = save_thresholds(str(tmp_path), record)
    back = load_thresholds(path)
    # 69 pairs from 3 identities: 11.5 per ordered pair of identities; 29,956 need V (V - 1) >= 2605.0.
    assert identities_to_resolve(69, 3, 29956) == 52 and 11.5 * 52 * 51 >= 29956 > 11.5 * 51 * 50
    with pytest.raises(ValueError) as err:
        similarity_at(back, 1e-4, path)
    message = str(err.value)
    assert "cannot resolve FAR 0.0001: its validation split had 69 impostor pairs" in message
    assert "needs at least 29,956" in message and "about 49 more validation identities" in message
    assert "TEST.VAL_IDS 52" in message and "Use a resolved FAR (0.1), or pass --threshold S" in message
    assert "\n" not in message


def write(tmp_path, record):
    path = tmp_path / THRESHOLDS_FILE
    path.write_text(json.dumps(record) if not isinstance(record, str) else record)
    return str(path)


@pytest.fixture(scope="module")
def good():
    record = calibrate(*split(), fars=(0.1, 0.05, 0.01))
    record["weights"] = "model_final.pth"
    return json.loads(json.dumps(record))


def edited(record, change):
    out = copy.deepcopy(record)
    change(out)
    return out


def _set(path, value):
    def change(record):
        node = record
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return change


def _swap_similarities(record):
    t = record["thresholds"]
    t["0.1"]["similarity"], t["0.01"]["similarity"] = t["0.01"]["similarity"], t["0.1"]["similarity"]
    t["0.1"]["distance"], t["0.01"]["distance"] = t["0.01"]["distance"], t["0.1"]["distance"]


@pytest.mark.parametrize("change, field, what", [
    (_set(["thresholds", "0.01", "similarity"], True), "thresholds.0.01.similarity", "True is not a finite number"),
    (_set(["thresholds", "0.01", "distance"], 0.1), "thresholds.0.01.distance", "contradicts similarity"),
    (_set(["thresholds", "0.01", "similarity"], float("nan")), "thresholds.0.01.similarity", "not a finite number"),
    (_set(["thresholds", "0.01", "similarity"], 7), "thresholds.0.01.similarity", "outside"),
    (_set(["thresholds", "0.01", "tar"], 1.5), "thresholds.0.01.tar", "outside [0, 1]"),
    (_set(["thresholds", "0.01", "far_reached"], 0.02), "thresholds.0.01.far_reached", "outside"),
    (_set(["thresholds", "0.01", "far_upper"], 0.001), "thresholds.0.01.far_upper", "contradicts the counts"),
    (_set(["thresholds", "0.01", "tar_interval"], [0.0, 1.0]), "thresholds.0.01.tar_interval", "contradicts"),
    (_set(["thresholds", "0.01", "accepted_impostors"], 3), "thresholds.0.01.accepted_impostors", "contradicts"),
    (_set(["thresholds", "0.01", "num_impostor"], False), "thresholds.0.01.num_impostor", "not an integer"),
    (_swap_similarities, "thresholds.0.05.similarity", "at the smaller FAR 0.01 (a larger FAR accepts more)"),
    (_set(["metric"], "euclidean"), "metric", "'euclidean' is not one whose thresholds this toolkit applies"),
    (_set(["metric"], None), "metric", "missing"),
    (_set(["format_version"], "2"), "format_version", "'2' is not an integer"),
    (_set(["format_version"], True), "format_version", "True is not an integer"),
    (_set(["format_version"], 0), "format_version", "0 is not one this toolkit reads (1, 2)"),
    (_set(["weights"], ["model_final.pth"]), "weights", "is not the file name of a weights file"),
    (_set(["weights"], "../../elsewhere/model.pth"), "weights", "is not the file name"),
    (_set(["num_impostor"], True), "num_impostor", "True is not an integer"),
    (_set(["num_impostor"], 100), "thresholds.0.01", "100 impostor pairs cannot resolve FAR 0.01 (it needs 299)"),
    (_set(["num_genuine"], 10 ** 30), "num_genuine", "outside"),
    (_set(["thresholds"], [0.5]), "thresholds", "is not a mapping of FARs"),
    (_set(["thresholds", "2"], {"similarity": 0.5}), "thresholds.2", "not a false accept rate"),
    (_set(["thresholds", "1e-2"], {"similarity": 0.5}), "thresholds.1e-2", "a second entry for FAR 0.01"),
    (_set(["unresolved"], {"0.001": {"num_impostor": 5}}), "unresolved.0.001.num_impostor", "not the split's count"),
    (_set(["eer"], "0.2"), "eer", "not a finite number"),
    (_set(["extraction"], [64, 32]), "extraction", "is not a mapping"),
    (_set(["extraction"], {"input_size": [64, True], "flip": False}), "extraction.input_size", "is not [height, width]"),
    (_set(["extraction"], {"input_size": [10 ** 6, 32], "flip": False}), "extraction.input_size", "(1 to 4096)"),
    (_set(["extraction"], {"input_size": [64, 32], "flip": "no"}), "extraction.flip", "is not true or false"),
])
def test_a_damaged_or_contradicting_thresholds_file_is_one_line_naming_the_field(tmp_path, good, change, field, what):
    path = write(tmp_path, edited(good, change))
    with pytest.raises(ValueError) as err:
        load_thresholds(path)
    message = str(err.value)
    assert message.startswith(f"Thresholds file {path!r} is damaged ({field}: "), message
    assert what in message and "delete it and calibrate again" in message and "\n" not in message


@pytest.mark.parametrize("content, what", [("not json", "not JSON"), ("[1, 2]", "the file: not a JSON object"),
                                           ('{"format_version": 2}', "metric: missing")])
def test_a_file_that_is_no_thresholds_record_is_one_line(tmp_path, content, what):
    with pytest.raises(ValueError, match=rf"{THRESHOLDS_FILE}' is damaged \({what}.*delete it and calibrate again"):
        load_thresholds(write(tmp_path, content))


def test_a_newer_format_says_to_update(tmp_path, good):
    path = write(tmp_path, edited(good, _set(["format_version"], 3)))
    with pytest.raises(ValueError, match=r"has format_version 3, written by a newer circle-reid \(this one reads 1, 2\)"):
        load_thresholds(path)


def version_1(record, counts=True):
    """The record as the toolkit wrote it before the counts behind each threshold (format 1)."""
    old = {"format_version": 1, "metric": "cosine", "rule": record["rule"], "source": record["source"],
           "thresholds": {k: {f: e[f] for f in ("similarity", "distance", "tar", "far_reached")}
                          for k, e in record["thresholds"].items()},
           "eer": record["eer"], "weights": "model_final.pth"}
    if counts:
        old.update(num_genuine=record["num_genuine"], num_impostor=record["num_impostor"])
    return old


def test_a_version_1_file_is_read_with_its_split_counts_and_its_unresolvable_fars_set_aside(tmp_path):
    data = few_impostors()
    full = calibrate(*data, fars=(0.1, 0.05))  # both resolved with 69 pairs (need 29 and 59)
    old = version_1(full)
    # What format 1 wrote for a FAR its 69 pairs cannot resolve: a threshold all the same.
    old["thresholds"]["0.001"] = {"similarity": 0.99, "distance": 0.01, "tar": 0.0, "far_reached": 0.0}
    path = write(tmp_path, old)
    back = load_thresholds(path)
    assert back["format_version"] == 2 and set(back["thresholds"]) == {"0.1", "0.05"}
    assert back["thresholds"]["0.1"] == full["thresholds"]["0.1"]  # the counts and bounds filled in
    assert back["unresolved"]["0.001"]["impostors_needed"] == pairs_to_resolve(1e-3)
    with pytest.raises(ValueError, match=r"cannot resolve FAR 0.001: its validation split had 69 impostor pairs"):
        similarity_at(back, 1e-3, path)
    assert similarity_at(back, 0.1, path) == full["thresholds"]["0.1"]["similarity"]


def test_a_file_without_counts_loads_but_its_thresholds_are_never_applied(tmp_path, good):
    path = write(tmp_path, version_1(good, counts=False))
    back = load_thresholds(path)
    assert not resolution_known(back) and set(back["thresholds"]) == {"0.1", "0.05", "0.01"}
    with pytest.raises(ValueError, match=r"does not record how many impostor pairs its thresholds rest on.*"
                                         r"calibrate again.*--threshold S"):
        similarity_at(back, 0.1, path)


def test_thresholds_hold_only_for_the_weights_they_were_calibrated_on():
    record = {"weights": "model_best.pth", "thresholds": {"0.01": {"similarity": 0.5}}}
    assert calibrated_for(record, "/runs/a/model_best.pth")
    assert not calibrated_for(record, "/runs/a/model_0010.pth")


def test_thresholds_hold_only_for_features_made_as_they_were_calibrated_on(tmp_path, good):
    """A search with TEST.FLIP or INPUT.SIZE_TEST other than the calibration's gives other scores: a
    threshold 'at FAR 0.05' then accepted a wrong person with exit code 0 (flip changed the scores)."""
    from reid.config import get_cfg

    cfg = get_cfg()
    cfg.INPUT.SIZE_TEST, cfg.TEST.FLIP = [64, 32], False
    record = load_thresholds(write(tmp_path, {**good, "extraction": {"input_size": [64, 32], "flip": False}}))
    assert record["extraction"] == {"input_size": [64, 32], "flip": False}
    assert extraction_difference(record, cfg) is None
    cfg.TEST.FLIP = True
    assert extraction_difference(record, cfg) == "TEST.FLIP True (calibrated with False)"
    cfg.INPUT.SIZE_TEST = [96, 48]
    assert "INPUT.SIZE_TEST [96, 48] (calibrated with [64, 32])" in extraction_difference(record, cfg)
    assert extraction_difference(load_thresholds(write(tmp_path, good)), cfg) is None  # not recorded: not known


def test_a_file_that_resolves_no_far_says_so_instead_of_listing_none(tmp_path):
    """Before: "Use a resolved FAR (none)" and "has thresholds for FAR none, not 0.5"."""
    record = calibrate(*few_impostors(), fars=(1e-4,))  # 69 pairs: nothing resolved
    path = write(tmp_path, record)
    back = load_thresholds(path)
    for far, says in ((1e-4, "Its split resolves no FAR: calibrate on more validation identities, or pass"),
                      (0.5, "has no threshold at any FAR (its split resolves none), and none at 0.5")):
        with pytest.raises(ValueError) as err:
            similarity_at(back, far, path)
        assert says in str(err.value) and "(none)" not in str(err.value) and "FAR none" not in str(err.value)
