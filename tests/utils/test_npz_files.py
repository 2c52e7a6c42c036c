"""Reading .npz members without trusting the file: only what is asked, sizes checked first."""
import io
import zipfile

import numpy as np
import pytest

from reid.utils.npz_files import MAX_RATIO, NpzError, json_object, npz_names, read_npz


def npy_bytes(array=None, header_shape=None, dtype="<f4", data=b""):
    buf = io.BytesIO()
    if array is not None:
        np.save(buf, array)
        return buf.getvalue()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": header_shape})
    return buf.getvalue() + data


def test_reads_only_what_is_asked_and_keeps_arrays_exact(tmp_path):
    path = tmp_path / "g.npz"
    feats = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("feats.npy", npy_bytes(feats))
        zf.writestr("fortran.npy", npy_bytes(np.asfortranarray(np.arange(6).reshape(2, 3))))
        # A member whose data is not valid deflate: reading it would fail, so it must not be read.
        info = zipfile.ZipInfo("unused.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, b"x" * 100)
    raw = bytearray(path.read_bytes())
    start = raw.find(b"x" * 50)
    raw[start:start + 50] = b"\xff" * 50  # corrupt the unused member's compressed bytes
    path.write_bytes(bytes(raw))
    out = read_npz(str(path), ["feats"], optional=["fortran", "absent"])
    np.testing.assert_array_equal(out["feats"], feats)
    np.testing.assert_array_equal(out["fortran"], np.arange(6).reshape(2, 3))
    assert out["feats"].flags.writeable and "absent" not in out
    assert npz_names(str(path)) == ["feats", "fortran", "unused"]


def test_a_declared_shape_larger_than_the_member_is_refused_before_allocating(tmp_path):
    path = tmp_path / "claim.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("feats.npy", npy_bytes(header_shape=(1 << 28, 8), data=b"\0" * 64))
    with pytest.raises(NpzError, match=r"array 'feats' declares shape \(268435456, 8\) \(8589934592 bytes\) but its "
                                       r"member holds \d+ bytes"):
        read_npz(str(path), ["feats"])


def test_a_compression_bomb_is_refused_without_decompressing_it(tmp_path):
    path = tmp_path / "bomb.npz"
    size = 80 << 20
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open("feats.npy", "w", force_zip64=True) as f:
            f.write(npy_bytes(header_shape=(size // 4,)))
            f.write(b"\0" * size)
    info = zipfile.ZipFile(path).getinfo("feats.npy")
    assert info.file_size > MAX_RATIO * info.compress_size
    with pytest.raises(NpzError, match=rf"would expand from {info.compress_size} to {info.file_size} bytes"):
        read_npz(str(path), ["feats"])


def test_object_arrays_truncated_members_and_foreign_files(tmp_path):
    path = tmp_path / "obj.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("meta.npy", npy_bytes(np.array([{"a": 1}], dtype=object)))
    with pytest.raises(NpzError, match="holds Python objects, which would need pickle"):
        read_npz(str(path), ["meta"])
    cut = tmp_path / "cut.npz"
    np.savez(cut, feats=np.ones((100, 10), np.float32))
    cut.write_bytes(cut.read_bytes()[:2000])
    with pytest.raises(NpzError, match="cut.npz"):
        read_npz(str(cut), ["feats"])
    npy = tmp_path / "plain.npz"
    np.save(open(npy, "wb"), np.zeros(3))
    with pytest.raises(NpzError, match="single NumPy array"):
        npz_names(str(npy))
    with pytest.raises(NpzError, match=r"has no array 'paths' \(found: feats\)"):
        np.savez(tmp_path / "f.npz", feats=np.zeros(2))
        read_npz(str(tmp_path / "f.npz"), ["paths"])


def test_json_object_accepts_only_objects():
    assert json_object('{"a": 1}') == {"a": "1"}
    assert json_object(np.asarray('{"a": 1}'), strings=False) == {"a": 1}
    for bad in ("[1, 2]", "3", "not json", "[" * 100_000, np.asarray(["{}", "{}"]), np.asarray(1)):
        assert json_object(bad) is None
