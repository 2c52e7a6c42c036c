"""Unusable weights and feature rows: found, named, and (rows) normalised exactly."""
import numpy as np
import pytest
import torch

from reid.utils.value_checks import BadRowsError, unit_rows, weight_problem


def test_weight_problem_names_the_first_unusable_tensor():
    ref = {"conv.weight": torch.zeros(2, 2), "bn.running_var": torch.ones(2), "bn.num_batches_tracked": torch.tensor(3)}
    good = {"conv.weight": torch.ones(2, 2), "bn.running_var": torch.ones(2), "bn.num_batches_tracked": torch.tensor(7)}
    assert weight_problem(good, ref) is None
    assert "conv.weight is torch.int64 where the model has torch.float32" in weight_problem(
        {**good, "conv.weight": torch.ones(2, 2, dtype=torch.int64)}, ref)
    assert "conv.weight holds NaN (1 of 4 values)" in weight_problem(
        {**good, "conv.weight": torch.tensor([[1.0, float("nan")], [0, 0]])}, ref)
    assert "bn.running_var holds inf" in weight_problem({**good, "bn.running_var": torch.tensor([1.0, float("inf")])}, ref)
    assert "negative" in weight_problem({**good, "bn.running_var": torch.tensor([1.0, -1.0])}, ref)
    assert "is a str, not a tensor" in weight_problem({"x": "junk"})


def test_unit_rows_normalises_any_length_exactly_and_counts_what_changed():
    rows = np.array([[3e30, 4e30], [3, 4], [0.6, 0.8], [1e-30, 0]], dtype=np.float32)
    unit, changed = unit_rows(rows, "gallery")
    expected = np.array([[0.6, 0.8], [0.6, 0.8], [0.6, 0.8], [1, 0]], dtype=np.float32)
    np.testing.assert_allclose(unit.numpy(), expected, atol=1e-7)
    assert changed == 3  # the row already of unit length is not counted
    assert unit_rows(torch.tensor([[0.6, 0.8]]), "q")[1] == 0


def test_unit_rows_refuses_zero_and_non_finite_rows_naming_the_first():
    with pytest.raises(BadRowsError, match=r"gallery: feature row 2 is all zero \(2 such rows\)"):
        unit_rows(np.array([[1, 0], [0, 1], [0, 0], [0, 0]], np.float32), "gallery")
    with pytest.raises(BadRowsError, match=r"feature row 1 holds NaN or inf"):
        unit_rows(np.array([[1, 0], [np.inf, 1]], np.float32), "gallery")
    with pytest.raises(BadRowsError, match="2-d"):
        unit_rows(np.zeros((2, 2, 2), np.float32), "gallery")
