"""reid/modeling/backbones/pretrained.py: reading a stranger's pretrained file is one line when it cannot be used."""
from __future__ import annotations

import argparse

import pytest
import torch

from reid.modeling.backbones.pretrained import PretrainedWeightsError, read_pretrained

EXPECTED = "an ImageNet file such as https://example.org/w.pth"


def test_a_training_checkpoint_with_python_objects_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "dino_checkpoint.pth"
    teacher = {"backbone.cls_token": torch.zeros(1, 1, 4)}
    torch.save({"teacher": teacher, "args": argparse.Namespace(arch="vit_small")}, path)
    with pytest.raises(PretrainedWeightsError) as info:
        read_pretrained(str(path), EXPECTED)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "holds Python objects besides tensors" in message and "Files with Python objects" in message
    # The documented fix (keep only the tensors) gives a file that reads.
    torch.save({"teacher": teacher}, path)
    assert set(read_pretrained(str(path), EXPECTED)) == {"cls_token"}


def test_a_missing_file_says_to_download_it_or_turn_pretraining_off(tmp_path):
    path = tmp_path / "nope.pth"
    with pytest.raises(PretrainedWeightsError, match=r"nope.pth' does not exist; download an ImageNet file such as "
                                                     r"https://example.org/w.pth and point it there, or set "
                                                     r"MODEL.BACKBONE.PRETRAINED False"):
        read_pretrained(str(path), EXPECTED)


def test_a_truncated_file_names_the_reason(tmp_path):
    path = tmp_path / "cut.pth"
    torch.save({"w": torch.zeros(1000)}, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(PretrainedWeightsError, match="cut.pth' cannot be read as a weights file written by torch.save"):
        read_pretrained(str(path), EXPECTED)


@pytest.mark.parametrize("data, kind", [(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(64), "a JPEG image"),
                                        (b"weights: imagenet\n", "a YAML/text file")])
def test_a_file_that_is_not_weights_is_named_for_what_it_is(tmp_path, data, kind):
    path = tmp_path / "imagenet.pth"
    path.write_bytes(data)
    with pytest.raises(PretrainedWeightsError) as info:  # was: "damaged or holds Python objects"
        read_pretrained(str(path), EXPECTED)
    assert str(info.value) == (f"MODEL.BACKBONE.PRETRAINED_PATH={str(path)!r} is {kind}, not a weights file written by "
                               f"torch.save; point it to {EXPECTED}.")
