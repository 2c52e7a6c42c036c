"""--tracker-option values checked against BoxMOT's settings files (reid/tracking/tracker_options.py)."""
from __future__ import annotations

import sys

import pytest

from reid.tracking.tracker_options import check_options_in_env, check_tracker_options, read_spec

# The shape of BoxMOT's configs/trackers/botsort.yaml (25.0.0), shortened.
BOTSORT = """
track_high_thresh:
  type: uniform
  default: 0.63
  range: [0.3, 0.7]
track_buffer:
  type: randint
  default: 40
  range: [20, 81]
asso_func:
  type: choice
  default: iou
  options: [iou, giou, diou]
use_cmc:
  type: choice
  default: True
  options: [False, True]
  activates:
    cmc_method:
      type: choice
      default: sof
      options: [sof, ecc]
frame_rate:
  type: choice
  default: 30
  options: [25, 30]
use_embeddings:
  type: choice
  default: True
  options: [False, True]
  activates:
    appearance_thresh:
      type: uniform
      default: 0.62
      range: [0.1, 0.8]
    unconfirmed_emb_scale:
      type: uniform
      default: 2.5
      range: [1.0, 4.0]
variable_dt:
  default: false
kf_time_unit:
  default: null
kf_process_position_scale:
  default: 1.0
"""


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "botsort.yaml"
    path.write_text(BOTSORT)
    return read_spec(str(path)), str(path)


def test_settings_a_setting_activates_are_settings_too(spec):
    settings, _ = spec
    assert {"cmc_method", "appearance_thresh", "unconfirmed_emb_scale", "kf_time_unit"} <= set(settings)


@pytest.mark.parametrize("options", [
    {"track_high_thresh": 0.0}, {"track_high_thresh": 1}, {"track_buffer": 500}, {"asso_func": "giou"},
    {"use_cmc": False}, {"cmc_method": "ecc"}, {"frame_rate": 15}, {"appearance_thresh": 1.4},
    {"unconfirmed_emb_scale": 7.5}, {"variable_dt": True}, {"kf_time_unit": "s"}, {"kf_process_position_scale": 3},
])
def test_values_of_each_settings_kind_pass_beyond_the_tuning_range(spec, options):
    settings, path = spec
    check_tracker_options(options, settings, "botsort", path, distance="appearance_thresh")


@pytest.mark.parametrize("options, message", [
    ({"track_bufer": 60}, r"track_bufer=60: botsort has no setting 'track_bufer' \(did you mean track_buffer\?\); "
                          r"its settings are those of .*botsort.yaml"),
    ({"track_high_thresh": 5.0}, r"track_high_thresh=5.0: botsort's track_high_thresh is a fraction in \[0, 1\] "
                                 r"\(BoxMOT's default 0.63, tuned in \[0.3, 0.7\]\); give such a value"),
    ({"track_buffer": -3}, r"track_buffer=-3: .* is a whole number in \[1, 1000000\]"),
    ({"track_buffer": 2.5}, r"track_buffer=2.5: .* is a whole number in \[1, 1000000\]"),
    ({"track_buffer": 1e308}, r"track_buffer=1e\+308: .* is a whole number in \[1, 1000000\]"),
    ({"use_cmc": "maybe"}, r"use_cmc=maybe: botsort's use_cmc is true or false"),
    ({"asso_func": "euclid"}, r"asso_func=euclid: .* is one of iou, giou, diou"),
    ({"frame_rate": True}, r"frame_rate=True: .* is a whole number in \[1, 1000000\]"),
    ({"appearance_thresh": 2.5}, r"appearance_thresh=2.5: .* is a cosine distance in \(0, 2\]"),
    ({"unconfirmed_emb_scale": -1}, r"unconfirmed_emb_scale=-1: .* is a number in \[0, 1000000\]"),
    ({"unconfirmed_emb_scale": [1, 2]}, r"unconfirmed_emb_scale=\[1, 2\]: .* is a number in \[0, 1000000\]"),
    ({"variable_dt": "no"}, r"variable_dt=no: .* is true or false"),
    ({"track_high_thresh": float("nan")}, r"track_high_thresh=nan: .* is a fraction"),
])
def test_a_value_outside_its_settings_kind_is_one_line(spec, options, message):
    settings, path = spec
    with pytest.raises(ValueError, match=message):
        check_tracker_options(options, settings, "botsort", path, distance="appearance_thresh")


def test_a_boxmot_without_settings_files_passes_the_options_with_a_note(tmp_path):
    said = []
    # a "BoxMOT" package without configs/: this Python finds no boxmot at all
    check_options_in_env({"track_buffer": 60}, sys.executable, "botsort", log=said.append)
    assert len(said) == 1 and "passed to it unchecked" in said[0]
    check_options_in_env({}, sys.executable, "botsort", log=said.append)  # nothing given: nothing to check or say
    assert len(said) == 1


@pytest.mark.slow
def test_the_installed_boxmots_files_take_the_toolkits_own_settings_and_refuse_a_typo(tracker_python, tmp_path,
                                                                                      capsys):
    from reid.tracking.tracker_options import spec_path
    from reid.tracking.tracker_runs import TRACKERS
    from tests._tools import load_tool
    from tests.tracking.sequence_files import write_sequence

    for name, kind in TRACKERS.items():
        path = spec_path(tracker_python, name)
        own = {**kind.appearance_options, **(kind.motion_options or {})}
        if kind.threshold_option:
            own[kind.threshold_option] = 0.35
        check_tracker_options(own, read_spec(path), name, path, distance=kind.threshold_option)
    seq = write_sequence(str(tmp_path / "s"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n")
    rc = load_tool("track").main(["--sequences", seq, "--no-reid", "--output", str(tmp_path / "out"),
                                  "--tracker-python", tracker_python, "--tracker-option", "track_bufer=60"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "did you mean track_buffer?" in err[0]
    assert not (tmp_path / "out" / "features").exists()  # refused before any tracking
