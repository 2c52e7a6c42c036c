"""Folder scans over folders someone else made: symlink loops, links out of the folder, second
names of one file, FIFOs; each real folder once, each file once, one line per kind skipped."""
import logging
import os

import pytest

from reid.data.sources import images_in_folder
from reid.utils.folder_scan import scan_folder


def jpg(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8 fake")
    return str(path)


def is_jpg(name):
    return name.endswith(".jpg")


def test_symlink_loops_are_not_followed_and_every_image_comes_once(tmp_path):
    root = tmp_path / "crops"
    a = jpg(root / "cam1" / "a.jpg")
    b = jpg(root / "cam2" / "deep" / "b.jpg")
    os.symlink(root, root / "cam1" / "loop_to_root")          # a loop through the top
    os.symlink("..", root / "cam2" / "deep" / "up")            # a relative loop
    os.symlink(root / "cam2", root / "cam1" / "cam2_again")  # a second way into cam2
    os.symlink("self", root / "self")                          # a link to itself (ELOOP)
    scan = scan_folder(str(root), is_jpg)
    assert scan.files == [a, b]
    notes = scan.notes()
    assert any("3 symbolic links to folders" in n for n in notes)
    assert any("1 symbolic links whose target does not exist" in n and "self" in n for n in notes)


def test_links_out_of_the_folder_are_skipped_with_one_line(tmp_path):
    outside = jpg(tmp_path / "private" / "secret.jpg")
    root = tmp_path / "crops"
    inside = jpg(root / "a.jpg")
    os.symlink(outside, root / "leak.jpg")
    os.symlink(tmp_path / "private", root / "private_dir")
    scan = scan_folder(str(root), is_jpg)
    assert scan.files == [inside]
    (line,) = scan.notes()
    assert "skipped 2 symbolic links that point outside the folder" in line and "name their targets" in line


def test_second_names_of_a_file_count_once_and_links_inside_are_kept(tmp_path):
    root = tmp_path / "crops"
    a = jpg(root / "a.jpg")
    os.link(a, root / "hard.jpg")          # another name, same inode
    os.symlink(a, root / "soft.jpg")       # a link to a file inside: a duplicate
    b = jpg(root / "sub" / "b.jpg")
    os.symlink(b, root / "z_link_to_b.jpg")
    scan = scan_folder(str(root), is_jpg)
    assert scan.files == [a, b]
    assert any("3 second names of files already listed" in n for n in scan.notes())


def test_a_fifo_with_an_image_name_is_skipped_not_read(tmp_path):
    root = tmp_path / "crops"
    a = jpg(root / "a.jpg")
    os.mkfifo(root / "pipe.jpg")
    scan = scan_folder(str(root), is_jpg)
    assert scan.files == [a] and any("not regular files" in n for n in scan.notes())


def test_images_in_folder_warns_once_per_kind_and_names_skips_when_nothing_is_left(tmp_path, caplog):
    root = tmp_path / "crops"
    root.mkdir()
    os.symlink(root, root / "loop")
    os.symlink(jpg(tmp_path / "elsewhere.jpg"), root / "out.jpg")
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match=r"No images .* \(2 entries skipped"):
        images_in_folder(root)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
