"""Camera ids as a model input (SIE): what a model needs, and the one-line refusals of bad ids."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from reid.inference.camera_ids import NO_CAMIDS, check_camids, model_cameras
from reid.inference.runtimes import _check_inputs


class _Sie(nn.Module):
    uses_camids = True
    num_cameras = 6


def test_model_cameras_is_the_sie_camera_count_or_zero():
    assert model_cameras(_Sie()) == 6
    assert model_cameras(nn.Identity()) == 0  # no uses_camids: images only

    class Vague(nn.Module):
        uses_camids = True

    with pytest.raises(ValueError, match="Vague uses camera ids but does not say how many"):
        model_cameras(Vague())


@pytest.mark.parametrize("camids", [[0, 5, 2], np.array([0, 5, 2], dtype=np.int32), torch.tensor([0, 5, 2]),
                                    np.array([0, 5, 2], dtype=np.uint8)])
def test_camera_ids_become_int64_tensors(camids):
    ids = check_camids(camids, 3, 6, "m.onnx")
    assert ids.dtype == torch.int64 and ids.tolist() == [0, 5, 2]


@pytest.mark.parametrize("camids, batch, error, fragment", [
    (None, 2, ValueError, "m.onnx uses camera ids (SIE, 6 cameras): pass each image's camera id"),
    ([0, 6], 2, ValueError, "Camera ids 0..6 are outside the cameras m.onnx knows (0..5)"),
    ([-1, 2], 2, ValueError, "Camera ids -1..2 are outside the cameras m.onnx knows (0..5)"),
    ([0, 1, 2], 2, ValueError, "m.onnx needs one camera id per image: camids of shape [2], got [3]"),
    ([[0, 1]], 2, ValueError, "camids of shape [2], got [1, 2]"),
    (np.array([0.0, 1.0]), 2, TypeError, "Camera ids for m.onnx must be integers (int64), got float64"),
    (torch.tensor([True, False]), 2, TypeError, "must be integers (int64), got torch.bool"),
])
def test_bad_camera_ids_are_one_line_errors(camids, batch, error, fragment):
    with pytest.raises(error) as info:
        check_camids(camids, batch, 6, "m.onnx")
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_file_without_a_camera_count_takes_any_non_negative_id():
    assert check_camids([0, 40], 2, None, "m.pt2").tolist() == [0, 40]
    with pytest.raises(ValueError, match=r"outside the cameras m.pt2 knows \(0 or more\)"):
        check_camids([-3, 0], 2, None, "m.pt2")


def test_runtimes_refuse_a_file_whose_inputs_do_not_fit_the_model():
    with pytest.raises(ValueError, match="m.onnx takes images only, but this model uses camera ids") as info:
        _check_inputs("m.onnx", ["images"], _Sie(), None)
    assert "export it again with tools/export.py" in str(info.value)
    with pytest.raises(ValueError, match=r"m.onnx takes camera ids \(camids\) and this model does not"):
        _check_inputs("m.onnx", ["images", "camids"], nn.Identity(), None)
    _check_inputs("m.onnx", ["images", "camids"], _Sie(), '{"num_cameras": 6}')
    _check_inputs("m.onnx", ["images", "camids"], _Sie(), None)  # a file without the record: ids checked per call
    _check_inputs("m.onnx", ["images"], nn.Identity(), None)


@pytest.mark.parametrize("recorded", [8, 4])
def test_runtimes_refuse_a_file_of_another_camera_count(recorded):
    # 8: the model's id 7 would reach a graph without it; 4: ids 0..3 would take the other model's embeddings.
    with pytest.raises(ValueError) as info:
        _check_inputs("m.onnx", ["images", "camids"], _Sie(), f'{{"num_cameras": {recorded}}}')
    message = str(info.value)
    assert f"m.onnx was exported from a model with {recorded} cameras (SIE), this model has 6" in message
    assert "export this one again with tools/export.py" in message and "\n" not in message


def test_the_no_camera_ids_message_says_where_they_come_from():
    assert "\n" not in NO_CAMIDS and "list file of 'path pid camid' lines" in NO_CAMIDS and "camids=" in NO_CAMIDS
