"""reid.tracking.sequences: seqinfo.ini, frames, layouts of sequence folders, one-line errors."""
import os

import pytest

from reid.tracking.sequences import SequenceError, find_sequences, read_sequence
from tests.tracking.sequence_files import HEIGHT, WIDTH, write_sequence


def test_read_sequence_values_and_paths(tmp_path):
    folder = write_sequence(str(tmp_path / "lobby" / "cam-a"), length=3, gt="", ext=".jpg")
    seq = read_sequence(folder)
    assert (seq.name, seq.length, seq.width, seq.height, seq.frame_rate) == ("cam-a", 3, WIDTH, HEIGHT, 10.0)
    assert seq.root == folder and seq.image_dir == os.path.join(folder, "img1") and seq.image_ext == ".jpg"
    assert (seq.camera, seq.scene) == (1, "lobby")  # defaults: index among siblings, parent folder's name
    assert seq.frame_path(2) == os.path.join(folder, "img1", "000002.jpg")
    assert seq.gt_path == os.path.join(folder, "gt", "gt.txt") and seq.det_path is None


def test_keys_are_case_insensitive_and_ours_are_read(tmp_path):
    folder = write_sequence(str(tmp_path / "s"), extra={"CAMERA": "3", "scene": "mall"})
    with open(os.path.join(folder, "seqinfo.ini")) as f:
        text = f.read().replace("imWidth", "IMWIDTH").replace("seqLength", "seqlength").replace("name=s", "NAME=other")
    with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
        f.write(text)
    seq = read_sequence(folder)
    assert (seq.name, seq.camera, seq.scene, seq.width, seq.length) == ("other", 3, "mall", WIDTH, 4)


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("seqLength=4\n", ""), "[Sequence] has no seqLength; add 'seqLength=<number>'"),
    (lambda t: t.replace("imWidth=96", "imWidth=wide"), "imWidth='wide' is not a whole number"),
    (lambda t: t.replace("frameRate=10", "frameRate=-1"), "frameRate='-1' must be a positive number"),
    (lambda t: t.replace("[Sequence]", "[Other]"), "no [Sequence] section"),
    (lambda t: t.replace("[Sequence]\n", ""), "not a readable INI file"),
])
def test_seqinfo_errors_name_file_and_key(tmp_path, edit, expected):
    folder = write_sequence(str(tmp_path / "s"))
    ini = os.path.join(folder, "seqinfo.ini")
    with open(ini) as f:
        text = edit(f.read())
    with open(ini, "w") as f:
        f.write(text)
    with pytest.raises(SequenceError) as e:
        read_sequence(folder)
    assert str(e.value).startswith(ini) and expected in str(e.value) and "\n" not in str(e.value)


def test_missing_seqinfo_image_folder_and_frames(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(SequenceError, match=r"seqinfo.ini: .*a MOTChallenge sequence folder needs a seqinfo.ini"):
        read_sequence(str(tmp_path / "empty"))
    folder = write_sequence(str(tmp_path / "s"), length=5, frames=[1, 2, 4])
    with pytest.raises(SequenceError) as e:
        read_sequence(folder)
    img1 = os.path.join(folder, "img1")
    assert str(e.value) == (f"{img1}: 2 of the 5 frames (seqLength in {folder}/seqinfo.ini) are missing, the first "
                            f"{img1}/000003.png (frame 3; 3 .png files found); add the frames or correct seqLength / "
                            "imExt.")
    os.rename(img1, os.path.join(folder, "frames"))
    with pytest.raises(SequenceError, match=r"the image folder .*/img1 \(imDir\) does not exist"):
        read_sequence(folder)


def test_find_sequences_in_every_layout(tmp_path):
    one = write_sequence(str(tmp_path / "single"))
    assert [s.name for s in find_sequences(one)] == ["single"]
    for name in ("b", "a"):
        write_sequence(str(tmp_path / "flat" / name))
    flat = find_sequences(str(tmp_path / "flat"))
    assert [(s.name, s.camera, s.scene) for s in flat] == [("a", 1, "flat"), ("b", 2, "flat")]
    for split, name in (("train", "MOT-02"), ("train", "MOT-04"), ("test", "MOT-01")):
        write_sequence(str(tmp_path / "mot" / split / name))
    nested = find_sequences(str(tmp_path / "mot"))
    assert [(s.name, s.scene, s.camera) for s in nested] == [("MOT-01", "test", 1), ("MOT-02", "train", 1),
                                                             ("MOT-04", "train", 2)]


def test_find_sequences_without_any_says_the_layout(tmp_path):
    os.makedirs(tmp_path / "nothing" / "sub")
    with pytest.raises(SequenceError) as e:
        find_sequences(str(tmp_path / "nothing"))
    assert str(e.value).startswith(f"{tmp_path / 'nothing'}: no MOTChallenge sequence found (a sequence folder "
                                   "holds seqinfo.ini and img1/000001.jpg")
    with pytest.raises(SequenceError, match="Sequences folder .*absent. does not exist; a sequence folder holds"):
        find_sequences(str(tmp_path / "absent"))


def test_two_sequences_of_one_name_are_refused(tmp_path):
    for parent in ("a", "b"):
        write_sequence(str(tmp_path / "all" / parent / "cam1"), length=1)
    with pytest.raises(SequenceError, match=r"are both named 'cam1'.* distinct names"):
        find_sequences(str(tmp_path / "all"))


def test_a_sequence_without_seqinfo_beside_others_is_one_line_not_dropped(tmp_path):
    write_sequence(str(tmp_path / "cams" / "c1"))
    lost = tmp_path / "cams" / "c2"
    write_sequence(str(lost))
    os.remove(lost / "seqinfo.ini")
    (tmp_path / "cams" / "notes").mkdir()  # a folder that is no sequence stays allowed
    with pytest.raises(SequenceError, match=r"c2 looks like a sequence \(img1/, det/ or gt/\) but has no seqinfo.ini"):
        find_sequences(str(tmp_path / "cams"))


def test_an_absurd_seq_length_or_frame_size_is_one_line_before_anything_is_allocated(tmp_path):
    import tracemalloc

    # 2 * 10^7: the old check built every expected name first (about 1.5 GB here; 10^11 was killed by the kernel)
    folder = write_sequence(str(tmp_path / "s"), length=3, extra={"seqLength": "20000000"})
    tracemalloc.start()
    with pytest.raises(SequenceError, match=r"19999997 of the 20000000 frames .* the first .*000004.png"):
        read_sequence(folder)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 << 20  # the old check built every expected frame name: gigabytes
    big = write_sequence(str(tmp_path / "b"), length=3, extra={"imWidth": "1000000000"})
    with pytest.raises(SequenceError, match=r"imWidth=1000000000 is larger than any camera's frames \(at most 16384\)"):
        read_sequence(big)


@pytest.mark.parametrize("im_dir", ["../other/img1", "/tmp/frames", "img1/../../x"])
def test_an_image_folder_outside_the_sequence_is_one_line(tmp_path, im_dir):
    from tests.tracking.sequence_files import write_sequence

    folder = write_sequence(str(tmp_path / "s"), length=2, extra={"imDir": im_dir})
    with pytest.raises(SequenceError, match=r"seqinfo.ini: imDir=.* leads outside the sequence folder.*ln -s"):
        read_sequence(folder)


def test_an_image_folder_linked_in_is_read(tmp_path):
    from tests.tracking.sequence_files import write_sequence

    frames = write_sequence(str(tmp_path / "elsewhere"), length=2)
    folder = tmp_path / "s"
    write_sequence(str(folder), length=2, extra={"imDir": "frames"}, frames=[])
    os.symlink(os.path.join(frames, "img1"), folder / "frames")
    assert read_sequence(str(folder)).image_dir == str(folder / "frames")
