"""reid.utils.device: the torch thread count for a block, restored afterwards."""
import pytest
import torch

from reid.utils.device import torch_threads


def test_torch_threads_sets_the_count_for_the_block_and_restores_it_even_after_an_error():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
