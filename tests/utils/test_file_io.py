"""Folders made all at once (the crop and synthetic-dataset caches rely on it), and writes that
meet a full disk: the previous file intact, one line naming the file."""
from __future__ import annotations

import errno
import logging
import os

import pytest

from reid.utils.file_io import DiskFullError, atomic_write, build_folder_atomically
from reid.utils.logger import MetricsWriter, setup_logger


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


# --- a full disk -----------------------------------------------------------------------------

def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_keeps_the_previous_file_and_says_so_in_one_line(tmp_path, monkeypatch):
    target = tmp_path / "model_0002.pth"
    target.write_bytes(b"previous")
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(DiskFullError) as err:
        atomic_write(str(target), lambda f: f.write(b"new data"))
    msg = str(err.value)
    assert msg.startswith(f"Disk full: writing {target} failed (No space left on device; ") and "MB free there" in msg
    assert "the previous version is intact" in msg and "\n" not in msg and err.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"previous" and os.listdir(tmp_path) == ["model_0002.pth"]


def test_a_full_disk_behind_another_error_is_still_named(tmp_path):
    """torch.save reports ENOSPC as a RuntimeError whose context is the OSError."""
    def torch_like(f):
        try:
            _full_disk()
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    with pytest.raises(DiskFullError, match=r"new.pth failed \(No space left on device.*nothing was written"):
        atomic_write(str(tmp_path / "new.pth"), torch_like)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ZeroDivisionError):  # any other error is left as it is
        atomic_write(str(tmp_path / "new.pth"), lambda f: 1 / 0)


def test_metrics_and_log_survive_a_full_disk_without_tracebacks(tmp_path, capsys):
    writer = MetricsWriter(str(tmp_path), tensorboard=False)
    writer.write({"type": "train", "iter": 1})
    writer._file.write('{"type": "train", "it')  # a line cut short by the full disk
    writer._file.close()
    writer = MetricsWriter(str(tmp_path), tensorboard=False)
    writer.write({"type": "train", "iter": 2})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines[0] == '{"type": "train", "iter": 1}' and lines[-1] == '{"type": "train", "iter": 2}'
    writer._file = type("Full", (), {"write": _full_disk, "flush": lambda self: None})()
    with pytest.raises(DiskFullError, match="metrics.jsonl failed .*records written before are intact"):
        writer.write({"type": "train", "iter": 3})

    logger = setup_logger(str(tmp_path), name="reid.test_full_disk")
    handler = next(h for h in logger.handlers if isinstance(h, logging.FileHandler))
    handler.stream = type("Full", (), {"write": _full_disk, "flush": lambda self: None, "close": lambda self: None})()
    logger.info("one")
    logger.info("two")
    err = capsys.readouterr().err
    assert err.count("warning: cannot write") == 1 and "Traceback" not in err and "log.txt" in err
    assert handler not in logger.handlers


def test_a_folder_where_the_output_file_goes_is_one_line_and_nothing_is_left_behind(tmp_path):
    """Before: "[Errno 21] Is a directory: '.../.g.npz.x1y2.tmp' -> '.../g.npz'", after all the work."""
    from reid.utils.file_io import atomic_write_text, check_output_file
    from reid.utils.path_kinds import WrongPathKindError

    folder = tmp_path / "g.npz"
    folder.mkdir()
    for write in (check_output_file, lambda p: atomic_write_text(p, "x")):
        with pytest.raises(WrongPathKindError, match=r"Output '.*g\.npz' is a folder, not a file; name a file"):
            write(str(folder))
    assert sorted(os.listdir(tmp_path)) == ["g.npz"] and os.listdir(folder) == []
    assert check_output_file(str(tmp_path / "new.npz")) == str(tmp_path / "new.npz")
