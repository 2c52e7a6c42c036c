"""Image sources: labels of list-file lines."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from reid.inference.sources import list_entries


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
