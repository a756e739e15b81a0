"""Shared fixtures for the gradcore unit tests.

The suite must run in well under a minute on two CPU cores without a GPU, so models
are tiny (8x8 digits, small MLPs, LeNet on 3x16x16) and every test is seeded.
Where a test asserts exactness it works in float64.
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("MPLBACKEND", "Agg")  # before anything imports matplotlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

import gradcore
from gradcore import data

# The models here are tiny: one intra-op thread is faster than two and cannot be starved by
# other processes on a shared two-core runner (OpenMP threads spin when cores are busy).
torch.set_num_threads(1)

# Property-based tests (tests/test_validation.py). "ci", the default, is what `make test`
# runs: few examples, a fixed derandomised sequence (the same examples on every run, so a
# failure repeats) and no example database written to disk. HYPOTHESIS_PROFILE=thorough
# searches wider and at random, for a developer hunting a bug.
_shared = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("ci", max_examples=30, derandomize=True, database=None, print_blob=True, **_shared)
settings.register_profile("thorough", max_examples=500, **_shared)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same global random state and default dtype."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    yield
    assert torch.get_default_dtype() == default, "a test changed torch's default dtype"


@pytest.fixture(scope="session")
def digits() -> data.Dataset:
    """scikit-learn's 1,797 8x8 digits, loaded once."""
    return data.digits()


@pytest.fixture(scope="session")
def photos() -> data.Dataset:
    """Two 16x16 crops per bundled photograph (16 images), loaded once."""
    return data.photos(size=16, per_photo=2, seed=0)


def _mlp(shape=(1, 8, 8), num_classes=10, widths=(12,), activation="sigmoid", seed=0, bias=True,
         dtype=torch.float64) -> torch.nn.Module:
    return gradcore.models.build("mlp", shape, num_classes, seed=seed, widths=widths, activation=activation,
                                 bias=bias).to(dtype)


def _lenet(shape=(3, 16, 16), num_classes=10, seed=0, dtype=torch.float32) -> torch.nn.Module:
    return gradcore.models.build("lenet", shape, num_classes, seed=seed).to(dtype)


def _linear_unit(shape=(1, 8, 8), seed=0, dtype=torch.float64) -> torch.nn.Module:
    return gradcore.models.build("linear_unit", shape, 1, seed=seed).to(dtype)


@pytest.fixture
def make_mlp():
    """Builder of a small seeded MLP (float64, sigmoid, one hidden layer of 12 by default)."""
    return _mlp


@pytest.fixture
def make_lenet():
    """Builder of the DLG sigmoid LeNet, on 3x16x16 inputs by default."""
    return _lenet


@pytest.fixture
def make_linear_unit():
    """Builder of the DLG warm-up model (one linear unit, float64 by default)."""
    return _linear_unit
