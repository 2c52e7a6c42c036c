"""VeRi-776, VehicleID and VERI-Wild loaders on tiny releases of synthetic vehicles: counts, cameras,
the protocol each declares, and the one-line errors for incomplete or mismatched releases."""
from __future__ import annotations

import os
import shutil

import pytest

from reid.config import get_cfg
from reid.data import build_dataset, build_test_set, dataset_kwargs
from reid.data.datasets import DatasetFormatError, DatasetNotFoundError

from .vehicle_files import synthetic_vehicles, write_vehicleid, write_veri, write_veriwild


@pytest.fixture(scope="module")
def vehicles(tmp_path_factory):
    return synthetic_vehicles(tmp_path_factory.mktemp("synthetic_vehicles"))


def first_line(error: pytest.ExceptionInfo) -> str:
    return str(error.value).splitlines()[0]


def append(path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


# ----------------------------------------------------------------------------------------------- VeRi
def test_veri_counts_cameras_and_protocol(tmp_path, vehicles):
    write_veri(tmp_path, vehicles)
    ds = build_dataset("veri", str(tmp_path))
    assert ds.dataset_dir == str(tmp_path / "VeRi") and ds.test_protocol == "cross_camera"
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (len(vehicles.train), len(vehicles.query),
                                                               len(vehicles.gallery))
    assert ds.num_train_pids == 4 and sorted({p for _, p, _ in ds.train}) == [0, 1, 2, 3]
    assert {p for _, p, _ in ds.query} == {5, 6, 7}  # test ids keep their numbers
    # c001..c003 -> camids 0..2, the cameras the synthetic images were drawn in.
    assert sorted((p, c) for _, p, c in ds.query) == sorted((p, c) for _, p, c in vehicles.query)
    assert os.path.basename(ds.query[0][0]).startswith(f"{ds.query[0][1]:04d}_c{ds.query[0][2] + 1:03d}_")


def test_veri_names_a_bad_file_name_and_camera(tmp_path, vehicles):
    folder = write_veri(tmp_path, vehicles)
    query = os.path.join(folder, "image_query")
    src = os.path.join(query, sorted(os.listdir(query))[0])
    shutil.copyfile(src, os.path.join(query, "0005_c021_00000001_0.jpg"))
    with pytest.raises(DatasetFormatError, match=r"Camera c021 in '.*0005_c021_00000001_0.jpg' is outside c001..c020"):
        build_dataset("veri", str(tmp_path))
    os.remove(os.path.join(query, "0005_c021_00000001_0.jpg"))
    shutil.copyfile(src, os.path.join(query, "car.jpg"))
    with pytest.raises(DatasetFormatError, match=r"file name '.*car.jpg': expected '<vehicle id>_c<camera>_"):
        build_dataset("veri", str(tmp_path))


def test_veri_missing_split_folder_is_named(tmp_path, vehicles):
    shutil.rmtree(os.path.join(write_veri(tmp_path, vehicles), "image_query"))
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("veri", str(tmp_path))
    assert first_line(e) .startswith(f"The VeRi-776 folder '{tmp_path / 'VeRi'}' lacks image_query/: unpack the release")
    with pytest.raises(DatasetNotFoundError, match="Could not find the VeRi-776 dataset under root"):
        build_dataset("veri", str(tmp_path / "elsewhere"))


# ------------------------------------------------------------------------------------------ VehicleID
def test_vehicleid_lists_fixed_split_and_draws_protocol(tmp_path, vehicles):
    lists = write_vehicleid(tmp_path, vehicles)
    ds = build_dataset("vehicleid", str(tmp_path), test_size=800)
    assert ds.test_protocol == "gallery_draws" and ds.test_size == 800
    assert len(ds.train) == len(lists["train_list.txt"]) == len(vehicles.train) and ds.num_train_pids == 4
    assert {c for _, _, c in ds.train} == {0}  # no cameras in VehicleID
    # Every test image is in the query or the gallery; the first listed image of each vehicle is its gallery.
    test = [line.split() for line in lists["test_list_800.txt"]]
    assert len(ds.query) + len(ds.gallery) == len(test) == len(vehicles.query) + len(vehicles.gallery)
    first = {}
    for imgid, vid in test:
        first.setdefault(int(vid), imgid)
    assert sorted((os.path.basename(p)[:-4], v) for p, v, _ in ds.gallery) == sorted((i, v) for v, i in first.items())
    assert {c for _, _, c in ds.gallery} == {0} and {c for _, _, c in ds.query} == {1}  # bookkeeping cameras
    assert {p for _, p, _ in ds.query} == {5, 6, 7}


def test_vehicleid_errors_name_the_list_line_and_what_to_do(tmp_path, vehicles):
    write_vehicleid(tmp_path, vehicles)
    split = tmp_path / "VehicleID_V1.0" / "train_test_split"
    test_list = split / "test_list_800.txt"
    lines = test_list.read_text().splitlines()
    append(test_list, "9999999 5")
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("vehicleid", str(tmp_path))
    image = tmp_path / "VehicleID_V1.0" / "image" / "9999999.jpg"
    assert first_line(e) == (f"{test_list}, line {len(lines) + 1}: image '{image}' is not there (no such file). The "
                             "VehicleID lists and image folders must come from the same release: unpack the images "
                             "whole, or remove the line. See datasets/README.md for where to get the dataset and how "
                             "to lay it out.")
    test_list.write_text("\n".join(lines[:2] + ["0000001"]) + "\n")
    with pytest.raises(DatasetFormatError, match=r"test_list_800.txt, line 3: expected '<image id> <vehicle id>'"):
        build_dataset("vehicleid", str(tmp_path))
    test_list.write_text("\n".join(lines[:2] + [lines[2].split()[0] + " x5"]) + "\n")
    with pytest.raises(DatasetFormatError, match=r"line 3: vehicle id 'x5' is not a number"):
        build_dataset("vehicleid", str(tmp_path))
    # A valid size whose list the folder lacks: the sizes it has are named.
    with pytest.raises(DatasetNotFoundError, match=r"test_list_1600.txt' not found; DATASETS.VEHICLEID.TEST_SIZE is "
                                                   r"1600; the folder has test lists for 800: set the key"):
        build_dataset("vehicleid", str(tmp_path), test_size=1600)
    shutil.rmtree(split)
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("vehicleid", str(tmp_path))
    assert first_line(e).startswith(f"The VehicleID folder '{tmp_path / 'VehicleID_V1.0'}' lacks train_test_split/")


@pytest.mark.parametrize("bad", [1000, "small", -800, "800x"])
def test_vehicleid_unknown_test_size_lists_the_valid_ones(tmp_path, bad):
    with pytest.raises(ValueError, match=r"^DATASETS.VEHICLEID.TEST_SIZE must be one of 800, 1600, 2400, 3200, 6000, "
                                         r"13164 \(vehicles in the test list; 800/1600/2400 = small/medium/large\), got"):
        build_dataset("vehicleid", str(tmp_path), test_size=bad)


# ------------------------------------------------------------------------------------------ VERI-Wild
def test_veriwild_cameras_from_vehicle_info_and_gallery_as_listed(tmp_path, vehicles):
    lists = write_veriwild(tmp_path, vehicles)
    for size in (3000, "small", " Small "):
        ds = build_dataset("veriwild", str(tmp_path), test_size=size)
        assert ds.test_size == 3000
    assert ds.test_protocol == "cross_camera" and ds.num_train_pids == 4
    assert len(ds.query) == len(vehicles.query) and len(ds.gallery) == len(lists["test_3000.txt"])
    assert len(ds.gallery) == len(vehicles.query) + len(vehicles.gallery)  # this list names the queries too
    # Cameras: vehicle_info.txt's numbers as written (the writer put camera c + 1 there).
    assert sorted((p, c - 1) for _, p, c in ds.query) == sorted((p, c) for _, p, c in vehicles.query)
    assert ds.query[0][0] == str(tmp_path / "VERI-Wild" / "images" / f"{lists['test_3000_query.txt'][0]}.jpg")


def test_veriwild_errors_name_the_file_line_and_what_to_do(tmp_path, vehicles):
    lists = write_veriwild(tmp_path, vehicles)
    split = tmp_path / "VERI-Wild" / "train_test_split"
    info = split / "vehicle_info.txt"
    # An image with no vehicle_info line: its camera is unknown.
    append(split / "test_3000_query.txt", "00005/999999")
    where = f"{split / 'test_3000_query.txt'}, line {len(lists['test_3000_query.txt']) + 1}"
    with pytest.raises(DatasetFormatError, match=rf"^{where}: image '00005/999999' has no line in .*vehicle_info.txt"):
        build_dataset("veriwild", str(tmp_path))
    # Listed and described, but not on disk.
    append(info, "00005/999999;2;2018-03-01 10:00:00;Audi;Sedan;white")
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("veriwild", str(tmp_path))
    assert first_line(e).startswith(f"{where}: image '{tmp_path / 'VERI-Wild' / 'images' / '00005' / '999999.jpg'}' "
                                    "is not there (no such file). The VERI-Wild lists")
    (split / "test_3000_query.txt").write_text("00005-000001\n")
    with pytest.raises(DatasetFormatError, match=r"line 1: expected '<vehicle id>/<image id>' \(no extension\), "
                                                 r"got '00005-000001'"):
        build_dataset("veriwild", str(tmp_path))
    append(info, "00005/999998;c2;t;m;t;c")
    with pytest.raises(DatasetFormatError, match=r"vehicle_info.txt, line \d+: camera 'c2' is not a number"):
        build_dataset("veriwild", str(tmp_path))
    with pytest.raises(DatasetNotFoundError, match=r"test_5000.txt' not found; DATASETS.VERIWILD.TEST_SIZE is 5000; "
                                                   r"the folder has test lists for 3000"):
        build_dataset("veriwild", str(tmp_path), test_size="medium")
    with pytest.raises(ValueError, match=r"^DATASETS.VERIWILD.TEST_SIZE must be one of 3000 \(small\), 5000 \(medium\), "
                                         r"10000 \(large\), got 'huge'"):
        build_dataset("veriwild", str(tmp_path), test_size="huge")
    shutil.rmtree(split)
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("veriwild", str(tmp_path))
    assert first_line(e).startswith(f"The VERI-Wild folder '{tmp_path / 'VERI-Wild'}' lacks train_test_split/")


# ---------------------------------------------------------------------------------------- from a config
def test_config_keys_reach_the_loaders_and_test_sets_carry_their_protocol(tmp_path, vehicles):
    write_vehicleid(tmp_path, vehicles)
    write_veriwild(tmp_path, vehicles)
    write_veri(tmp_path, vehicles)
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(tmp_path)
    cfg.DATASETS.VEHICLEID.TEST_SIZE = 1600
    cfg.DATASETS.VERIWILD.TEST_SIZE = 10000
    assert dataset_kwargs(cfg, "vehicleid") == {"test_size": 1600}
    assert dataset_kwargs(cfg, "veriwild") == {"test_size": 10000}
    assert dataset_kwargs(cfg, "veri") == {}
    assert dataset_kwargs(cfg, "synthetic")["object_type"] == "person"
    cfg.DATASETS.VEHICLEID.TEST_SIZE = 800
    cfg.DATASETS.VERIWILD.TEST_SIZE = 3000
    protocols = {name: build_test_set(cfg, name, log=False).protocol for name in ("vehicleid", "veriwild", "veri")}
    assert protocols == {"vehicleid": "gallery_draws", "veriwild": "cross_camera", "veri": "cross_camera"}
    cfg.DATASETS.VEHICLEID.TEST_SIZE = 7
    with pytest.raises(ValueError, match="DATASETS.VEHICLEID.TEST_SIZE must be one of"):
        build_test_set(cfg, "vehicleid", log=False)


def test_download_helper_says_how_to_get_each_vehicle_dataset(tmp_path):
    from reid.data.download import DownloadUnavailableError, download_dataset

    for name, folder in (("veri", "<root>/VeRi/"), ("vehicleid", "<root>/VehicleID_V1.0/"),
                         ("veriwild", "<root>/VERI-Wild/")):
        with pytest.raises(DownloadUnavailableError, match=f"on request .*Unpack .*so that {folder}"):
            download_dataset(name, str(tmp_path))
