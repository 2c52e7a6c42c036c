"""Camera ids as a model input (SIE): what a model needs, and the one-line refusals of bad ids."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from reid.export.camera_ids import NO_CAMIDS, check_camids
from reid.inference.backends import _check_inputs


class _Sie(nn.Module):
    uses_camids = True
    num_cameras = 6


@pytest.mark.parametrize("camids", [[0, 5, 2], np.array([0, 5, 2], dtype=np.int32), torch.tensor([0, 5, 2]),
                                    np.array([0, 5, 2], dtype=np.uint8)])
def test_camera_ids_become_int64_tensors(camids):
    ids = check_camids(camids, 3, 6, "m.onnx")
    assert ids.dtype == torch.int64 and ids.tolist() == [0, 5, 2]


@pytest.mark.parametrize("camids, batch, error, fragment", [
    (None, 2, ValueError, "m.onnx uses camera ids (SIE, 6 cameras): pass each image's camera id"),
    # Only the ids out of range are named (not the batch's min..max), with the first image that has one.
    ([0, 6], 2, ValueError, "Camera id 6 (at image 1) is outside the cameras m.onnx knows (0..5)"),
    ([-1, 2, 7, -1], 4, ValueError, "Camera ids -1, 7 (at image 0, and 2 more images) are outside the cameras m.onnx"),
    (list(range(10, 17)), 7, ValueError, "Camera ids 10, 11, 12, 13, 14, ... (at image 0, and 6 more images)"),
    # An id past int64 is shown as it is, not wrapped around to a negative number.
    (np.array([2**63 + 5, 0], dtype=np.uint64), 2, ValueError, f"Camera id {2**63 + 5} (at image 0) is outside"),
    ([2**70, 0], 2, ValueError, f"Camera id {2**70} (at image 0) is outside"),
    ([0, 1, 2], 2, ValueError, "2 images but 3 camera ids for m.onnx: pass one camera id per image"),
    ([0], 2, ValueError, "2 images but 1 camera ids for m.onnx"),
    ([[0, 1]], 2, ValueError, "camids of shape [2], got [1, 2]"),
    (np.array([0.0, 1.0]), 2, TypeError, "Camera ids for m.onnx must be integers (int64), got float64"),
    ([0.0, 1.0], 2, TypeError, "must be integers (int64), got float64"),  # a list: its values' type, not "list"
    ([0, None], 2, TypeError, "must be integers (int64), got NoneType"),
    (["0", "1"], 2, TypeError, "must be integers (int64), got str"),
    (torch.tensor([True, False]), 2, TypeError, "must be integers (int64), got bool"),
    (3, 1, TypeError, "Camera ids for m.onnx must be a sequence with one integer per image"),
    ((c for c in [0, 1]), 2, TypeError, "(a list, numpy array or tensor), got generator"),
])
def test_bad_camera_ids_are_one_line_errors(camids, batch, error, fragment):
    with pytest.raises(error) as info:
        check_camids(camids, batch, 6, "m.onnx")
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_bad_camera_ids_name_the_image_they_belong_to():
    with pytest.raises(ValueError, match=r"Camera id 9 \(at b.jpg\) is outside the cameras this model knows"):
        check_camids([1, 9, 2], 3, 6, "this model", ["a.jpg", "b.jpg", "c.jpg"])


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
    _check_inputs("m.onnx", ["images", "camids"], _Sie(), 6)
    _check_inputs("m.onnx", ["images", "camids"], _Sie(), None)  # a file without the record: ids checked per call
    _check_inputs("m.onnx", ["images"], nn.Identity(), None)


@pytest.mark.parametrize("recorded", [8, 4])
def test_runtimes_refuse_a_file_of_another_camera_count(recorded):
    # 8: the model's id 7 would reach a graph without it; 4: ids 0..3 would take the other model's embeddings.
    with pytest.raises(ValueError) as info:
        _check_inputs("m.onnx", ["images", "camids"], _Sie(), recorded)
    message = str(info.value)
    assert f"m.onnx was exported from a model with {recorded} cameras (SIE), this model has 6" in message
    assert "export this one again with tools/export.py" in message and "\n" not in message


def test_the_no_camera_ids_message_says_where_they_come_from():
    assert "\n" not in NO_CAMIDS and "list file of 'path pid camid' lines" in NO_CAMIDS and "camids=" in NO_CAMIDS


class _SieFeatures(nn.Module):
    """A model with SIE whose feature is its input's mean pixel and camera id."""

    uses_camids = True
    num_cameras = 6
    feature_dim = 2

    def forward(self, x, camids=None):
        return torch.stack([x.float().mean(dim=(1, 2, 3)), camids.float() + 1], dim=1)


def _sie_predictor():
    from reid.config import get_cfg
    from reid.inference import Predictor

    cfg = get_cfg()
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TEST = [16, 8]
    return Predictor(_SieFeatures(), cfg, batch_size=2)


@pytest.mark.parametrize("camids, error, fragment", [
    ([0, 1, 2, 3, 4, 5, 5], ValueError, "5 images but 7 camera ids for this model"),  # was: extra ids dropped
    ([0, 1, 2, 3], ValueError, "5 images but 4 camera ids for this model"),  # was: "shape [1], got [0]"
    (3, TypeError, "must be a sequence with one integer per image"),
    ((c for c in range(5)), TypeError, "got generator"),
])
def test_the_predictor_checks_every_camera_id_before_extracting(camids, error, fragment, tmp_path):
    from PIL import Image

    predictor = _sie_predictor()
    images = [np.full((12, 6, 3), 10 * i, dtype=np.uint8) for i in range(5)]
    paths = []
    for i, img in enumerate(images):
        paths.append(str(tmp_path / f"im{i}.png"))
        Image.fromarray(img).save(paths[-1])
    for extract, given in ((predictor.extract_arrays, images), (predictor.extract_paths, paths)):
        with pytest.raises(error) as info:
            extract(given, camids=camids)
        message = str(info.value)
        assert fragment in message and "\n" not in message, extract.__name__
    with pytest.raises(ValueError, match=f"Camera id 6 \\(at {tmp_path}/im4.png\\) is outside the cameras this model"):
        predictor.extract_paths(paths, camids=[0, 1, 2, 3, 6])
    with pytest.raises(ValueError, match=r"Camera id 6 \(at image 4\) is outside the cameras this model knows \(0..5\)"):
        predictor.extract_arrays(images, camids=[0, 1, 2, 3, 6])
    # Valid ids reach the model row for row across batches of 2: feature (mean pixel 10 i, id + 1), normalised.
    feats = predictor.extract_arrays(images, camids=[5, 0, 1, 2, 3])
    np.testing.assert_allclose(feats[0], [0, 1], atol=1e-6)
    np.testing.assert_allclose(feats[1:, 1] / feats[1:, 0], np.array([1, 2, 3, 4]) / np.array([10, 20, 30, 40]),
                               rtol=1e-5)


def test_search_refuses_queries_without_camera_ids_before_building_the_index(tmp_path):
    from PIL import Image

    from reid.cli.search import search_command
    from reid.search.gallery import Gallery, save_gallery

    predictor = _sie_predictor()
    gallery = save_gallery(Gallery(np.array([[1.0, 0.0], [0.0, 1.0]]), ["a.png", "b.png"]), tmp_path / "g.npz")
    queries = tmp_path / "queries"
    queries.mkdir()
    Image.fromarray(np.full((12, 6, 3), 50, dtype=np.uint8)).save(queries / "q.png")
    saved = tmp_path / "index.npz"
    with pytest.raises(ValueError, match="these images have none"):
        search_command(predictor, gallery, [str(queries)], k=1, save_index_path=str(saved), log=lambda *a: None)
    assert not saved.exists()  # was: the index built and saved first, then the error
    listed = tmp_path / "queries.txt"
    listed.write_text("queries/q.png 0 5\n")
    records = search_command(predictor, gallery, [str(listed)], k=1, save_index_path=str(saved), log=lambda *a: None)
    # feature (mean pixel 50, camera 5 + 1) normalised: closest to the first gallery row
    assert saved.exists() and records[0]["matches"][0]["path"] == "a.png"
