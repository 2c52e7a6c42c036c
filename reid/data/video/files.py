"""Reading the side files of video datasets (MATLAB .mat arrays, name lists) with one-line errors."""
from __future__ import annotations

from typing import List

import numpy as np

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.utils.path_kinds import check_file
from reid.utils.text_files import text_lines


def require_file(path: str, what: str, hint: str) -> str:
    """`path` when it is a regular file, else a one-line DatasetNotFoundError (nothing there) or
    DatasetFormatError (a folder, a FIFO...) naming it and saying `hint`."""
    return check_file(path, what, hint, error=DatasetFormatError, missing_error=DatasetNotFoundError)


def read_mat_array(path: str, key: str, hint: str) -> np.ndarray:
    """The integer array stored under `key` in MATLAB file `path`.

    A file scipy cannot read, a missing key or non-integer values raise a one-line
    DatasetFormatError naming the file and ending with `hint`.
    """
    from scipy.io import loadmat  # scipy is only needed by the video datasets that ship .mat files

    require_file(path, "File", hint)
    try:
        mat = loadmat(path)
    except Exception as e:  # scipy raises ValueError, TypeError, OSError... for a file it cannot parse
        raise DatasetFormatError(f"Cannot read MATLAB file {path!r} ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else 'unreadable'}); {hint}") from None
    if key not in mat:
        keys = sorted(k for k in mat if not k.startswith("__"))
        raise DatasetFormatError(f"MATLAB file {path!r} has no array {key!r} (it has: {', '.join(keys) or 'none'}); "
                                 f"{hint}")
    arr = np.asarray(mat[key])
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr)))):
        raise DatasetFormatError(f"MATLAB file {path!r}: array {key!r} holds non-integer values; {hint}")
    return arr.astype(np.int64)


def read_name_list(path: str, hint: str) -> List[str]:
    """The non-blank lines of list file `path`, stripped (one file name each)."""
    require_file(path, "Name list", hint)
    return [line.strip() for _, line in text_lines(path, "Name list") if line.strip()]
