"""gradcore.setup: seeds, thread count and deterministic algorithms, as every chapter starts."""

import pytest
import torch

import gradcore


@pytest.fixture
def restore_torch_state():
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.set_num_threads(threads)
    torch._C._set_deterministic_algorithms(deterministic, warn_only=warn_only)


def test_setup_seeds_torch_and_numpy_alike_each_time(restore_torch_state):
    import numpy as np

    gradcore.setup(3, threads=1)
    first = torch.rand(4), np.random.rand(2)
    gradcore.setup(3, threads=1)
    second = torch.rand(4), np.random.rand(2)
    assert torch.equal(first[0], second[0]) and np.array_equal(first[1], second[1])


def test_setup_sets_torchs_own_deterministic_flags(restore_torch_state):
    torch._C._set_deterministic_algorithms(False)
    gradcore.setup(0, threads=1)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_thread_override_and_its_error(monkeypatch, restore_torch_state):
    monkeypatch.setenv("GRADCORE_THREADS", "1")
    gradcore.setup(0, threads=2)
    assert torch.get_num_threads() == 1
    monkeypatch.setenv("GRADCORE_THREADS", "two")
    with pytest.raises(ValueError, match="GRADCORE_THREADS must be a positive whole number"):
        gradcore.setup(0)
