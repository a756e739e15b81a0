"""Networks shared by the dense-network and walk-back tests (pytest puts tests/ on the path)."""

import numpy as np
import torch

from gradcore import models
from gradcore.analysis import dense

WIDTHS = (24, 16, 12, 8)  # input, two hidden layers, classes


def network_and_sample(seed, widths=WIDTHS, bias=True, scale=1.0):
    rng = np.random.default_rng(seed)
    network = dense.random_network(widths, rng, bias=bias, scale=scale)
    return network, rng.random(widths[0]), int(rng.integers(widths[-1]))


def torch_mlp(seed, widths=(32, 16), shape=(1, 8, 8), classes=10, dtype=torch.float64):
    return models.build("mlp", shape, classes, seed=seed, widths=widths, activation="relu").to(dtype)
