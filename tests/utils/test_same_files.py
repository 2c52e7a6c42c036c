"""One image under several names: the same file (links, other spellings) or byte-identical copies."""
import os
import pathlib
import shutil

import pytest

from reid.utils import same_files
from reid.utils.same_files import SAME_BYTES, SAME_FILE, content_digest, copies_of, first_copies


def own_file_in(root, query):
    """The ways a user's gallery gets the query's own image under another name, each a function that
    makes it under `root` (the query is ``root/q/<query>``, the gallery folder ``root/g``) and
    returns the gallery's path for it, relative to `root`. Shared by the evaluation and search tests."""
    q = root / "q" / query

    def sub_folder():
        os.makedirs(root / "g" / "s" / "t")
        shutil.copy(q, root / "g" / "s" / "t" / query)
        return f"g/s/t/{query}"

    return {
        "hard link": lambda: (os.link(q, root / "g" / "renamed.jpg"), "g/renamed.jpg")[1],
        "symbolic link": lambda: (os.symlink(q, root / "g" / "link.jpg"), "g/link.jpg")[1],
        "copy under another name": lambda: (shutil.copy(q, root / "g" / "c.jpg"), "g/c.jpg")[1],
        "copy in a sub-folder": sub_folder,
        "./ spelling": lambda: f"./q/./{query}",
        ".. spelling": lambda: f"g/../q/{query}",
    }


OWN_FILE_WAYS = list(own_file_in(pathlib.Path("."), "x.jpg"))  # the names only: nothing is made


@pytest.fixture
def files(tmp_path):
    """a.jpg; its hard link, symbolic link, copy (another name, a sub-folder); b.jpg of a's size
    but other bytes; c.jpg of another size."""
    a = tmp_path / "a.jpg"
    a.write_bytes(b"A" * 100)
    os.link(a, tmp_path / "hard.jpg")
    os.symlink(a, tmp_path / "soft.jpg")
    shutil.copy(a, tmp_path / "copy.jpg")
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    shutil.copy(a, tmp_path / "sub" / "deeper" / "a.jpg")
    (tmp_path / "b.jpg").write_bytes(b"A" * 99 + b"B")
    (tmp_path / "c.jpg").write_bytes(b"A" * 50)
    return tmp_path


def test_copies_of_finds_every_name_of_the_reference_and_nothing_else(files):
    t = str(files)
    candidates = [f"{t}/hard.jpg", f"{t}/soft.jpg", f"{t}/copy.jpg", f"{t}/sub/deeper/a.jpg", f"{t}/./a.jpg",
                  f"{t}/sub/../a.jpg", f"{t}/b.jpg", f"{t}/c.jpg", f"{t}/missing.jpg"]
    found = copies_of([f"{t}/c.jpg", f"{t}/a.jpg"], candidates)
    assert found == [(1, SAME_FILE), (1, SAME_FILE), (1, SAME_BYTES), (1, SAME_BYTES), (1, SAME_FILE),
                     (1, SAME_FILE), None, (0, SAME_FILE), None]


def test_first_copies_keeps_the_first_name_of_each_image(files):
    t = str(files)
    paths = [f"{t}/b.jpg", f"{t}/a.jpg", f"{t}/copy.jpg", f"{t}/hard.jpg", f"{t}/c.jpg", f"{t}/a.jpg"]
    assert first_copies(paths) == [None, None, (1, SAME_BYTES), (1, SAME_FILE), None, (1, SAME_FILE)]
    # A link to a copy repeats the copy's original, by content.
    os.link(files / "copy.jpg", files / "copy_link.jpg")
    assert first_copies([f"{t}/a.jpg", f"{t}/copy.jpg", f"{t}/copy_link.jpg"]) == [
        None, (0, SAME_BYTES), (0, SAME_BYTES)]


def test_only_files_of_a_shared_size_are_hashed(files, monkeypatch):
    hashed = []
    real = same_files.content_digest
    monkeypatch.setattr(same_files, "content_digest", lambda p: hashed.append(os.path.basename(p)) or real(p))
    t = str(files)
    assert copies_of([f"{t}/c.jpg"], [f"{t}/a.jpg", f"{t}/b.jpg"]) == [None, None]
    assert hashed == []  # no size in common: nothing read
    assert first_copies([f"{t}/a.jpg", f"{t}/hard.jpg", f"{t}/c.jpg"]) == [None, (0, SAME_FILE), None]
    assert hashed == []  # the same inode needs no hash
    copies_of([f"{t}/a.jpg"], [f"{t}/b.jpg"])
    assert sorted(hashed) == ["a.jpg", "b.jpg"]


def test_content_digest_streams_a_large_file_and_tells_one_byte_apart(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (3 << 20) + b"x")
    other = tmp_path / "other.bin"
    other.write_bytes(b"\0" * (3 << 20) + b"y")
    assert content_digest(str(big)) != content_digest(str(other)) and len(content_digest(str(big))) == 16
    assert content_digest(str(tmp_path / "missing")) is None
