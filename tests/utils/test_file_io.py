"""Folders made all at once (the crop and synthetic-dataset caches rely on it)."""
from __future__ import annotations

import os

import pytest

from reid.utils.file_io import build_folder_atomically


def fill(folder, name="done.json", text="mine"):
    os.makedirs(folder)
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def test_folder_appears_complete_and_the_temp_folder_goes(tmp_path):
    final = str(tmp_path / "cache" / "crops")
    build_folder_atomically(final, fill, "done.json")
    assert os.listdir(final) == ["done.json"] and os.listdir(tmp_path / "cache") == ["crops"]


def test_failed_build_leaves_nothing(tmp_path):
    def broken(tmp):
        fill(tmp)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_folder_atomically(str(tmp_path / "crops"), broken, "done.json")
    assert os.listdir(tmp_path) == []


def test_another_process_finished_first(tmp_path):
    final = str(tmp_path / "crops")

    def race(tmp):  # the other process renames its complete folder into place meanwhile
        fill(tmp)
        fill(final, text="theirs")

    build_folder_atomically(final, race, "done.json")
    assert open(os.path.join(final, "done.json")).read() == "theirs"
    assert os.listdir(tmp_path) == ["crops"]


def test_an_incomplete_folder_in_the_way_is_an_error(tmp_path):
    final = str(tmp_path / "crops")

    def race(tmp):
        fill(tmp)
        fill(final, name="half.png")

    with pytest.raises(OSError):
        build_folder_atomically(final, race, "done.json")
    assert os.listdir(tmp_path) == ["crops"] and os.listdir(final) == ["half.png"]


def test_stale_temp_files_of_interrupted_atomic_writes_are_removed(tmp_path):
    from reid.utils.file_io import atomic_write_text, remove_stale_temp_files

    atomic_write_text(str(tmp_path / "model_final.pth"), "kept")
    stale = [tmp_path / ".model_0003.pth.k2j3h4.tmp", tmp_path / ".last_checkpoint.x1.tmp"]
    for path in stale:
        path.write_text("half written")  # what kill -9 during a write leaves
    other = [tmp_path / "notes.tmp", tmp_path / ".hidden"]  # not ours: left alone
    for path in other:
        path.write_text("user file")
    assert sorted(remove_stale_temp_files(str(tmp_path))) == sorted(str(p) for p in stale)
    assert sorted(os.listdir(tmp_path)) == [".hidden", "model_final.pth", "notes.tmp"]
