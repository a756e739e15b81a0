"""gradcore.attacks.regularised: regularised gradient matching (Qian et al., Algorithm 3).

Outside references: the regularisers computed by hand, the private digit.
"""

from __future__ import annotations

import pytest
import torch

import gradcore
from gradcore import models
from gradcore.attacks import regularised


def test_regularisers_by_hand():
    batch = torch.tensor([[1.0, 0.0], [1.0, 2.0], [0.0, 3.0]])
    # pairs (k, k'), k != k': dots 1, 0, 6, each counted twice.
    assert regularised.REGULARISERS["orthogonality"](batch).item() == 2 * (1 + 0 + 36)
    assert regularised.REGULARISERS["l2"](batch).item() == 15
    assert regularised.REGULARISERS["none"](batch).item() == 0
    # Centred rows (each minus its mean): (0.5, -0.5), (-0.5, 0.5), (-1.5, 1.5); dots -0.5, -1.5, 1.5, each twice.
    assert regularised.REGULARISERS["orthogonality_centred"](batch).item() == pytest.approx(2 * (0.25 + 2.25 + 2.25))
    # Centring removes what non-negative images share: two constant images are orthogonal once centred.
    assert regularised.REGULARISERS["orthogonality_centred"](torch.ones(2, 1, 3, 3)).item() == 0
    with pytest.raises(KeyError, match="known regularisers"):
        regularised.REGULARISERS["tv"]


def test_regularised_matching_recovers_a_single_digit():
    model = models.build("mlp", (1, 4, 4), 3, seed=0, widths=(8,), activation="sigmoid").double()
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gradient = gradcore.shared_gradient(model, x, torch.tensor([1]))
    result = gradcore.attack("regularised_matching", model, gradient, shape=(1, 4, 4), labels=torch.tensor([1]), truth=x,
                             progress=False, iterations=300, lr=0.1, record_every=50)
    assert result.history["iteration"][-1] == 300 and result.final("mse") < 1e-8
    assert result.history["mse"][0] > result.final("mse")

