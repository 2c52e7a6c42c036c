"""Dataset parsing on tiny fixture trees that use the real file-naming schemes."""
from __future__ import annotations

import os

import pytest

from reid.data import build_dataset
from reid.data.datasets import DatasetFormatError, DatasetNotFoundError, relabel_pids
from reid.data.datasets.market_style import parse_market_name
from reid.data.datasets.msmt17 import parse_msmt_camera

MARKET_FILES = {
    "bounding_box_train": [
        "0002_c1s1_000451_03.jpg", "0002_c2s1_000551_01.jpg", "0002_c2s1_000601_01.jpg",
        "0007_c3s3_015401_02.jpg", "0007_c6s1_020101_01.jpg", "0005_c1s1_001051_00.jpg",
    ],
    "query": ["0002_c4s1_002351_00.jpg", "0007_c5s1_005501_00.jpg"],
    "bounding_box_test": [
        "0002_c1s1_000151_01.jpg", "0007_c2s1_000301_01.jpg", "0000_c1s1_000151_02.jpg",
        "0000_c6s4_001502_04.jpg", "-1_c1s1_000401_03.jpg", "-1_c3s1_000401_05.jpg",
    ],
}


def make_market(root: str, write_jpeg, folder: str = "Market-1501-v15.09.15", files=MARKET_FILES) -> str:
    base = os.path.join(root, folder) if folder else root
    for sub, names in files.items():
        for n in names:
            write_jpeg(os.path.join(base, sub, n))
    return base


def test_market1501_counts_relabel_junk_and_distractors(tmp_path, write_jpeg):
    base = make_market(str(tmp_path), write_jpeg)
    open(os.path.join(base, "bounding_box_test", "Thumbs.db"), "w").close()  # shipped with the release
    ds = build_dataset("market1501", str(tmp_path))
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (6, 2, 4)
    # train pids 2, 5, 7 -> 0, 1, 2 (sorted original order); cameras cN -> N-1
    by_name = {os.path.basename(p): (pid, cam) for p, pid, cam in ds.train}
    assert by_name["0002_c1s1_000451_03.jpg"] == (0, 0)
    assert by_name["0005_c1s1_001051_00.jpg"] == (1, 0)
    assert by_name["0007_c6s1_020101_01.jpg"] == (2, 5)
    assert ds.train_pid_map == {2: 0, 5: 1, 7: 2}
    assert ds.num_train_pids == 3 and ds.num_train_cams == 4
    # query/gallery keep original pids; junk (-1) dropped, distractors (0) kept
    assert sorted(pid for _, pid, _ in ds.query) == [2, 7]
    assert sorted(pid for _, pid, _ in ds.gallery) == [0, 0, 2, 7]
    assert all(-1 != pid for _, pid, _ in ds.gallery)
    assert {cam for _, pid, cam in ds.query} == {3, 4}
    assert all(os.path.isfile(p) for p, _, _ in ds.train + ds.query + ds.gallery)


def test_summary_table(tmp_path, write_jpeg):
    make_market(str(tmp_path), write_jpeg)
    text = build_dataset("market1501", str(tmp_path)).summary()
    lines = text.splitlines()
    assert "subset" in lines[1] and "ids" in lines[1] and "images" in lines[1] and "cameras" in lines[1]
    row = {ln.split("|")[0].strip(): [int(x) for x in ln.split("|")[1:]] for ln in lines[3:]}
    assert row == {"train": [3, 6, 4], "query": [2, 2, 2], "gallery": [3, 4, 3]}


@pytest.mark.parametrize("folder", ["Market-1501-v15.09.15", "market1501", ""])
def test_market1501_folder_variants(tmp_path, write_jpeg, folder):
    make_market(str(tmp_path), write_jpeg, folder)
    ds = build_dataset("market1501", str(tmp_path))
    assert ds.dataset_dir == (os.path.join(str(tmp_path), folder) if folder else str(tmp_path))
    assert len(ds.train) == 6


def test_missing_folder_shows_layout_and_readme(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("market1501", str(tmp_path / "nowhere"))
    msg = str(e.value)
    assert "Market-1501-v15.09.15" in msg and "bounding_box_train" in msg and "query" in msg
    assert "datasets/README.md" in msg
    assert str(tmp_path / "nowhere") in msg


def test_partial_folder_names_missing_subfolder(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "market1501" / "bounding_box_train" / "0002_c1s1_000451_03.jpg"))
    with pytest.raises(DatasetNotFoundError, match="lacks: query, bounding_box_test"):
        build_dataset("market1501", str(tmp_path))


def test_bad_file_name_is_named(tmp_path, write_jpeg):
    files = {k: list(v) for k, v in MARKET_FILES.items()}
    files["query"].append("IMG_1234.jpg")
    make_market(str(tmp_path), write_jpeg, files=files)
    with pytest.raises(DatasetFormatError, match="IMG_1234.jpg"):
        build_dataset("market1501", str(tmp_path))


def test_camera_out_of_range_is_named(tmp_path, write_jpeg):
    files = {k: list(v) for k, v in MARKET_FILES.items()}
    files["bounding_box_train"].append("0009_c7s1_000001_00.jpg")  # Market-1501 has 6 cameras
    make_market(str(tmp_path), write_jpeg, files=files)
    with pytest.raises(DatasetFormatError, match="0009_c7s1_000001_00.jpg"):
        build_dataset("market1501", str(tmp_path))


def test_parse_market_name():
    assert parse_market_name("x/0002_c1s1_000451_03.jpg") == (2, 0)
    assert parse_market_name("-1_c3s1_000401_03.jpg") == (-1, 2)
    assert parse_market_name("0001_c8_f0046182.jpg", max_cams=8) == (1, 7)
    with pytest.raises(DatasetFormatError):
        parse_market_name("0001_x2_f0046182.jpg")


def test_dukemtmc(tmp_path, write_jpeg):
    files = {
        "bounding_box_train": ["0001_c2_f0046182.jpg", "0001_c5_f0051341.jpg", "0003_c8_f0115012.jpg"],
        "query": ["0005_c2_f0046985.jpg"],
        "bounding_box_test": ["0005_c1_f0044158.jpg", "0005_c7_f0100004.jpg", "0008_c3_f0002228.jpg"],
    }
    make_market(str(tmp_path), write_jpeg, "DukeMTMC-reID", files)
    ds = build_dataset("dukemtmc", str(tmp_path))
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 1), (0, 4), (1, 7)]
    assert [(pid, cam) for _, pid, cam in ds.query] == [(5, 1)]
    assert len(ds.gallery) == 3 and ds.num_train_cams == 3
    with pytest.raises(DatasetNotFoundError, match="DukeMTMC-reID"):
        build_dataset("dukemtmc", str(tmp_path / "empty"))


# ------------------------------------------------------------------------------- MSMT17
def msmt_name(pid: int, idx: int, cam: int, slot: str = "0303morning") -> str:
    return f"{pid:04d}/{pid:04d}_{idx:03d}_{cam:02d}_{slot}_{idx + 15:04d}_0.jpg"


def make_msmt(root: str, write_jpeg, version: str = "v1", folder=None) -> str:
    folder = folder if folder is not None else ("MSMT17_V1" if version == "v1" else "MSMT17_V2")
    base = os.path.join(root, folder) if folder else root
    train_dir, test_dir = ("train", "test") if version == "v1" else ("mask_train_v2", "mask_test_v2")
    lists = {
        # pids 0, 1, 4 in train; val re-uses identities 1 and 4 (as the real list_val does)
        "list_train.txt": [(msmt_name(0, 0, 1), 0), (msmt_name(0, 1, 3), 0), (msmt_name(1, 0, 15), 1),
                           (msmt_name(4, 0, 2, "0113noon"), 4)],
        "list_val.txt": [(msmt_name(1, 1, 7), 1), (msmt_name(4, 1, 9), 4)],
        "list_query.txt": [(msmt_name(0, 0, 2), 0), (msmt_name(3, 0, 11), 3)],
        "list_gallery.txt": [(msmt_name(0, 1, 5), 0), (msmt_name(3, 1, 12), 3), (msmt_name(3, 2, 14), 3)],
    }
    for lst, entries in lists.items():
        img_dir = train_dir if lst in ("list_train.txt", "list_val.txt") else test_dir
        for rel, _ in entries:
            write_jpeg(os.path.join(base, img_dir, rel))
        with open(os.path.join(base, lst), "w") as f:
            f.writelines(f"{rel} {pid}\n" for rel, pid in entries)
    return base


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("combine_val", [True, False])
def test_msmt17_layouts_and_combine_val(tmp_path, write_jpeg, version, combine_val):
    base = make_msmt(str(tmp_path), write_jpeg, version)
    ds = build_dataset("msmt17", str(tmp_path), combine_val=combine_val)
    assert ds.version == version and ds.dataset_dir == base
    assert len(ds.train) == (6 if combine_val else 4)
    assert ds.num_train_pids == 3  # val identities are the train identities: relabelled jointly
    assert sorted({pid for _, pid, _ in ds.train}) == [0, 1, 2]
    by_name = {os.path.basename(p): (pid, cam) for p, pid, cam in ds.train}
    assert by_name[os.path.basename(msmt_name(1, 0, 15))] == (1, 14)
    assert by_name[os.path.basename(msmt_name(4, 0, 2, "0113noon"))] == (2, 1)
    if combine_val:
        assert by_name[os.path.basename(msmt_name(4, 1, 9))] == (2, 8)
    train_sub = "train" if version == "v1" else "mask_train_v2"
    test_sub = "test" if version == "v1" else "mask_test_v2"
    assert all(p.startswith(os.path.join(base, train_sub)) and os.path.isfile(p) for p, _, _ in ds.train)
    assert all(p.startswith(os.path.join(base, test_sub)) for p, _, _ in ds.query + ds.gallery)
    assert [(pid, cam) for _, pid, cam in ds.query] == [(0, 1), (3, 10)]
    assert [(pid, cam) for _, pid, cam in ds.gallery] == [(0, 4), (3, 11), (3, 13)]


def test_msmt17_root_itself_and_version_choice(tmp_path, write_jpeg):
    make_msmt(str(tmp_path), write_jpeg, "v2", folder="")
    ds = build_dataset("msmt17", str(tmp_path), version="v2")
    assert ds.version == "v2" and ds.dataset_dir == str(tmp_path)
    with pytest.raises(DatasetNotFoundError, match="MSMT17_V1"):
        build_dataset("msmt17", str(tmp_path), version="v1")


def test_msmt17_missing_mentions_both_layouts(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("msmt17", str(tmp_path))
    msg = str(e.value)
    for s in ("MSMT17_V1", "MSMT17_V2", "mask_train_v2", "list_train.txt", "datasets/README.md"):
        assert s in msg


def test_msmt17_bad_line_names_file_and_line(tmp_path, write_jpeg):
    base = make_msmt(str(tmp_path), write_jpeg)
    with open(os.path.join(base, "list_query.txt"), "a") as f:
        f.write("0007/0007_000_xx_0303morning_0001_0.jpg 7\n")
    with pytest.raises(DatasetFormatError, match=r"list_query.txt, line 3.*0007_000_xx"):
        build_dataset("msmt17", str(tmp_path))


def test_parse_msmt_camera():
    assert parse_msmt_camera("0000/0000_000_01_0303morning_0015_0.jpg", "x") == 0
    assert parse_msmt_camera("0114_019_10_0303noon_0284_2_ex.jpg", "x") == 9
    with pytest.raises(DatasetFormatError):
        parse_msmt_camera("0000_000_16_0303morning_0015_0.jpg", "x")  # only 15 cameras


# ------------------------------------------------------------------------------- custom
def test_custom_lists_text_csv_comments_header(tmp_path, write_jpeg):
    for n in ("a 1.jpg", "b.jpg", "c.jpg", "q.jpg", "g1.jpg", "g2.jpg"):
        write_jpeg(str(tmp_path / "lists" / "imgs" / n))
    (tmp_path / "lists" / "train.txt").write_text(
        "# my crops\n\nimgs/a 1.jpg 10 0\nimgs/b.jpg  3 1   # second camera\nimgs/c.jpg 10 2\nimgs/b.jpg -1 0\n"
    )
    (tmp_path / "lists" / "query.csv").write_text("path,pid,camid\nimgs/q.jpg,10,0\n")
    (tmp_path / "lists" / "gallery.csv").write_text(
        f"imgs/g1.jpg, 10, 1\n{tmp_path / 'lists' / 'imgs' / 'g2.jpg'},0,2\n"
    )
    ds = build_dataset("custom", str(tmp_path), train_list="lists/train.txt",
                       query_list=str(tmp_path / "lists" / "query.csv"), gallery_list="lists/gallery.csv")
    assert [(os.path.basename(p), pid, cam) for p, pid, cam in ds.train] == [
        ("a 1.jpg", 1, 0), ("b.jpg", 0, 1), ("c.jpg", 1, 2)]  # 3 -> 0, 10 -> 1; junk -1 dropped
    assert ds.query == [(str(tmp_path / "lists" / "imgs" / "q.jpg"), 10, 0)]
    assert [(pid, cam) for _, pid, cam in ds.gallery] == [(10, 1), (0, 2)]


def test_custom_bad_line_names_file_and_line(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text("a.jpg 1 0\na.jpg one 0\n")
    with pytest.raises(DatasetFormatError, match=r"train.txt, line 2.*one"):
        build_dataset("custom", str(tmp_path), train_list="train.txt")


def test_custom_hash_and_comma_inside_paths(tmp_path, write_jpeg):
    for n in ("a#1.jpg", "a,b.jpg", "c d.jpg", "e.jpg"):
        write_jpeg(str(tmp_path / "imgs" / n))
    (tmp_path / "train.txt").write_text(
        "#header comment\n"
        "imgs/a#1.jpg 1 0   # '#' inside a name is part of it; after a space it starts a comment\n"
        "imgs/a,b.jpg 2 1\n"  # whitespace-separated line with a comma in its path
        "imgs/c d.jpg,3,0\n"  # comma-separated line with a space in its path
        "imgs/e.jpg, 4, 2 #x\n"
    )
    ds = build_dataset("custom", str(tmp_path), train_list="train.txt")
    assert [(os.path.basename(p), cam) for p, _, cam in ds.train] == [
        ("a#1.jpg", 0), ("a,b.jpg", 1), ("c d.jpg", 0), ("e.jpg", 2)]


def test_custom_format_error_points_to_the_custom_list_section(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text("a.jpg 1\n")
    with pytest.raises(DatasetFormatError) as e:
        build_dataset("custom", str(tmp_path), train_list="train.txt")
    msg = str(e.value)
    assert "Custom list files" in msg and "where to get the dataset" not in msg


def test_split_list_line_keeps_its_contract():
    """reid.data.sources reads list files with these helpers too."""
    from reid.data.datasets.custom import is_header, split_list_line, strip_comment

    assert split_list_line("imgs/a b.jpg 1 0") == ["imgs/a b.jpg", "1", "0"]
    assert split_list_line("imgs/a b.jpg,1,0") == ["imgs/a b.jpg", "1", "0"]
    assert split_list_line("imgs/a,b.jpg 1 0") == ["imgs/a,b.jpg", "1", "0"]
    assert split_list_line("imgs/a.jpg, 10, 1") == ["imgs/a.jpg", "10", "1"]
    assert split_list_line("imgs/a.jpg") == ["imgs/a.jpg"]
    assert is_header(split_list_line("path pid camid")) and is_header(split_list_line("path,pid,camid"))
    assert strip_comment("imgs/a#1.jpg 1 0 # note\n") == "imgs/a#1.jpg 1 0"
    assert strip_comment("# all comment") == "" and strip_comment("a.jpg\t#c") == "a.jpg"


def test_custom_missing_image_is_named(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text("a.jpg 1 0\nmissing/b.jpg 2 0\n")
    with pytest.raises(DatasetNotFoundError, match=r"line 2.*missing/b.jpg"):
        build_dataset("custom", str(tmp_path), train_list="train.txt")


def test_custom_needs_lists(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="DATASETS.CUSTOM"):
        build_dataset("custom", str(tmp_path))
    with pytest.raises(DatasetNotFoundError, match="nope.txt"):
        build_dataset("custom", str(tmp_path), train_list="nope.txt")


def test_custom_test_set_without_its_lists_names_the_keys_to_set(tmp_path, write_jpeg):
    from reid.config import get_cfg
    from reid.data import build_test_data

    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text("a.jpg 1 0\n")
    cfg = get_cfg()
    cfg.DATASETS.ROOT, cfg.DATASETS.CUSTOM.TRAIN_LIST = str(tmp_path), "train.txt"
    with pytest.raises(ValueError) as e:
        build_test_data(cfg, "custom")
    msg = str(e.value)
    assert "has 0 query and 0 gallery images" in msg
    assert "DATASETS.CUSTOM.QUERY_LIST and DATASETS.CUSTOM.GALLERY_LIST" in msg and "DATASETS.TESTS" in msg


def test_a_missing_dataset_says_what_to_do_on_its_first_line(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("market1501", str(tmp_path / "nowhere"))
    first, *rest = str(e.value).splitlines()
    assert "Could not find the Market-1501 dataset" in first and "set DATASETS.ROOT" in first
    assert "datasets/README.md" in first
    # The folders searched and the layout follow, one per line (a program prints them below its error line).
    assert rest[0] == "Searched:" and "Expected layout:" in rest
    assert any(line.strip().startswith("bounding_box_train/") for line in rest)


def test_unknown_name_lists_valid_names(tmp_path):
    with pytest.raises(KeyError) as e:
        build_dataset("market", str(tmp_path))
    for name in ("market1501", "msmt17", "dukemtmc", "custom", "synthetic"):
        assert name in str(e.value)


def test_relabel_pids_sorted_order():
    items, mapping = relabel_pids([("a", 40, 0), ("b", 3, 1), ("c", 40, 2), ("d", 17, 0)])
    assert mapping == {3: 0, 17: 1, 40: 2}
    assert [pid for _, pid, _ in items] == [2, 0, 2, 1]
    assert relabel_pids([]) == ([], {})


# ------------------------------------------------------------------------------- download
def test_download_manual_only_datasets_explain(tmp_path):
    from reid.data.download import DownloadUnavailableError, download_dataset

    with pytest.raises(DownloadUnavailableError, match="withdrawn"):
        download_dataset("dukemtmc", str(tmp_path))
    with pytest.raises(DownloadUnavailableError, match="agreement"):
        download_dataset("msmt17", str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_download_market_unpacks_with_gdown(tmp_path, write_jpeg, monkeypatch):
    import sys
    import types
    import zipfile

    from reid.data import download

    src = make_market(str(tmp_path / "src"), write_jpeg)
    calls = []

    def fake_download(id, output, quiet):  # stands in for the Google Drive transfer
        calls.append(id)
        with zipfile.ZipFile(output, "w") as zf:
            for dirpath, _, files in os.walk(src):
                for f in files:
                    full = os.path.join(dirpath, f)
                    zf.write(full, os.path.relpath(full, os.path.dirname(src)))
        return output

    monkeypatch.setitem(sys.modules, "gdown", types.SimpleNamespace(download=fake_download))
    root = str(tmp_path / "root")
    folder = download.download_dataset("market1501", root)
    assert calls == [download.GDRIVE_MIRRORS["market1501"]["file_id"]]
    assert folder == os.path.join(root, "Market-1501-v15.09.15") and sorted(os.listdir(root)) == ["Market-1501-v15.09.15"]
    assert len(build_dataset("market1501", root).train) == 6
    assert download.download_dataset("market1501", root) == folder and len(calls) == 1  # already there


# ------------------------------------------------------------------------------- review fixes
def test_market_skips_macos_appledouble_files(tmp_path, write_jpeg):
    base = make_market(str(tmp_path), write_jpeg)
    for sub in ("bounding_box_train", "query", "bounding_box_test"):
        # AppleDouble resource files: binary metadata, named like the image with "._" in front
        (tmp_path / base / sub / "._0002_c1s1_000451_03.jpg").write_bytes(b"\x00\x05\x16\x07" + b"\0" * 60)
    (tmp_path / base / "query" / ".hidden.jpg").write_bytes(b"")
    ds = build_dataset("market1501", str(tmp_path))
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (6, 2, 4)
    assert not any(os.path.basename(p).startswith(".") for p, _, _ in ds.train + ds.query + ds.gallery)


def append_line(base, lst, line):
    with open(os.path.join(base, lst), "a") as f:
        f.write(line + "\n")


@pytest.mark.parametrize("pid", ["-1", "--1", "1_0", "+1", "x"])
def test_msmt17_pid_must_be_a_plain_number(tmp_path, write_jpeg, pid):
    base = make_msmt(str(tmp_path), write_jpeg)
    append_line(base, "list_train.txt", f"{msmt_name(9, 0, 1)} {pid}")
    with pytest.raises(DatasetFormatError, match=r"list_train.txt, line 5: expected") as e:
        build_dataset("msmt17", str(tmp_path))
    assert repr(f"{msmt_name(9, 0, 1)} {pid}") in str(e.value)


def test_msmt17_list_val_only_needed_with_combine_val(tmp_path, write_jpeg):
    base = make_msmt(str(tmp_path), write_jpeg)
    os.remove(os.path.join(base, "list_val.txt"))
    ds = build_dataset("msmt17", str(tmp_path), combine_val=False)
    assert len(ds.train) == 4 and ds.num_train_pids == 3
    with pytest.raises(DatasetNotFoundError, match=r"lacks: list_val.txt[\s\S]*MSMT17_COMBINE_VAL"):
        build_dataset("msmt17", str(tmp_path), combine_val=True)


def test_msmt17_version_from_config_picks_the_release(tmp_path, write_jpeg):
    from reid.config import get_cfg
    from reid.data import build_test_data

    make_msmt(str(tmp_path), write_jpeg, "v1")
    make_msmt(str(tmp_path), write_jpeg, "v2")
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(tmp_path)
    for version, sub in (("auto", "MSMT17_V1"), ("v1", "MSMT17_V1"), ("v2", "MSMT17_V2"), ("V2", "MSMT17_V2")):
        cfg.DATASETS.MSMT17_VERSION = version
        query, _ = build_test_data(cfg, "msmt17")
        assert all(os.sep + sub + os.sep in p for p, _, _ in query), version
    cfg.DATASETS.MSMT17_VERSION = "v3"
    with pytest.raises(ValueError, match=r"DATASETS.MSMT17_VERSION.*'auto', 'v1', 'v2'.*'v3'"):
        build_test_data(cfg, "msmt17")


@pytest.mark.parametrize("lst", ["list_train.txt", "list_val.txt", "list_query.txt", "list_gallery.txt"])
def test_msmt17_missing_first_image_fails_at_load_with_the_layout(tmp_path, write_jpeg, lst):
    base = make_msmt(str(tmp_path), write_jpeg)
    first = open(os.path.join(base, lst)).readline().split()[0]
    sub = "train" if lst in ("list_train.txt", "list_val.txt") else "test"
    os.remove(os.path.join(base, sub, first))
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("msmt17", str(tmp_path))
    msg = str(e.value)
    assert lst in msg and os.path.basename(first) in msg and "does not exist" in msg
    assert "mask_train_v2" in msg and "list_gallery.txt" in msg  # the expected layout


def test_msmt17_image_folders_one_level_too_deep_fail_at_load(tmp_path, write_jpeg):
    base = make_msmt(str(tmp_path), write_jpeg)
    os.rename(os.path.join(base, "train"), os.path.join(base, "inner"))
    os.makedirs(os.path.join(base, "train"))
    os.rename(os.path.join(base, "inner"), os.path.join(base, "train", "train"))  # unzip made an extra level
    with pytest.raises(DatasetNotFoundError, match=r"list_train.txt: its first image .*does not exist"):
        build_dataset("msmt17", str(tmp_path))


@pytest.mark.parametrize(
    "line", ["a.jpg 1_0 0", "a.jpg 1 0_1", "a.jpg +1 0", "a.jpg 1 -0", "a.jpg --1 0", "a.jpg -2 0"]
)
def test_custom_ids_must_be_plain_integers(tmp_path, write_jpeg, line):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text(f"a.jpg 3 0\n{line}\n")
    with pytest.raises(DatasetFormatError, match=r"train.txt, line 2") as e:
        build_dataset("custom", str(tmp_path), train_list="train.txt")
    assert repr(line) in str(e.value)


def test_custom_junk_pid_still_dropped(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text("a.jpg 3 0\na.jpg -1 2\na.jpg,12,1\n")
    ds = build_dataset("custom", str(tmp_path), train_list="train.txt")
    assert [(pid, cam) for _, pid, cam in ds.train] == [(0, 0), (1, 1)]


def market_zip(src_root, write_jpeg, archive):
    import zipfile

    src = make_market(src_root, write_jpeg)
    with zipfile.ZipFile(archive, "w") as zf:
        for dirpath, _, files in os.walk(src):
            for f in files:
                full = os.path.join(dirpath, f)
                zf.write(full, os.path.relpath(full, os.path.dirname(src)))
    return archive


def block_gdown(monkeypatch):
    import builtins
    import sys

    real_import = builtins.__import__

    def no_gdown(name, *args, **kwargs):
        if name == "gdown":
            raise ImportError("No module named 'gdown'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "gdown", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_gdown)


def test_download_uses_an_archive_already_in_the_root_without_gdown(tmp_path, write_jpeg, monkeypatch):
    from reid.data import download

    block_gdown(monkeypatch)
    root = tmp_path / "root"
    root.mkdir()
    mirror = download.GDRIVE_MIRRORS["market1501"]
    with pytest.raises(download.DownloadUnavailableError, match="gdown is not installed.*by hand"):
        download.download_dataset("market1501", str(root))  # nothing there: gdown would be needed
    market_zip(str(tmp_path / "src"), write_jpeg, str(root / mirror["archive"]))
    folder = download.download_dataset("market1501", str(root), keep_archive=True)
    assert folder == str(root / mirror["folder"])
    assert sorted(os.listdir(root)) == sorted([mirror["folder"], mirror["archive"]])
    assert len(build_dataset("market1501", str(root)).train) == 6


def test_download_damaged_archive_is_deleted_with_manual_steps(tmp_path, monkeypatch):
    from reid.data import download

    block_gdown(monkeypatch)
    mirror = download.GDRIVE_MIRRORS["market1501"]
    archive = tmp_path / mirror["archive"]
    archive.write_text("<!DOCTYPE html><html><title>Google Drive - Quota exceeded</title></html>")
    with pytest.raises(download.DownloadUnavailableError) as e:
        download.download_dataset("market1501", str(tmp_path))
    msg = str(e.value)
    assert mirror["archive"] in msg and "not a valid zip" in msg and "by hand" in msg and mirror["file_id"] in msg
    assert os.listdir(tmp_path) == []  # neither the bad archive nor a .unpack-* folder is left


HUGE = "99999999999999999999"  # > 2**63 - 1: numpy and torch would answer "Overflow when unpacking long long"


@pytest.mark.parametrize("sub, name, what", [
    ("query", f"{HUGE}_c1s1_000151_01.jpg", "person id"),
    ("bounding_box_train", f"{HUGE}_c1s1_000151_01.jpg", "person id"),
    ("bounding_box_test", f"{HUGE}_c1s1_000151_01.jpg", "person id"),
])
def test_a_market_id_past_int64_names_the_file(tmp_path, write_jpeg, sub, name, what):
    base = make_market(str(tmp_path), write_jpeg)
    write_jpeg(os.path.join(base, sub, name))
    with pytest.raises(DatasetFormatError) as info:
        build_dataset("market1501", str(tmp_path))
    message = str(info.value)
    assert name in message and f"{what} {HUGE} does not fit a 64-bit integer" in message, message
    assert "\n" not in message


@pytest.mark.parametrize("line, what", [(f"a.jpg {HUGE} 0", "pid"), (f"a.jpg 3 {HUGE}{HUGE}", "camid")])
def test_a_custom_list_id_past_int64_names_file_and_line(tmp_path, write_jpeg, line, what):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "train.txt").write_text(f"a.jpg 3 0\n{line}\n")
    (tmp_path / "q.txt").write_text("a.jpg 3 0\n")
    with pytest.raises(DatasetFormatError, match=rf"train.txt, line 2: {what} .* does not fit a 64-bit integer"):
        build_dataset("custom", str(tmp_path), train_list="train.txt", query_list="q.txt", gallery_list="q.txt")


def test_an_msmt17_pid_past_int64_names_file_and_line(tmp_path, write_jpeg):
    base = make_msmt(str(tmp_path), write_jpeg)
    first = open(os.path.join(base, "list_query.txt")).readline().split()[0]
    append_line(base, "list_query.txt", f"{first} {HUGE}")
    with pytest.raises(DatasetFormatError, match=rf"list_query.txt, line \d+: pid {HUGE} does not fit a 64-bit"):
        build_dataset("msmt17", str(tmp_path))
