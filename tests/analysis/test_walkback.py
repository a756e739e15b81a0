"""gradcore.analysis.walkback: Proposition 3.1 of Inverting Gradients, and the analyses built on it.

Outside references: central differences of the loss, torch autograd (``batch_gradient``)
for the gradients and softmax residuals, and the private inputs themselves, which the
walk-back must return from the gradient alone.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from networks import WIDTHS, network_and_sample, torch_mlp  # noqa: E402

from gradcore import client, models
from gradcore import gradients as grads
from gradcore.analysis import dense
from gradcore.analysis import walkback as wb

# ----------------------------------------------------------------------------------
# Analytic gradients
# ----------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------
# The walk-back
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_three_stacked_layers_walk_back_to_the_input_exactly(seed):
    # The proposition's setting: W_0, W_1 unbiased, only the output layer biased, ReLU between.
    network, sample, label = network_and_sample(seed, bias=[False, False, True])
    result = wb.walk_back(network, dense.gradients(network, sample, label))
    assert result.recovered and result.blocked is None and result.start == 2
    assert np.mean((result.reconstruction - sample) ** 2) < 1e-20
    truth = dense.forward(network, sample).inputs
    for recovered, true in zip(result.inputs, truth):
        assert np.abs(recovered - true).max() < 1e-14
    assert all(isinstance(row, int) for row in result.rows)
    assert all(0 < live <= width for live, width in zip(result.live_rows, WIDTHS[1:]))


def test_every_layer_input_is_recovered_and_biased_layers_read_their_own_bias_gradient():
    network, sample, label = network_and_sample(11, widths=(20, 14, 12, 10, 6), bias=True)
    gradient = dense.gradients(network, sample, label)
    result = wb.walk_back(network, gradient)
    truth = dense.forward(network, sample).inputs
    assert len(result.inputs) == network.depth == 4
    for layer, (recovered, true) in enumerate(zip(result.inputs, truth)):
        assert np.abs(recovered - true).max() < 1e-14
        # The row divided is the best conditioned one of that layer's bias gradient.
        assert result.rows[layer] == int(np.argmax(np.abs(gradient[layer][1])))


def test_layers_above_the_start_are_filled_by_a_forward_pass():
    # Top layer unbiased: the walk must start at the biased layer 1, and layer 2's input comes from the forward pass.
    network, sample, label = network_and_sample(12, bias=[False, True, False])
    result = wb.walk_back(network, dense.gradients(network, sample, label))
    truth = dense.forward(network, sample).inputs
    assert result.start == 1 and result.rows[2] is None and result.rows[1] is not None
    assert max(np.abs(recovered - true).max() for recovered, true in zip(result.inputs, truth)) < 1e-14
    # Starting lower on purpose gives the same answer.
    network, sample, label = network_and_sample(13, bias=True)
    lower = wb.walk_back(network, dense.gradients(network, sample, label), start=0)
    assert lower.start == 0 and lower.rows[1:] == [None, None]
    truth = dense.forward(network, sample).inputs
    assert max(np.abs(recovered - true).max() for recovered, true in zip(lower.inputs, truth)) < 1e-14


def test_walk_back_on_a_batch_returns_each_biased_layers_mixture():
    network, _, _ = network_and_sample(14, bias=True)
    rng = np.random.default_rng(15)
    inputs, labels = rng.random((4, WIDTHS[0])), np.array([0, 3, 3, 6])
    gradient = dense.gradients(network, inputs, labels)
    result = wb.walk_back(network, gradient)
    for layer in range(3):
        mixture = wb.batch_mixture_weights(network, inputs, labels, layer=layer)
        assert np.abs(result.inputs[layer] - mixture.mixture).max() < 1e-12
    at_output = wb.batch_mixture_weights(network, inputs, labels, layer=2)
    assert min(np.abs(at_output.mixture - sample).max() for sample in at_output.layer_inputs) > 1e-3  # no sample
    # A hidden ReLU row that only one sample activates has a one-hot weight: it returns that sample exactly.
    exclusive = 0
    for row in np.flatnonzero(gradient[0][1]):
        mixture = wb.batch_mixture_weights(network, inputs, labels, layer=0, row=int(row))
        active = np.flatnonzero(mixture.sensitivities[:, row])
        if len(active) == 1:
            exclusive += 1
            assert np.array_equal(mixture.weights, np.eye(len(inputs))[active[0]])
            assert np.abs(mixture.mixture - inputs[active[0]]).max() < 1e-14
    assert exclusive > 0


def test_walk_back_is_fast_and_never_blocked_on_2000_random_networks():
    start = time.perf_counter()
    survey = wb.survey_random_networks(2000, (24, 32, 32, 10), np.random.default_rng(0))
    assert time.perf_counter() - start < 5.0
    assert survey.blocked == 0 and survey.fraction == 0.0 and survey.worst_error < 1e-12
    assert wb.blocked_fraction(200, (24, 32, 32, 10), np.random.default_rng(1)) == 0.0
    assert wb.dead_layer_probability((24, 32, 32, 10)) < 1e-9


def test_blocked_rate_of_narrow_networks_is_the_dead_layer_probability():
    # Hidden widths 4 and 4: a layer is entirely off with probability 2^-4, so 1 - (15/16)^2 = 0.121 are blocked.
    expected = wb.dead_layer_probability((24, 4, 4, 8))
    assert expected == pytest.approx(1 - (15 / 16) ** 2)
    survey = wb.survey_random_networks(2000, (24, 4, 4, 8), np.random.default_rng(0))
    standard_error = np.sqrt(expected * (1 - expected) / 2000)
    assert abs(survey.fraction - expected) < 4 * standard_error
    assert survey.worst_error < 1e-12  # whatever is not blocked is exact
    # The source's widths (hidden 16 and 12) expect about half a blocked network per 2000.
    assert 2000 * wb.dead_layer_probability(WIDTHS) == pytest.approx(0.52, abs=0.01)


# ----------------------------------------------------------------------------------
# Magnitude invariance
# ----------------------------------------------------------------------------------


def test_magnitude_invariance_table():
    network, sample, label = network_and_sample(21, bias=[False, False, True])
    norm = np.linalg.norm(dense.flatten_gradients(dense.gradients(network, sample, label)))
    rows = wb.magnitude_invariance(network, sample, label)
    assert [row.scale for row in rows] == [1.0, 1e-2, 1e-4, 1e-6]
    for row in rows:
        assert row.reconstruction_error < 1e-14  # the ratio cancels the scale
        assert abs(row.cosine - 1) < 1e-12
        assert row.euclidean_distance == pytest.approx((1 - row.scale) * norm, rel=1e-12, abs=1e-15)
    distances = [row.euclidean_distance for row in rows]
    assert distances[0] == 0 and distances == sorted(distances)
    assert distances[-1] == pytest.approx(norm, rel=1e-5)  # saturates at the unscaled norm


# ----------------------------------------------------------------------------------
# The dead layer
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dead_layer", [0, 1])
def test_a_dead_layer_blocks_the_walk_back_and_zeroes_the_gradient_below(dead_layer):
    sample = np.random.default_rng(31).random(WIDTHS[0])
    network = wb.dead_layer_network(sample, WIDTHS, dead_layer=dead_layer, rng=32)
    assert (dense.forward(network, sample).pre_activations[dead_layer] < 0).all()
    gradient = dense.gradients(network, sample, 2)
    with np.errstate(divide="raise", invalid="raise"):  # the walk-back must never divide by zero
        result = wb.walk_back(network, gradient)
    assert not result.recovered and result.reconstruction is None
    assert result.blocked_layer == dead_layer and result.live_rows[dead_layer] == 0
    assert f"blocked at layer {dead_layer}" in result.blocked and "zero" in result.blocked
    with pytest.raises(ValueError, match=f"blocked at layer {dead_layer}"):
        result.require()
    for layer in range(dead_layer + 1):
        weight_gradient, bias_gradient = gradient[layer]
        assert not weight_gradient.any() and not bias_gradient.any()  # identically zero: nothing below trains
    assert not gradient[dead_layer + 1][0].any()  # its input is all zeros too
    assert np.abs(gradient[-1][1]).max() > 0  # the output layer's bias still gets a gradient
    # The layer right above the dead one is recovered, exactly: its input is the dead layer's all-zero output.
    assert result.inputs[dead_layer + 1] is not None and not result.inputs[dead_layer + 1].any()


def test_dead_layer_network_refuses_a_layer_without_a_relu():
    with pytest.raises(ValueError, match="hidden layer"):
        wb.dead_layer_network(np.ones(WIDTHS[0]), WIDTHS, dead_layer=2)


# ----------------------------------------------------------------------------------
# Batches: the mixture and its weights
# ----------------------------------------------------------------------------------


def torch_residuals(model, images, labels, row):
    probabilities = torch.softmax(model(images), dim=1)[:, row]
    return (probabilities - (labels == row).double()).detach().numpy()


@pytest.mark.parametrize("batch, seed", [(2, 0), (5, 1), (8, 2), (16, 3)])
def test_batch_mixture_weights_are_the_output_residuals(batch, seed):
    model = torch_mlp(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand((batch, 1, 8, 8), dtype=torch.float64, generator=generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    network, inputs = dense.from_torch(model), images.reshape(batch, -1).numpy()
    shared = wb.gradient_pairs_from_torch(model, grads.batch_gradient(model, images, labels))
    for row in range(10):
        mixture = wb.batch_mixture_weights(network, inputs, labels.numpy(), layer=2, row=row)
        residual = torch_residuals(model, images, labels, row)
        # Sample k's weight is its residual on the attacker's class over the sum of residuals.
        assert np.abs(mixture.sensitivities[:, row] - residual).max() < 1e-12
        assert np.abs(mixture.weights - residual / residual.sum()).max() < 1e-12 * max(1.0, np.abs(mixture.weights).max())
        assert mixture.weights.sum() == pytest.approx(1.0, abs=1e-12)
        # What the attacker divides out of the torch gradient is exactly that weighted sum of the inputs.
        division = shared[2][0][row] / shared[2][1][row]
        assert np.abs(division - mixture.weights @ mixture.layer_inputs).max() < 1e-12
        assert np.abs(division - mixture.mixture).max() < 1e-12
        assert np.allclose(mixture.shares, np.abs(residual) / np.abs(residual).sum(), rtol=0, atol=1e-12)


def test_batch_mixture_at_a_hidden_layer():
    network, _, _ = network_and_sample(41, bias=True)
    inputs, labels = np.random.default_rng(42).random((6, WIDTHS[0])), np.arange(6) % WIDTHS[-1]
    mixture = wb.batch_mixture_weights(network, inputs, labels, layer=1)
    assert mixture.layer_inputs.shape == (6, WIDTHS[1])
    assert np.abs(mixture.weights @ mixture.layer_inputs - mixture.mixture).max() < 1e-12
    assert mixture.weights.sum() == pytest.approx(1.0, abs=1e-12)


def test_shares_for_a_confident_and_a_near_uniform_model():
    base, _, _ = network_and_sample(7)
    classes = WIDTHS[-1]
    inputs = np.random.default_rng(8).random((classes, WIDTHS[0]))
    labels = np.arange(classes)  # one sample per class
    confident, near_uniform = base.scaled(4.0), base.scaled(0.05)
    assert wb.confidence(confident, inputs).mean() > 0.9
    assert wb.confidence(near_uniform, inputs).max() < 1 / classes + 0.01
    result = {}
    for name, network in (("confident", confident), ("near_uniform", near_uniform)):
        mixture = wb.batch_mixture_weights(network, inputs, labels, layer=2)
        residual = wb.output_residuals(network, inputs, labels, mixture.row)
        assert np.abs(mixture.weights - residual / residual.sum()).max() < 1e-12 * max(1.0, np.abs(mixture.weights).max())
        assert np.abs(mixture.weights @ mixture.layer_inputs - mixture.mixture).max() < 1e-10
        result[name] = mixture
    # Near-uniform: every residual tends to 1/C - [y_k = c], so the one sample of the attacker's class holds
    # (1 - 1/C) / (2 (1 - 1/C)) = 1/2 of the shares and the other seven share the rest equally.
    near = result["near_uniform"]
    limit = np.abs(1 / classes - (labels == near.row))
    assert np.abs(near.shares - limit / limit.sum()).max() < 0.01
    assert near.largest_share == pytest.approx(0.5, abs=0.01)
    # With one sample per class the residuals nearly cancel (sum_k p_k[c] - 1 -> 0), so the signed weights are
    # large and of both signs: the "mixture" lies far outside the batch.
    assert near.weights.max() > 5 and near.weights.min() < -1
    # Confident: samples the model already fits contribute almost nothing, so the shares spread far more
    # (largest over smallest), while no single sample dominates as much as in the near-uniform case.
    confident_mixture = result["confident"]
    assert confident_mixture.share_spread > 100 * near.share_spread
    assert confident_mixture.largest_share < near.largest_share


def test_batch_mixture_weights_errors():
    network, sample, label = network_and_sample(51, bias=[False, False, True])
    inputs, labels = np.random.default_rng(52).random((3, WIDTHS[0])), np.array([1, 2, 3])
    with pytest.raises(ValueError, match="no bias"):
        wb.batch_mixture_weights(network, inputs, labels, layer=0)
    with pytest.raises(ValueError, match="does not exist"):
        wb.batch_mixture_weights(network, inputs, labels, layer=3)
    with pytest.raises(ValueError, match="row 8 does not exist"):
        wb.batch_mixture_weights(network, inputs, labels, layer=2, row=8)


# ----------------------------------------------------------------------------------
# Torch
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, widths", [(0, (32,)), (1, (32, 16)), (2, (40, 24, 16))])
def test_walk_back_torch_agrees_with_numpy_and_the_input(seed, widths):
    model = torch_mlp(seed, widths=widths)
    image = torch.rand((1, 1, 8, 8), dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    shared = client.shared_gradient(model, image, torch.tensor([seed + 3]))
    result = wb.walk_back_torch(model, shared, (1, 8, 8))
    assert result.recovered and result.reconstruction.shape == (1, 1, 8, 8)
    assert result.reconstruction.dtype == torch.float64
    assert (result.reconstruction - image).abs().max().item() < 1e-10
    numpy_result = wb.walk_back(dense.from_torch(model), wb.gradient_pairs_from_torch(model, shared))
    assert result.rows == numpy_result.rows and result.live_rows == numpy_result.live_rows
    for ours, theirs in zip(result.inputs, numpy_result.inputs):
        assert np.abs(ours.numpy() - theirs).max() < 1e-10


def test_walk_back_torch_in_float32():
    model = torch_mlp(4, widths=(32, 16), dtype=torch.float32)
    image = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(4))
    result = wb.walk_back_torch(model, client.shared_gradient(model, image, torch.tensor([2])), (1, 8, 8))
    assert result.reconstruction.dtype == torch.float32
    assert (result.reconstruction - image).abs().max().item() < 1e-5


def test_walk_back_torch_reports_a_dead_layer_like_numpy():
    sample = np.random.default_rng(61).random(64)
    network = wb.dead_layer_network(sample, (64, 32, 16, 10), dead_layer=1, rng=62)
    model = torch_mlp(0, widths=(32, 16))
    with torch.no_grad():
        for (weight, bias), layer in zip(zip(network.weights, network.biases), [model[1], model[3], model[5]]):
            layer.weight.copy_(torch.from_numpy(weight))
            layer.bias.copy_(torch.from_numpy(bias))
    image = torch.from_numpy(sample).reshape(1, 1, 8, 8)
    result = wb.walk_back_torch(model, client.shared_gradient(model, image, torch.tensor([0])), (1, 8, 8))
    assert not result.recovered and result.blocked_layer == 1 and result.reconstruction is None
    assert "blocked at layer 1 (model[3], Linear 32 -> 16)" in result.blocked
    with pytest.raises(ValueError, match="blocked at layer 1"):
        result.require()
    assert wb.walk_back(network, dense.gradients(network, sample, 0)).blocked_layer == 1


def test_walk_back_torch_errors():
    model = torch_mlp(0)
    image = torch.rand((1, 1, 8, 8), dtype=torch.float64)
    shared = client.shared_gradient(model, image, torch.tensor([1]))
    with pytest.raises(ValueError, match="empty"):
        wb.walk_back_torch(model, (), (1, 8, 8))
    with pytest.raises(ValueError, match="6 parameters"):
        wb.walk_back_torch(model, shared[:-1], (1, 8, 8))
    with pytest.raises(ValueError, match="entry 1 has shape"):
        wb.walk_back_torch(model, (shared[0], shared[1][:-1]) + shared[2:], (1, 8, 8))
    with pytest.raises(ValueError, match="NaN"):
        wb.walk_back_torch(model, (shared[0] * float("nan"),) + shared[1:], (1, 8, 8))
    with pytest.raises(ValueError, match="first Linear layer takes 64"):
        wb.walk_back_torch(model, shared, (1, 4, 4))
    with pytest.raises(ValueError, match="needs ReLU between the Linear layers; this network uses sigmoid"):
        sigmoid = models.build("mlp", (1, 8, 8), 10, widths=(32,), activation="sigmoid").double()
        wb.walk_back_torch(sigmoid, client.shared_gradient(sigmoid, image, torch.tensor([1])), (1, 8, 8))
    reduced = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 10)).double()
    with pytest.raises(ValueError, match="none after its first"):
        wb.walk_back_torch(reduced, client.shared_gradient(reduced, image, torch.tensor([1])), (1, 8, 8))
    with pytest.raises(ValueError, match="Conv2d where a Linear"):
        convolutional = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(72, 10))
        wb.walk_back_torch(convolutional.double(), client.shared_gradient(convolutional.double(), image,
                                                                          torch.tensor([1])), (1, 8, 8))
    with pytest.raises(ValueError, match="nn.Sequential"):
        wb.walk_back_torch(model[1], shared[:2], (64,))
    unbiased = models.build("mlp", (1, 8, 8), 10, widths=(32,), activation="relu", bias=False).double()
    with pytest.raises(ValueError, match="no layer has a bias"):
        wb.walk_back_torch(unbiased, client.shared_gradient(unbiased, image, torch.tensor([1])), (1, 8, 8))


# ----------------------------------------------------------------------------------
# Errors of the numpy part
# ----------------------------------------------------------------------------------


def test_walk_back_errors():
    network, sample, label = network_and_sample(71, bias=[False, True, True])
    gradient = dense.gradients(network, sample, label)
    with pytest.raises(ValueError, match="empty"):
        wb.walk_back(network, [])
    with pytest.raises(ValueError, match="2 layers but the network has 3"):
        wb.walk_back(network, gradient[:2])
    with pytest.raises(ValueError, match="dL/dW of layer 1 has shape"):
        wb.walk_back(network, [gradient[0], (gradient[1][0][:, :-1], gradient[1][1]), gradient[2]])
    with pytest.raises(ValueError, match="layer 0 has no bias"):
        wb.walk_back(network, [(gradient[0][0], np.zeros(16)), gradient[1], gradient[2]])
    with pytest.raises(ValueError, match="NaN or infinite"):
        wb.walk_back(network, [gradient[0], gradient[1], (gradient[2][0], np.full(8, np.inf))])
    with pytest.raises(ValueError, match="layer 0 is not one"):
        wb.walk_back(network, gradient, start=0)
    with pytest.raises(ValueError, match="no layer has a bias"):
        unbiased = dense.DenseNetwork(network.weights)
        wb.walk_back(unbiased, dense.gradients(unbiased, sample, label))
    # An all-zero gradient is blocked, not a crash, at the layer the walk starts from.
    zero = [(np.zeros_like(weight), None if bias is None else np.zeros_like(bias)) for weight, bias in gradient]
    assert wb.walk_back(network, zero).blocked_layer == 2


def test_network_and_data_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="empty list"):
        dense.DenseNetwork([])
    with pytest.raises(ValueError, match="layer 1 takes 5 inputs but layer 0 has 4 outputs"):
        dense.DenseNetwork([np.ones((4, 3)), np.ones((2, 5))])
    with pytest.raises(ValueError, match="bias of layer 0"):
        dense.DenseNetwork([np.ones((4, 3))], [np.ones(3)])
    with pytest.raises(ValueError, match="2 layers"):
        dense.random_network((3, 4, 2), rng, bias=[True])
    network, sample, label = network_and_sample(81)
    with pytest.raises(ValueError, match=r"inputs must be shaped \(24,\)"):
        dense.gradients(network, np.ones(23), label)
    with pytest.raises(ValueError, match="0..7"):
        dense.gradients(network, sample, 8)
    with pytest.raises(ValueError, match="integer class indices"):
        dense.gradients(network, sample, np.array([1.0]))
    with pytest.raises(ValueError, match="for a batch of 2"):
        dense.gradients(network, np.ones((2, 24)), np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="unknown loss"):
        dense.gradients(network, sample, label, loss="hinge")
    with pytest.raises(ValueError, match="one sample"):
        wb.magnitude_invariance(network, np.ones((2, 24)), np.array([1, 2]))
    with pytest.raises(ValueError, match="step must be positive"):
        wb.central_difference_check(network, sample, label, step=0.0)


def test_share_survey_reaches_the_near_uniform_limit():
    # A near-uniform softmax over C classes, a batch of C samples with one per class: the row of
    # class i gives residual 1/C - 1 to the sample of class i and 1/C to every other, so that sample
    # holds (1 - 1/C) / (2 (1 - 1/C)) = 1/2 of the row and the ratio of shares is C - 1.
    rng = np.random.default_rng(0)
    inputs, labels = rng.random((8, 24)), np.arange(8)
    near = wb.share_survey(WIDTHS, inputs, labels, 1e-3, 20, rng)
    assert abs(near.largest_share - 0.5) < 1e-3 and abs(near.share_spread - 7) < 1e-2
    assert abs(near.confidence - 1 / 8) < 1e-3 and near.trials == 20
    confident = wb.share_survey(WIDTHS, inputs, labels, 6.0, 20, rng)
    assert confident.confidence > 0.5 and confident.largest_share < near.largest_share
    with pytest.raises(ValueError, match="must be positive"):
        wb.share_survey(WIDTHS, inputs, labels, 0.0, 20, rng)


def test_survey_reports_the_fewest_live_rows():
    survey = wb.survey_random_networks(50, WIDTHS, np.random.default_rng(0))
    assert survey.blocked == 0 and 1 <= survey.fewest_live_rows <= min(WIDTHS[1:])
    # One-unit hidden layers are dead half the time: some trial blocks, and the fewest live rows is 0.
    narrow = wb.survey_random_networks(50, (24, 1, 1, 8), np.random.default_rng(0))
    assert narrow.blocked > 0 and narrow.fewest_live_rows == 0
