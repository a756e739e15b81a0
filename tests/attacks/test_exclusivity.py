"""gradcore.attacks.exclusivity: the exclusivity attack of Pan et al. (2022) and its hybrid CNN form.

Outside references: the private batch, and autograd's gradient of the reduced network.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import gradcore
from gradcore.analysis import dense
from gradcore.analysis import exclusivity as ex


def test_registered_attack_on_a_torch_mlp():
    torch.manual_seed(0)
    model = gradcore.models.build("mlp", (1, 4, 4), 5, seed=0, widths=(256, 256)).double()
    network = dense.from_torch(model)
    rng = np.random.default_rng(5)
    pool = rng.random((100, 16))
    index = ex.find_batch(network, pool, 3, "insecure", rng)
    inputs = torch.as_tensor(pool[index]).reshape(3, 1, 4, 4)
    labels = torch.tensor([0, 3, 3])
    gradient = gradcore.batch_gradient(model, inputs, labels)
    result = gradcore.attack("exclusivity", model, gradient, shape=(1, 4, 4), batch_size=3, truth=inputs, progress=False)
    assert (result.aligned(inputs) - inputs).abs().max().item() < 1e-10
    assert sorted(result.labels.tolist()) == [0, 3, 3]
    assert result.history["objective"][0] < 1e-10


def test_reduced_network_refused_and_gradient_matches_autograd():
    model = gradcore.defenses.exclusivity_reduction(gradcore.models.fcn((1, 4, 4), 5, (6, 32), seed=0)).double()
    assert sum(isinstance(module, nn.ReLU) for module in model) == 1
    inputs, labels = torch.rand(3, 1, 4, 4, dtype=torch.float64), torch.tensor([1, 2, 0])
    gradient = gradcore.batch_gradient(model, inputs, labels)
    ours = ex.batch_gradients(dense.from_torch(model), inputs.reshape(3, -1).numpy(), labels.numpy(), first_relu=False)
    flat = np.concatenate([np.ravel(part) for pair in ours for part in pair])
    np.testing.assert_allclose(flat, torch.cat([g.flatten() for g in gradient]).numpy(), atol=1e-13)
    with pytest.raises(ex.NotInsecureError, match="no ReLU \\(exclusivity reduction\\)"):
        gradcore.attack("exclusivity", model, gradient, shape=(1, 4, 4), batch_size=3)


def test_hybrid_attack_recovers_features_then_inputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 512), nn.ReLU(),
                          nn.Linear(512, 5)).double()
    assert ex.split_head(model) == 3
    trunk_features = None
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        inputs = torch.rand(2, 1, 4, 4, generator=generator, dtype=torch.float64)
        trunk_features = model[:3](inputs).detach().numpy()
        if ex.analyse(dense.from_torch(model[3:]), trunk_features).insecure:
            break
    gradient = gradcore.batch_gradient(model, inputs, torch.tensor([1, 4]))
    result = gradcore.attack("exclusivity_hybrid", model, gradient, shape=(1, 4, 4), batch_size=2, truth=inputs,
                             iterations=15, progress=False)
    assert result.final("mse") < 1e-6

