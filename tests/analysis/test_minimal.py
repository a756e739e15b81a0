"""Tests of gradcore.analysis.minimal: Qian, Nassar and Hansen's minimal-structure closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradcore
from gradcore import experiments, models
from gradcore.analysis import dense, minimal


def _single(widths, activation, seed=0, label=3):
    rng = np.random.default_rng(seed)
    network = dense.random_network(widths, rng, activation=activation)
    x = rng.uniform(size=(1, widths[0]))
    return network, x, dense.gradients(network, x, np.array([label]))


@pytest.mark.parametrize("activation", ["sigmoid", "relu", "tanh"])
@pytest.mark.parametrize("widths", [(20, 32, 10), (20, 12, 12, 12, 10)])
def test_closed_form_is_exact_at_any_depth(activation, widths):
    network, x, gradient = _single(widths, activation)
    inversion = minimal.first_layer_inversion(*gradient[0])
    assert minimal.relative_error(inversion.input, x) < 1e-10
    assert inversion.rank_one_residual < 1e-12


def test_one_hidden_unit_suffices():
    network, x, gradient = _single((30, 1, 8, 8, 10), "sigmoid")
    inversion = minimal.first_layer_inversion(*gradient[0])
    assert list(inversion.rows) == [0]
    assert minimal.relative_error(inversion.input, x) < 1e-10


def test_dead_rows_are_skipped_and_counted():
    network, x, _ = _single((20, 12, 10), "relu", seed=4)
    network.biases[0][:9] = -100.0  # nine first-layer ReLUs that never fire
    gradient = dense.gradients(network, x, np.array([3]))
    inversion = minimal.first_layer_inversion(*gradient[0])
    assert inversion.dead_rows >= 9 and not set(range(9)) & set(inversion.rows.tolist())
    assert minimal.relative_error(inversion.input, x) < 1e-10


def test_vanishing_rows_are_skipped():
    network, x, gradient = _single((20, 6, 10), "sigmoid")
    weight_gradient, bias_gradient = (g.copy() for g in gradient[0])
    bias_gradient[0] = 1e-14 * np.abs(bias_gradient).max()  # a row that is rounding, not signal
    weight_gradient[0] = 1.0
    inversion = minimal.first_layer_inversion(weight_gradient, bias_gradient, check_single=False)
    assert inversion.vanishing_rows == 1 and 0 not in inversion.rows
    assert minimal.relative_error(inversion.input, x) < 1e-10


def test_all_rows_dead_is_blocked_with_a_clear_error():
    with pytest.raises(ValueError, match="blocked: all 4 rows"):
        minimal.first_layer_inversion(np.ones((4, 3)), np.zeros(4))


def test_bad_gradients_are_refused():
    with pytest.raises(ValueError, match="one bias gradient per row"):
        minimal.first_layer_inversion(np.ones((4, 3)), np.ones(5))
    with pytest.raises(ValueError, match="NaN or infinite"):
        minimal.first_layer_inversion(np.full((2, 3), np.nan), np.ones(2))


def test_a_batch_gradient_is_recognised_as_not_one_instance():
    rng = np.random.default_rng(0)
    network = dense.random_network((20, 8, 10), rng, activation="sigmoid")
    gradient = dense.gradients(network, rng.uniform(size=(3, 20)), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="not one instance"):
        minimal.first_layer_inversion(*gradient[0])


def test_batch_span_needs_as_many_hidden_units_as_samples():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(4, 30))
    residual = {}
    for hidden in (2, 3, 4, 8):
        network = dense.random_network((30, hidden, 10), rng, activation="sigmoid")
        residual[hidden] = minimal.batch_span_residual(dense.gradients(network, x, np.array([0, 1, 2, 3]))[0][0], x)
    assert residual[2] > 1e-2 and residual[3] > 1e-2
    assert residual[4] < 1e-10 and residual[8] < 1e-10
    with pytest.raises(ValueError, match="zero"):
        minimal.batch_span_residual(np.zeros((3, 30)), x)


def test_counting_conditions():
    assert minimal.conv_output_width(32, 5, 2, 2) == 16
    assert minimal.conv_output_width(8, 3, 1, 1) == 8
    assert minimal.conv_output_width(7, 3, 0, 2) == 3  # (7 - 3) / 2 + 1
    with pytest.raises(ValueError, match="does not fit"):
        minimal.conv_output_width(3, 5)
    lenet = minimal.conv_counting(32, 3, 12, 5, 2, 2)
    assert lenet.kernels_needed == 12 and lenet.solvable and lenet.equations == lenet.unknowns == 3072
    assert not minimal.conv_counting(32, 3, 11, 5, 2, 2).solvable
    assert not minimal.conv_counting(32, 3, 12, 5, 2, 2, batch_size=8, dense_units=4).solvable  # 4 units cannot demix 8
    assert minimal.demixing_condition(8, 8) and not minimal.demixing_condition(7, 8)
    # Output layer alone: n1 (n0 + 1) equations vs B (n0 + n1) unknowns.
    assert minimal.output_layer_demixing(2, 10, 2) and not minimal.output_layer_demixing(1, 10, 2)  # n0 >= 10 / 8
    assert not minimal.output_layer_demixing(10_000, 10, 10) and minimal.output_layer_demixing(1, 10, 1)
    direct = minimal.conv_counting(8, 1, 2, 3, 1, 1, batch_size=2, dense_units=None)
    assert direct.kernels_needed == 2 and direct.solvable
    assert not minimal.conv_counting(8, 1, 1, 3, 1, 1, batch_size=2, dense_units=None).solvable


def test_convolution_matrix_is_the_layer():
    layer = torch.nn.Conv2d(2, 3, 3, stride=2, padding=1, bias=False).double()
    x = torch.rand(1, 2, 7, 7, dtype=torch.float64)
    matrix = minimal.convolution_matrix(layer.weight.detach().numpy(), 7, 1, 2)
    assert np.allclose(matrix @ x.flatten().numpy(), layer(x).flatten().detach().numpy(), atol=1e-14)


def test_counting_is_necessary_not_sufficient():
    table = experiments.minimal.solvability_table([{"width": 8, "channels": 1, "kernels": 8, "kernel_size": 2, "padding": 0, "stride": 3}])
    row = table.rows[0]
    assert row[-2] == "yes" and row[-1] != "64/64"  # enough equations, pixels the stride skips


def test_counting_is_not_sufficient_at_stride_one_either():
    # Issue 14: 2x7x7 input, 3 kernels of 2x2 at stride 1: the count is met (108 equations,
    # 98 unknowns), the system is rank-deficient. conv_counting says so where it can.
    count = minimal.conv_counting(7, 2, 3, 2, padding=0, stride=1)
    assert count.solvable and count.equations == 108 and count.unknowns == 98
    assert count.rank == 92 and count.determined is False
    assert minimal.conv_counting(8, 1, 1, 3, 1, 1).determined is True
    assert minimal.conv_counting(32, 3, 12, 5, 2, 2).rank is None  # 3072 unknowns: not decomposed by default
    weight = np.random.default_rng(1).normal(size=(3, 2, 2, 2))
    assert minimal.conv_counting(7, 2, 3, 2, weight=weight).rank == 92
    with pytest.raises(ValueError, match=r"weight must be shaped \(h, C, k, k\)"):
        minimal.conv_counting(7, 2, 3, 2, weight=weight[:2])


def test_counting_refuses_bad_sizes():
    with pytest.raises(TypeError, match="kernel size k must be a whole number"):
        minimal.conv_output_width(8, "3")
    with pytest.raises(ValueError, match="kernels h must be at least 1"):
        minimal.conv_counting(8, 1, 0, 3)
    with pytest.raises(TypeError, match=r"write 8, not 8\.0"):
        minimal.conv_counting(8.0, 1, 2, 3)
    with pytest.raises(ValueError, match="batch size must be at least 1"):
        minimal.demixing_condition(4, 0)


#: A 1x1 convolution, 3 -> 5 channels, on a 9x9 input padded by 2: 845 equations, 440 of them
#: all-zero (outputs that see only padding), 243 unknowns, condition number 2.4. Torch's SVD
#: (MKL's divide and conquer) failed to converge on this matrix on one thread, not on two.
ONE_BY_ONE = [-0.48673224449157715, -0.30887383222579956, 0.24510341882705688, 0.3705569803714752, 0.06280761957168579,
              -0.01845315285027027, -0.02256114035844803, 0.4121609032154083, 0.16227948665618896, -0.36599963903427124,
              0.37701791524887085, 0.5235376954078674, 0.4669271409511566, 0.2655283510684967, 0.41994473338127136]


def test_two_step_succeeds_on_one_thread_where_torch_s_svd_did_not():
    weight = np.array(ONE_BY_ONE).reshape(5, 3, 1, 1)
    matrix = minimal.convolution_matrix(weight, 9, 2, 1)
    target = matrix @ np.arange(243.0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # where torch's SVD failed
        rank, solution, largest = minimal.svd_solve(matrix, target)
        u, singular, vt = minimal._svd(matrix)  # the full matrix, zero rows included
        torch.manual_seed(0)
        model = models.conv_mlp((3, 9, 9), 4, kernels=5, kernel_size=1, stride=1, padding=2, hidden=6).double()
        with torch.no_grad():
            model[0].weight.copy_(torch.as_tensor(weight))
        x = torch.rand(1, 3, 9, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        result = minimal.two_step(model, gradcore.shared_gradient(model, x, torch.tensor([1])), (3, 9, 9))
    finally:
        torch.set_num_threads(before)
    # The system has full column rank, so least squares returns the exact solution, to round-off.
    assert rank == 243 and np.allclose(solution, np.arange(243.0), rtol=0, atol=1e-10)
    # The fallback's singular values are those of the matrix without its zero rows (which torch decomposes).
    live = torch.linalg.svdvals(torch.as_tensor(matrix[np.any(matrix != 0, axis=1)]))
    np.testing.assert_allclose(singular.numpy(), live.numpy(), rtol=1e-12, atol=0)
    assert float(singular[0] / singular[-1]) < 3  # well conditioned
    assert result.deconvolution.method == "lstsq" and result.deconvolution.determined
    assert minimal.relative_error(result.input, x.numpy()) < 1e-10


def test_deconvolution_blocked_when_only_padding_is_seen():
    # Found by fuzzing two_step: a 1x1 kernel, padding 2, stride 3 on a 3x3 input; the only active
    # ReLU outputs see nothing but padding. It divided by a zero singular value.
    layer = torch.nn.Conv2d(1, 1, 1, stride=3, padding=2).double()
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(0.5)
    outputs = minimal.conv_output_width(3, 1, 2, 3)
    activated = np.full(outputs * outputs, 0.5)  # relu(0 + 0.5): every output is padding plus bias
    activated[outputs + 1] = 0.0  # the output that sees the input is inactive
    with pytest.raises(ValueError, match="blocked: every usable convolution output sees only the zero padding"):
        minimal.deconvolve(layer, activated, "relu", 3)


def test_saturation_counts_flat_sigmoids():
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Sigmoid())
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.zero_()
    assert minimal.saturation(model, torch.tensor([[0.0], [5.0], [-5.0], [1.0]])) == 0.5
    with pytest.raises(ValueError, match="no sigmoid"):
        minimal.saturation(torch.nn.Linear(1, 1), torch.zeros(1, 1))


def test_exactness_rows_report_blocked_models():
    image, label = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([1])
    rows = experiments.minimal.exactness_rows(image, label, {"one unit": (1,), "wide": (16,)}, ("sigmoid",), 3)
    assert [row[2] for row in rows] == [1, 16] and max(row[-1] for row in rows) < 1e-10
    model = models.build("mlp", (1, 4, 4), 3, seed=0, widths=(1,), activation="relu")
    relu_rows = experiments.minimal.exactness_rows(image, label, {"one unit": (1,)}, ("relu",), 3, seed=0)
    alive = (model[1](image.flatten(1)) > 0).item()
    assert (relu_rows[0][-1] == "blocked") != alive


def test_race_times_both_attacks_to_one_target():
    digits = gradcore.data.load("digits")
    case = experiments.minimal.cnn_case(digits, seed=0, kernels=2, kernel_size=3, stride=1, padding=1, hidden=16)
    dlg = {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "line_search": "strong_wolfe", "init": "randn", "iterations": 10}
    race = experiments.minimal.race(case, dlg, 1e-2, repeats=2)
    assert race.two_step_error < 1e-10 and race.dlg_iterations is not None and race.dlg_iterations >= 1
    assert race.speedup == race.dlg_seconds / race.two_step_seconds > 0
    # A target DLG cannot reach within its budget: no DLG timing, an infinite speed-up.
    never = experiments.minimal.race(case, {**dlg, "iterations": 1}, 1e-9, repeats=1)
    assert never.dlg_iterations is None and never.dlg_seconds is None and never.speedup == float("inf")
    with pytest.raises(ValueError, match="relative error"):
        experiments.minimal.race(case, dlg, 2.0)
    with pytest.raises(ValueError):
        experiments.minimal.race(case, dlg, 1e-2, repeats=0)


def test_weight_sweep_reuses_known_runs_and_matches_batch_sweep():
    digits = gradcore.data.load("digits")
    adam = {"optimiser": "adam", "lr": 0.1, "init": "randn", "iterations": 20, "record_every": 10}
    options = {"widths": (8,), "activation": "sigmoid"}
    sweep = experiments.minimal.weight_sweep(digits, 2, ["orthogonality_centred", "l2"], [1e-5, 1e-3], options, adam, seed=0,
                                 known={"l2": {1e-3: -1.0}})
    assert sweep["l2"][1e-3] == -1.0 and set(sweep["orthogonality_centred"]) == {1e-5, 1e-3}
    same = experiments.minimal.batch_sweep(digits, [2], ["l2"], options, adam, {"l2": 1e-5}, seed=0, progress=False)
    assert sweep["l2"][1e-5] == same["l2"][2].final("mse")  # the same batch, model and start
