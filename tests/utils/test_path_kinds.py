"""What a path is, said plainly: a FIFO, a device, a folder or a broken link is never "does not exist"."""
import os
import signal

import pytest

from reid.utils.path_kinds import (
    MISSING,
    WrongPathKindError,
    check_file,
    check_folder,
    file_problem,
    folder_problem,
    is_missing,
)


@pytest.fixture
def kinds(tmp_path):
    """One path of every kind a user can hand a loader by mistake."""
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "nowhere", tmp_path / "broken")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    os.symlink(tmp_path / "file.txt", tmp_path / "link_to_file")
    os.symlink(tmp_path / "folder", tmp_path / "link_to_folder")
    return tmp_path


def test_each_kind_is_named_for_what_it_is(kinds):
    assert file_problem(kinds / "file.txt") is None and file_problem(kinds / "link_to_file") is None
    assert file_problem(kinds / "folder") == "is a folder, not a file"
    assert file_problem(kinds / "fifo") == "is a FIFO (named pipe), not a file"
    assert file_problem("/dev/null") == "is a character device, not a file"
    assert file_problem(kinds / "broken") == f"is a broken symbolic link (its target {str(kinds / 'nowhere')!r} does not exist)"
    assert file_problem(kinds / "loop") == "is a symbolic link that loops (it leads back to itself)"
    assert file_problem(kinds / "missing") == MISSING
    assert file_problem(kinds / "file.txt" / "inside.jpg") == f"{MISSING} ({str(kinds / 'file.txt')!r} is a file, not a folder)"
    assert file_problem("") == "is an empty path"
    assert file_problem("a\0b") == "is not a valid path (it holds a NUL byte)"
    assert folder_problem(kinds / "folder") is None and folder_problem(kinds / "link_to_folder") is None
    assert folder_problem(kinds / "file.txt") == "is a regular file, not a folder"
    assert folder_problem(kinds / "fifo") == "is a FIFO (named pipe), not a folder"


def test_missing_means_nothing_is_there(kinds):
    assert is_missing(file_problem(kinds / "missing")) and is_missing(file_problem(kinds / "broken"))
    assert not any(is_missing(file_problem(kinds / n)) for n in ("fifo", "folder", "loop"))
    assert not is_missing(None)


def test_check_file_raises_one_line_with_the_right_type_and_hint(kinds):
    assert check_file(kinds / "file.txt", "List file") == str(kinds / "file.txt")
    with pytest.raises(WrongPathKindError) as info:
        check_file(kinds / "fifo", "List file", "name a text file.", missing_hint="check the path.")
    assert str(info.value) == f"List file {str(kinds / 'fifo')!r} is a FIFO (named pipe), not a file; name a text file."
    with pytest.raises(FileNotFoundError, match=r"missing' does not exist; check the path\.$"):
        check_file(kinds / "missing", "List file", "name a text file.", missing_hint="check the path.")

    class Mine(RuntimeError):
        pass

    with pytest.raises(Mine, match="is a folder, not a file"):
        check_file(kinds / "folder", "Weights", error=Mine)
    with pytest.raises(KeyError):
        check_folder(kinds / "broken", "Run folder", missing_error=KeyError)
    assert check_folder(kinds / "link_to_folder", "Run folder") == str(kinds / "link_to_folder")


def test_a_fifo_is_recognised_without_blocking(kinds):
    # stat only: opening a FIFO for reading would block this test forever.
    for _ in range(3):
        assert "FIFO" in file_problem(kinds / "fifo")


# ---------------------------------------------------------------- every loader, handed the wrong kind
def _loaders():
    from reid.config import load_config
    from reid.data import build_dataset
    from reid.data.datasets.cuhk03 import extract_crops
    from reid.data.datasets.custom import read_list_file
    from reid.data.datasets.folders import read_side
    from reid.data.datasets.msmt17 import read_msmt_list
    from reid.data.image_io import read_image
    from reid.engine.checkpoint_files import read_checkpoint
    from reid.evaluation.feature_io import load_features
    from reid.evaluation.thresholds import load_thresholds
    from reid.inference import ExportedModel, load_gallery, load_index
    from reid.inference.loading import config_from_run
    from reid.data.sources import collect_entries, list_entries
    from reid.modeling.backbones.pretrained import read_pretrained
    from reid.visualization.plots.roc import read_roc_json

    files = {  # loader name -> (file name, call)
        "config": ("cfg.yml", load_config),
        "checkpoint": ("model.pth", read_checkpoint),
        "pretrained weights": ("imagenet.pth", lambda p: read_pretrained(p, "an ImageNet file")),
        "list file of extract/search": ("list.txt", list_entries),
        "custom dataset list": ("train.txt", read_list_file),
        "unlabelled list": ("crops.txt", lambda p: build_dataset("unlabelled", ".", list_file=p)),
        "MSMT17 list": ("list_train.txt", lambda p: read_msmt_list(p, "images")),
        "CUHK03 .mat": ("cuhk-03.mat", lambda p: extract_crops(p, "detected", p + ".crops")),
        "gallery": ("gallery.npz", load_gallery),
        "index": ("gallery.index", load_index),
        "exported model": ("model.onnx", ExportedModel),
        "thresholds": ("thresholds.json", load_thresholds),
        "saved features": ("features.npz", load_features),
        "image": ("crop.jpg", read_image),
        "metrics of a plot": ("metrics.json", read_roc_json),
        "query list": ("query.txt", lambda p: read_side(p, "query")),
        "image source": ("q.jpg", lambda p: collect_entries([p])),
    }
    folders = {
        "run folder": ("run", config_from_run),
        "unlabelled folder": ("crops", lambda p: build_dataset("unlabelled", ".", folder=p)),
    }
    return files, folders


FILE_LOADERS, FOLDER_LOADERS = _loaders()
MAKE = {
    "fifo": lambda p: os.mkfifo(p),
    "folder": lambda p: os.mkdir(p),
    "device": lambda p: os.symlink("/dev/null", p),
    "broken link": lambda p: os.symlink(p + ".gone", p),
    "file": lambda p: open(p, "w").close(),
}
WORDS = {"fifo": "is a FIFO (named pipe), not a", "folder": "is a folder, not a", "device": "is a character device, not a",
         "broken link": "is a broken symbolic link", "file": "is a regular file, not a"}


@pytest.fixture(autouse=True)
def deadline():
    """A loader that opens a FIFO blocks for ever: fail the test instead of hanging the suite."""
    def stop(*_):
        raise TimeoutError("the loader blocked on the path (it opened it)")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _raised(call, path):
    from reid.cli.errors import one_line, user_errors

    with pytest.raises(Exception) as info:
        call(path)
    assert isinstance(info.value, user_errors()), repr(info.value)  # printed as one error: line, no traceback
    return one_line(info.value)


@pytest.mark.parametrize("loader, kind", [
    (loader, kind) for loader in sorted(FILE_LOADERS) for kind in ("fifo", "folder", "device", "broken link")
    if not (kind == "folder" and loader in ("query list", "image source"))  # a folder is a valid input there
])
def test_every_file_loader_says_what_the_path_is(tmp_path, loader, kind):
    name, call = FILE_LOADERS[loader]
    path = str(tmp_path / name)
    MAKE[kind](path)
    message = _raised(call, path)
    assert WORDS[kind] in message and name in message, message
    assert "does not exist" not in message.replace(f"{path}.gone' does not exist", ""), message


@pytest.mark.parametrize("kind", ["fifo", "file", "device", "broken link"])
@pytest.mark.parametrize("loader", sorted(FOLDER_LOADERS))
def test_every_folder_loader_says_what_the_path_is(tmp_path, loader, kind):
    name, call = FOLDER_LOADERS[loader]
    path = str(tmp_path / name)
    MAKE[kind](path)
    message = _raised(call, path)
    assert WORDS[kind].replace("not a", "not a folder") in message and name in message, message
    assert "does not exist" not in message.replace(f"{path}.gone' does not exist", ""), message
