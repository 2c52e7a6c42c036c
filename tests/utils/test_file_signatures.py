"""A file is named for what its first bytes say it is."""
import io

import cv2
import numpy as np
import pytest
import torch

from reid.utils.file_signatures import content_kind, file_kind


def _torch(legacy):
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def _npz():
    buf = io.BytesIO()
    np.savez(buf, feats=np.ones(3))
    return buf.getvalue()


@pytest.mark.parametrize("data, kind", [
    (lambda: cv2.imencode(".jpg", np.zeros((4, 4, 3), np.uint8))[1].tobytes(), "a JPEG image"),
    (lambda: cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes(), "a PNG image"),
    (lambda: cv2.imencode(".bmp", np.zeros((4, 4, 3), np.uint8))[1].tobytes(), "a BMP image"),
    (lambda: _torch(False), "a torch checkpoint"),
    (lambda: _torch(True), "a torch checkpoint (legacy format)"),
    (_npz, "a NumPy .npz archive"),
    (lambda: b"", "an empty file"),
    (lambda: b"MODEL:\n  BACKBONE:\n", "a YAML/text file"),
    (lambda: b'{"thresholds": {}}', "a JSON/text file"),
    (lambda: "caf\u00e9 au lait\n".encode() * 2000, "a text file"),  # a character cut at the 4 kB mark is text
    (lambda: b"\x89HDF\r\n\x1a\n\0\0", "an HDF5 file (a MATLAB .mat?)"),
    (lambda: bytes(range(256)), "binary data"),
])
def test_content_kinds(tmp_path, data, kind):
    path = tmp_path / "file"
    path.write_bytes(data())
    assert file_kind(str(path)) == kind
    assert content_kind(data()[:4096]) == kind


def test_an_unreadable_path_is_said_so(tmp_path):
    assert file_kind(str(tmp_path / "missing")) == "an unreadable file"
