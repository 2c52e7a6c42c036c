"""Image sources: labels of list-file lines."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from reid.data.sources import list_entries


def test_labels_past_int64_are_one_line_naming_the_list_file_and_line(tmp_path):
    Image.fromarray(np.zeros((8, 4, 3), dtype=np.uint8)).save(tmp_path / "im0.png")
    listing = tmp_path / "list.txt"
    listing.write_text(f"im0.png 0 {2**63 - 1}\nim0.png 0 100000000000000000000\n")
    with pytest.raises(ValueError) as info:
        list_entries(listing)  # was: an OverflowError later, in label_arrays
    message = str(info.value)
    assert f"List file {str(listing)!r} line 2: pid 0 / camid 100000000000000000000 do not fit int64" in message
    listing.write_text(f"im0.png -3 {2**63 - 1}\n")
    pids, camids = list_entries(listing).label_arrays()
    assert pids.tolist() == [-3] and camids.tolist() == [2**63 - 1]


@pytest.mark.parametrize("line", ["im0.png 3", "im0.png,3", "im0.png 3 1 7", "sub dir/im1.jpg 12"])
def test_a_line_of_another_list_format_is_named_with_its_line(tmp_path, line):
    Image.fromarray(np.zeros((8, 4, 3), dtype=np.uint8)).save(tmp_path / "im0.png")
    listing = tmp_path / "list.txt"
    listing.write_text(f"im0.png 0 1\n{line}\n")
    # was: "names 1 files that are not images" (the fields taken as part of the file name)
    with pytest.raises(ValueError, match=rf"^List file {str(listing)!r} line 2: '{line}' is neither an image path "
                                         r"nor 'path pid camid' \(three fields\); give one image path per line, "
                                         r"or all three fields\.$"):
        list_entries(listing)


def test_a_file_name_with_spaces_and_digits_is_still_a_path(tmp_path):
    for name in ("frame 0001.jpg", "cam 2 1.png"):
        Image.fromarray(np.zeros((8, 4, 3), dtype=np.uint8)).save(tmp_path / name)
    listing = tmp_path / "list.txt"
    listing.write_text("frame 0001.jpg\ncam 2 1.png\n")
    assert [p.rsplit("/", 1)[1] for p in list_entries(listing).paths] == ["frame 0001.jpg", "cam 2 1.png"]
