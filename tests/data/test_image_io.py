"""Image files that lie about their size, or are not images at all: the header is checked before
anything is decoded, and every refusal names the file."""
import os
import struct
import zlib

import cv2
import numpy as np
import pytest

from reid.data import image_io
from reid.data.image_io import MAX_IMAGE_PIXELS, CorruptImageError, image_dimensions, read_image


def png_header_only(width, height):
    """A valid-looking PNG: signature, an IHDR chunk declaring width x height, a tiny IDAT, IEND."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


def jpeg_declaring(width, height):
    """SOI, an APP0 segment, then a baseline frame header declaring width x height, SOS, EOI."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x00" * 8 + b"\xff\xd9"


@pytest.fixture
def no_decoding(monkeypatch):
    def must_not_decode(*args, **kwargs):
        raise AssertionError("cv2.imdecode was called on a file whose header declares too many pixels")

    monkeypatch.setattr(image_io.cv2, "imdecode", must_not_decode)


@pytest.mark.parametrize("name, data, size", [
    ("huge.png", png_header_only(50_000, 50_000), "50000 x 50000"),
    ("huge.jpg", jpeg_declaring(60_000, 40_000), "60000 x 40000"),
    ("huge.bmp", b"BM" + b"\0" * 12 + struct.pack("<Iii", 40, 30_000, -30_000) + b"\0" * 40, "30000 x 30000"),
    ("empty_side.png", png_header_only(0, 10), "0 x 10"),
])
def test_a_header_that_declares_too_many_pixels_is_refused_before_decoding(tmp_path, no_decoding, name, data, size):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(CorruptImageError, match=rf"{name}': its header declares {size} pixels \(at most "
                                                rf"{MAX_IMAGE_PIXELS:,}"):
        read_image(str(path))


def test_special_oversized_and_foreign_files_are_one_line_errors(tmp_path, monkeypatch):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(CorruptImageError, match=r"pipe.jpg': it is a FIFO \(named pipe\), not a file"):
        read_image(str(fifo))
    hdr = tmp_path / "really_radiance.jpg"
    ok, data = cv2.imencode(".hdr", np.ones((4, 5, 3), np.float32))
    hdr.write_bytes(data.tobytes())  # OpenCV decodes it (guessing from the bytes); no header reader knows it
    with pytest.raises(CorruptImageError, match="really_radiance.jpg': it is binary data, not an image in a format read here"):
        read_image(str(hdr))
    big = tmp_path / "big.png"
    assert cv2.imwrite(str(big), np.zeros((64, 32, 3), np.uint8))
    monkeypatch.setattr(image_io, "MAX_IMAGE_BYTES", 10)
    with pytest.raises(CorruptImageError, match=r"big.png': the file is \d+ MB, more than the 0 MB"):
        read_image(str(big))


@pytest.mark.parametrize("ext", [".jpg", ".png", ".bmp", ".tif", ".webp"])
def test_real_images_of_every_format_are_measured_and_read(tmp_path, ext):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (37, 21, 3), dtype=np.uint8)
    path = str(tmp_path / f"x{ext}")
    assert cv2.imwrite(path, img)
    with open(path, "rb") as f:
        assert image_dimensions(f.read()) == (21, 37)
    assert read_image(path).shape == (37, 21, 3)


def test_a_tiff_whose_tags_claim_a_huge_size_is_refused(tmp_path, no_decoding):
    path = tmp_path / "huge.tif"
    assert cv2.imwrite(str(path), np.zeros((4, 4, 3), np.uint8))
    data = bytearray(path.read_bytes())
    assert data[:2] == b"II"  # little-endian TIFF: first IFD offset, entry count, 12-byte entries
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        tag, kind = struct.unpack_from("<HH", data, entry)
        if tag in (256, 257):  # ImageWidth, ImageLength
            struct.pack_into("<H" if kind == 3 else "<I", data, entry + 8, 60_000)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptImageError, match=r"huge.tif': its header declares (more than|60000 x 60000)"):
        read_image(str(path))


@pytest.mark.parametrize("ext", [".png", ".bmp", ".jpg", ".webp"])
@pytest.mark.parametrize("width, height", [(1, 1), (3, 10), (10, 3), (2, 7)])
def test_skip_corrupt_keeps_valid_images_under_4_pixels_a_side(tmp_path, ext, width, height):
    path = str(tmp_path / f"narrow{ext}")
    assert cv2.imwrite(path, np.full((height, width, 3), 90, np.uint8))
    kept, bad = image_io.filter_readable([(path, 1, 0)])  # was: dropped by the 1/4-scale check
    assert kept == [(path, 1, 0)] and bad == []
    assert read_image(path).shape == (height, width, 3)


@pytest.mark.parametrize("data, kind", [
    (b"person 1, camera 2\n", "a text file"),
    (b"MODEL:\n  WEIGHTS: x.pth\n", "a YAML/text file"),
    (b"PK\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
     b"\x10\x00\x12\x00archive/data.pkl", "a torch checkpoint"),
    (b"", None),
])
def test_a_file_that_is_not_an_image_is_named_for_what_it_is(tmp_path, data, kind):
    path = tmp_path / "crop.jpg"
    path.write_bytes(data)
    with pytest.raises(CorruptImageError) as info:
        read_image(str(path))
    expected = "the file is empty" if kind is None else f"it is {kind}, not an image in a format read here"
    assert f"Cannot read image {str(path)!r}: {expected}" in str(info.value)
