"""What differs between the supported BoxMOT versions, mapped in one place (reid/tracking/boxmot_compat.py)."""
from __future__ import annotations

import pytest

from reid.tracking import boxmot_compat as compat
from reid.tracking.tracker_options import check_tracker_options, read_spec
from reid.tracking.tracker_runs import TRACKERS
from reid.tracking.tracker_tuning import search_space

# The shape of BoxMOT 23.0.0's configs/trackers/<name>.yaml, shortened: 25 renamed with_reid and embedding_off.
BOTSORT_23 = """
track_buffer:
  type: randint
  default: 40
  range: [20, 81]
with_reid:
  type: choice
  default: True
  options: [False, True]
  activates:
    appearance_thresh:
      type: uniform
      default: 0.62
      range: [0.1, 0.8]
"""
DEEPOCSORT_23 = """
w_association_emb:
  type: uniform
  default: 0.75
  range: [0.5, 0.9]
embedding_off:
  type: choice
  default: false
  options: [True, False]
"""


def test_versions_in_the_range_are_supported_and_others_are_one_line():
    assert compat.is_supported(compat.OLDEST) and compat.is_supported(compat.NEWEST) and compat.DEFAULT == compat.NEWEST
    assert compat.parse_version("23.0.1.dev2") == (23, 0, 1) and compat.is_supported("24.1")
    for version in ("22.0.0", "25.0.1", "26", "latest", ""):
        assert not compat.is_supported(version)
    with pytest.raises(ValueError, match=r"^x: BoxMOT 22\.0\.0 is not supported: this toolkit drives BoxMOT "
                                         rf"{compat.OLDEST} to {compat.NEWEST} "):
        compat.check_version("22.0.0", "x: ")
    assert compat.chosen_version({}) == compat.DEFAULT
    assert compat.chosen_version({"REID_BOXMOT_VERSION": f" {compat.OLDEST} "}) == compat.OLDEST
    assert compat.chosen_version({"REID_BOXMOT_VERSION": "oldest"}) == compat.OLDEST  # what make test-min sets
    assert compat.chosen_version({"REID_BOXMOT_VERSION": "newest"}) == compat.NEWEST
    with pytest.raises(ValueError, match="REID_BOXMOT_VERSION=9: BoxMOT 9 is not supported"):
        compat.chosen_version({"REID_BOXMOT_VERSION": "9"})


def test_our_options_reach_an_older_boxmot_under_its_names_and_the_newest_as_they_are():
    for name, kind in TRACKERS.items():
        for options in (kind.motion_options or {}, kind.appearance_options):
            assert compat.to_installed(name, options, compat.NEWEST) == options
    old = compat.OLDEST
    assert compat.to_installed("botsort", {"use_embeddings": True, "appearance_thresh": 0.3}, old) == \
        {"with_reid": True, "appearance_thresh": 0.3}
    assert compat.to_installed("boosttrack", {"use_embeddings": False}, old) == {"with_reid": False}
    assert compat.to_installed("hybridsort", {"use_embeddings": True}, old) == {"with_reid": True}
    # DeepOCSORT's older setting means the opposite
    assert compat.to_installed("deepocsort", {"use_embeddings": True, "max_age": 9}, old) == \
        {"embedding_off": False, "max_age": 9}
    assert compat.to_installed("deepocsort", {"use_embeddings": False}, old) == {"embedding_off": True}
    assert compat.to_installed("strongsort", {"max_cos_dist": 0.2}, old) == {"max_cos_dist": 0.2}


def test_an_older_boxmots_tracker_files_are_read_under_our_names(tmp_path):
    (tmp_path / "botsort.yaml").write_text(BOTSORT_23)
    (tmp_path / "deepocsort.yaml").write_text(DEEPOCSORT_23)
    botsort = read_spec(str(tmp_path / "botsort.yaml"))
    assert "with_reid" not in botsort and botsort["use_embeddings"]["default"] is True
    assert botsort["appearance_thresh"]["parent"] == "use_embeddings"
    check_tracker_options({"use_embeddings": True, "appearance_thresh": 0.3}, botsort, "botsort",
                          str(tmp_path / "botsort.yaml"), distance="appearance_thresh")
    assert set(search_space(botsort)) == {"track_buffer", "appearance_thresh"}  # use_embeddings is the run's, fixed
    deep = read_spec(str(tmp_path / "deepocsort.yaml"))
    assert "embedding_off" not in deep and deep["use_embeddings"]["default"] is True
    assert deep["use_embeddings"]["options"] == [False, True]
    with pytest.raises(ValueError, match=r"no setting 'embedding_off' \(name it use_embeddings, BoxMOT 25's name"):
        check_tracker_options({"embedding_off": True}, deep, "deepocsort", str(tmp_path / "deepocsort.yaml"))
