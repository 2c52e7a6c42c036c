"""List files that are not: binary files, FIFOs, a single enormous line; and printing names
from someone else's files."""
import os

import pytest

from reid.data.sources import collect_entries, list_entries
from reid.utils.text_files import MAX_LINE, brief, printable, text_lines


def test_text_lines_numbers_lines_and_drops_a_byte_order_mark(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes("\ufeffa.jpg 1 0\nb.jpg 2 1\n".encode("utf-8"))
    assert list(text_lines(str(path))) == [(1, "a.jpg 1 0\n"), (2, "b.jpg 2 1\n")]


def test_binary_fifo_and_overlong_lines_are_one_line_errors(tmp_path):
    binary = tmp_path / "model.pth"
    binary.write_bytes(b"PK\x03\x04\xff\xfe\x00\x80" * 64)
    with pytest.raises(ValueError, match=r"List file .*model.pth' is not UTF-8 text"):
        list_entries(binary)
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"pipe.txt' is a FIFO \(named pipe\), not a file; name a text file"):
        list(text_lines(str(fifo)))
    with pytest.raises(ValueError, match=r"pipe.txt' is a FIFO \(named pipe\), not a file or folder; pass an image"):
        collect_entries([str(fifo)])
    long_line = tmp_path / "long.txt"
    long_line.write_text("x" * (MAX_LINE + 10))
    with pytest.raises(ValueError, match=rf"long.txt', line 1: longer than {MAX_LINE} characters"):
        list(text_lines(str(long_line)))


def test_a_list_may_only_name_images(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:x\n")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{secret}\n")
    with pytest.raises(ValueError, match=r"names 1 files that are not images .*shadow") as err:
        list_entries(listing)
    assert "root:x" not in str(err.value)


def test_printable_escapes_terminal_control_characters_and_brief_bounds_values():
    assert printable("gallery/a.jpg") == "gallery/a.jpg"
    assert printable("a\x1b[2J\x1b]0;owned\x07.jpg\n") == "a\\x1b[2J\\x1b]0;owned\\x07.jpg\\n"
    assert len(brief(["x" * 10_000] * 10_000)) < 300
