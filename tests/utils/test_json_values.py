"""reid/utils/json_values.py: every JSON file the toolkit writes is strict JSON."""
import json
import math

import numpy as np
import torch

from reid.utils.json_values import jsonable


def test_numbers_arrays_and_keys_become_strict_json():
    value = {1e-3: np.float32(0.5), "nan": float("nan"), "inf": np.float64(math.inf), "n": np.int64(3),
             "arr": np.array([[1.0, np.nan], [2.0, 3.0]]), "t": torch.tensor([1.5, float("inf")]),
             "scalar": torch.tensor(2), "flag": np.bool_(True), "nested": [(np.float32(-np.inf), 1)]}
    out = jsonable(value)
    text = json.dumps(out, allow_nan=False)  # raises on any NaN/inf left
    assert json.loads(text) == {"0.001": 0.5, "nan": None, "inf": None, "n": 3, "arr": [[1.0, None], [2.0, 3.0]],
                                "t": [1.5, None], "scalar": 2, "flag": True, "nested": [[None, 1]]}
