"""Writes tiny VeRi-776, VehicleID and VERI-Wild releases of synthetic vehicles for the vehicle tests.

The images come from the synthetic dataset with DATASETS.SYNTHETIC.OBJECT vehicle (a few vehicles,
each seen by 2..3 cameras, 2 images per camera); each release gets them under its own names and
lists, laid out as its loader expects (datasets/README.md):

* VeRi-776: ``VeRi/image_{train,query,test}/<vid 4>_c<cam 3>_<frame 8>_<n>.jpg``, the synthetic
  split (query = the first image per camera);
* VehicleID: ``VehicleID_V1.0/image/<imgid 7>.jpg``, ``train_test_split/train_list.txt`` and
  ``test_list_800.txt`` (``imgid vid`` lines; the test list names every test image, no cameras);
* VERI-Wild: ``VERI-Wild/images/<vid 5>/<imgid 6>.jpg``, ``train_test_split/vehicle_info.txt`` (a
  header, then ``vid/imgid;camera;time;model;type;color``), ``train_list.txt``,
  ``test_3000_query.txt`` (the synthetic queries) and ``test_3000.txt`` (every test image, the
  queries included).
"""
from __future__ import annotations

import os
import shutil
from typing import Dict, List

from reid.data import build_dataset
from reid.data.datasets.synthetic import SyntheticDataset

#: The synthetic vehicles: 4 train + 3 test ids, 3 cameras, 2 images per camera, no distractors.
VEHICLES = dict(num_train_ids=4, num_test_ids=3, num_cameras=3, images_per_camera=2, num_distractors=0,
                image_size=(32, 32), verbose=False, object_type="vehicle")


def synthetic_vehicles(root: str, **kw) -> SyntheticDataset:
    """The synthetic vehicles generated (once) under `root`."""
    return build_dataset("synthetic", str(root), **{**VEHICLES, **kw})


def _copy(src: str, dst: str) -> str:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def write_veri(root: str, ds: SyntheticDataset) -> str:
    """A VeRi-776 folder under `root`; returns it."""
    folder = os.path.join(str(root), "VeRi")
    frame = 0
    for sub, items in (("image_train", ds.train), ("image_query", ds.query), ("image_test", ds.gallery)):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
        for path, pid, cam in items:
            frame += 1
            vid = pid + 1 if sub == "image_train" else pid  # train pids are relabelled from 0
            _copy(path, os.path.join(folder, sub, f"{vid:04d}_c{cam + 1:03d}_{frame:08d}_0.jpg"))
    return folder


def write_vehicleid(root: str, ds: SyntheticDataset, test_size: int = 800) -> Dict[str, List[str]]:
    """A VehicleID folder under `root`; returns ``{list name: its lines}``."""
    folder = os.path.join(str(root), "VehicleID_V1.0")
    lists: Dict[str, List[str]] = {"train_list.txt": [], f"test_list_{test_size}.txt": []}
    imgid = 0
    for name, items, offset in (("train_list.txt", ds.train, 1), (f"test_list_{test_size}.txt",
                                                                   sorted(ds.query + ds.gallery), 0)):
        for path, pid, _ in items:
            imgid += 1
            _copy(path, os.path.join(folder, "image", f"{imgid:07d}.jpg"))
            lists[name].append(f"{imgid:07d} {pid + offset}")
    os.makedirs(os.path.join(folder, "train_test_split"), exist_ok=True)
    for name, lines in lists.items():
        with open(os.path.join(folder, "train_test_split", name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return lists


def write_veriwild(root: str, ds: SyntheticDataset, test_size: int = 3000) -> Dict[str, List[str]]:
    """A VERI-Wild folder under `root`; returns ``{list name: its lines}`` (vehicle_info.txt too)."""
    folder = os.path.join(str(root), "VERI-Wild")
    info = ["id/image;Camera ID;Time;Model;Type;Color"]
    lists: Dict[str, List[str]] = {"train_list.txt": [], f"test_{test_size}_query.txt": [], f"test_{test_size}.txt": []}
    imgid = 0
    for items, offset, names in ((ds.train, 1, ["train_list.txt"]),
                                 (ds.query, 0, [f"test_{test_size}_query.txt", f"test_{test_size}.txt"]),
                                 (ds.gallery, 0, [f"test_{test_size}.txt"])):
        for path, pid, cam in items:
            imgid += 1
            entry = f"{pid + offset:05d}/{imgid:06d}"
            _copy(path, os.path.join(folder, "images", f"{entry}.jpg"))
            info.append(f"{entry};{cam + 1};2018-03-01 10:00:00;Audi;Sedan;white")
            for name in names:
                lists[name].append(entry)
    lists["vehicle_info.txt"] = info
    os.makedirs(os.path.join(folder, "train_test_split"), exist_ok=True)
    for name, lines in lists.items():
        with open(os.path.join(folder, "train_test_split", name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return lists
