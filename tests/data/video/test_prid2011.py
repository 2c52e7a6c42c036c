"""PRID2011: people 1..200 only, splits from splits_prid2011.json or generated (seeded) and recorded."""
import json
import os

import pytest

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.data.video import PRID2011, build_video_dataset
from reid.data.video import prid2011
from reid.data.video.prid2011 import GENERATED_FILE, generate_splits

from .video_files import assert_one_line, prid_frames, prid_json_splits, write_prid2011, write_prid_json


@pytest.fixture(scope="module")
def prid_release(tmp_path_factory):
    return write_prid2011(str(tmp_path_factory.mktemp("prid_release")))


def _release_copy(release, tmp_path, link_people):
    """A release under `tmp_path` whose camera folders (or, with `link_people`, each person folder)
    link to the module's `release`: the filesystem here is slow, copying 400 folders takes seconds."""
    folder = os.path.join(str(tmp_path), "prid2011")
    for cam in ("cam_a", "cam_b"):
        src = os.path.join(release, "prid_2011", "multi_shot", cam)
        dst = os.path.join(folder, "prid_2011", "multi_shot", cam)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not link_people:
            os.symlink(src, dst)
            continue
        os.makedirs(dst)
        for name in os.listdir(src):
            os.symlink(os.path.join(src, name), os.path.join(dst, name))
    return folder, str(tmp_path)


@pytest.fixture
def prid(prid_release, tmp_path):
    """A release of its own per test for its splits files; the person folders are shared."""
    return _release_copy(prid_release, tmp_path, link_people=False)


@pytest.fixture
def prid_people(prid_release, tmp_path):
    """A release of its own whose person folders a test may remove or replace."""
    return _release_copy(prid_release, tmp_path, link_people=True)


def test_json_splits_counts_and_protocol(prid):
    folder, root = prid
    path = write_prid_json(folder, prid_json_splits())
    ds = build_video_dataset("prid2011", root, split_id=0)
    assert isinstance(ds, PRID2011) and ds.test_notes["split_source"] == "file"
    assert ds.test_notes["splits_file"] == path
    # split 0 tests the people at even positions: person_0001, person_0003, ...
    assert [t[1] for t in ds.query] == list(range(1, 201, 2)) == [t[1] for t in ds.gallery]
    assert {t[2] for t in ds.query} == {0} and {t[2] for t in ds.gallery} == {1}
    assert len(ds.train) == 200 and ds.num_train_pids == 100
    assert sorted(ds.train_pid_map) == list(range(2, 201, 2))
    assert ds.num_frames(ds.query) == sum(prid_frames("cam_a", p) for p in range(1, 201, 2))
    assert ds.num_frames(ds.gallery) == sum(prid_frames("cam_b", p) for p in range(1, 201, 2))
    assert not os.path.exists(os.path.join(folder, GENERATED_FILE))


def test_people_beyond_200_are_not_used(prid):
    ds = PRID2011(prid[1])
    pids = {t[1] for t in ds.query + ds.gallery} | set(ds.train_pid_map)
    assert pids == set(range(1, 201))


def test_frames_and_split_selection(prid):
    folder, root = prid
    write_prid_json(folder, prid_json_splits())
    ds = PRID2011(root, split_id=1)
    assert [t[1] for t in ds.query][:3] == [2, 4, 6]
    frames = ds.gallery[0][0]
    assert [os.path.relpath(p, folder) for p in frames] == [
        f"prid_2011/multi_shot/cam_b/person_0002/{k:04d}.png" for k in range(1, prid_frames("cam_b", 2) + 1)]


def test_generated_splits_are_seeded_recorded_and_reproducible(prid):
    folder, root = prid
    a = PRID2011(root, split_id=3)
    written = os.path.join(folder, GENERATED_FILE)
    assert a.test_notes["split_source"] == "generated (seed 0)" and a.test_notes["splits_file"] == written
    with open(written) as f:
        on_disk = json.load(f)
    assert on_disk == a.splits == generate_splits([f"person_{p:04d}" for p in range(1, 201)], 0)
    assert len(a.splits) == 10
    for split in a.splits:
        assert len(split["train"]) == len(split["test"]) == 100
        assert set(split["train"]).isdisjoint(split["test"])
    assert len({tuple(s["test"]) for s in a.splits}) == 10
    b = PRID2011(root, split_id=3)
    assert b.query == a.query and b.train == a.train
    assert [t[1] for t in a.query] == [int(n[-4:]) for n in a.splits[3]["test"]]
    other = PRID2011(root, split_id=3, split_seed=1)
    assert other.splits != a.splits and other.test_notes["split_source"] == "generated (seed 1)"


def test_generated_splits_on_a_read_only_folder(prid, monkeypatch):
    def refuse(path, text):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(prid2011, "atomic_write_text", refuse)
    ds = PRID2011(prid[1], split_id=2)
    assert ds.test_notes["splits_file"] is None and len(ds.query) == 100
    assert ds.splits == generate_splits([f"person_{p:04d}" for p in range(1, 201)], 0)
    assert not os.path.exists(os.path.join(prid[0], GENERATED_FILE))


@pytest.mark.parametrize("split_id", [10, -1])
def test_split_index_out_of_range(prid, split_id):
    folder, root = prid
    path = write_prid_json(folder, prid_json_splits())
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root, split_id=split_id)
    assert_one_line(e.value, repr(split_id), "0..9", path)
    os.remove(path)
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root, split_id=split_id)
    assert_one_line(e.value, repr(split_id), "0..9", GENERATED_FILE)


def test_bad_json_splits(prid):
    folder, root = prid
    splits = prid_json_splits()
    splits[4]["test"][0] = "person_0250"
    path = write_prid_json(folder, splits)
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root)
    assert_one_line(e.value, path, "split 4", "'person_0250'")
    splits = prid_json_splits()
    splits[2]["train"].append(splits[2]["test"][5])
    write_prid_json(folder, splits)
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root)
    assert_one_line(e.value, path, "split 2", "both train and test")
    write_prid_json(folder, {"train": []})
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root)
    assert_one_line(e.value, path, "not a non-empty list")
    with open(path, "w") as f:
        f.write("[{")
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root)
    assert_one_line(e.value, path, "not JSON")


@pytest.mark.slow  # writes and removes 400 links
def test_missing_person_and_empty_person(prid_people):
    folder, root = prid_people
    empty = os.path.join(folder, "prid_2011", "multi_shot", "cam_b", "person_0100")
    os.remove(empty)  # a link to the shared release
    os.makedirs(empty)
    ds_split = next(k for k, s in enumerate(generate_splits([f"person_{p:04d}" for p in range(1, 201)], 0))
                    if "person_0100" in s["test"])
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root, split_id=ds_split)
    assert_one_line(e.value, empty, "no frame images")
    missing = os.path.join(folder, "prid_2011", "multi_shot", "cam_a", "person_0150")
    os.remove(missing)
    with pytest.raises(DatasetFormatError) as e:
        PRID2011(root)
    assert_one_line(e.value, missing, "is missing")


def test_missing_dataset_shows_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        PRID2011(str(tmp_path))
    assert "PRID2011" in str(e.value).splitlines()[0]
    assert "Expected layout" in str(e.value) and "multi_shot/cam_a" in str(e.value)
