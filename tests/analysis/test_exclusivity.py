"""Neuron exclusivity (Pan et al., 2022): the ExAN analysis, the deterministic attack, artifact batches."""

import numpy as np
import pytest

import gradcore
from gradcore import experiments
from gradcore.analysis import dense
from gradcore.analysis import exclusivity as ex


def _batch(rng, size, dim=16):
    return rng.random((size, dim)), rng.integers(0, 5, size)


# ----------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------


def test_exclusive_neurons_on_a_hand_written_pattern():
    # Fig. 2 of the paper: sample 0 takes units 0 and 2, sample 1 units 2 and 3; unit 1 is off for both.
    pattern = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], dtype=bool)
    expected = np.array([[1, 0, 0, 0], [0, 0, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(ex.exclusive_neurons(pattern), expected)
    np.testing.assert_array_equal(ex.exclusive_counts([pattern, pattern]), [[1, 1], [1, 1]])


def test_counts_match_a_brute_force_loop():
    rng = np.random.default_rng(0)
    network = dense.random_network((16, 12, 10, 5), rng)
    inputs, _ = _batch(rng, 5)
    counts = ex.analyse(network, inputs).counts
    pre = dense.forward(network, inputs).pre_activations
    for layer in range(2):
        on = pre[layer] > 0
        for sample in range(5):
            brute = sum(on[sample, j] and not any(on[other, j] for other in range(5) if other != sample) for j in range(on.shape[1]))
            assert counts[layer, sample] == brute


@pytest.mark.parametrize("counts, width, state, words", [
    ([[1, 1], [2, 3]], 8, "insecure", "sufficient"),
    ([[0, 0, 0], [0, 0, 0]], 2, "secure", "lack of exclusivity"),
    ([[0, 0], [0, 0]], 2, "neither", "batch size 2 <= first width 2"),
    ([[1, 0], [2, 2]], 8, "neither", "ReLU layer 1 of 2: 1 of 2 samples"),
    ([[1, 1], [2, 1]], 8, "neither", "ReLU layer 2 of 2: 1 of 2 samples have fewer than 2"),
])
def test_classification_and_its_reason(counts, width, state, words):
    got, reason = ex.classify(np.array(counts), width)
    assert got == state
    assert words in reason


def test_without_the_first_relu_no_sample_is_exclusive_there():
    rng = np.random.default_rng(1)
    network = dense.random_network((16, 6, 64, 5), rng)
    inputs, _ = _batch(rng, 7)
    report = ex.analyse(network, inputs, first_relu=False)
    assert report.counts[0].max() == 0 and report.state == "secure"


# ----------------------------------------------------------------------------------
# The attack
# ----------------------------------------------------------------------------------


def _insecure(widths, batch_size, seed=0):
    rng = np.random.default_rng(seed)
    network = dense.random_network(widths, rng)
    pool, pool_labels = _batch(rng, 200, widths[0])
    index = ex.find_batch(network, pool, batch_size, "insecure", rng)
    return network, pool[index], pool_labels[index]


@pytest.mark.parametrize("widths, batch_size", [((16, 64, 5), 3), ((16, 256, 256, 5), 5), ((16, 256, 128, 128, 5), 3)])
def test_exact_recovery_of_insecure_batches(widths, batch_size):
    network, inputs, labels = _insecure(widths, batch_size)
    recovery = ex.reconstruct(network, dense.gradients(network, inputs, labels), batch_size)
    assert ex.worst_relative_error(recovery.inputs, inputs) < 1e-10
    assert sorted(recovery.labels.tolist()) == sorted(labels.tolist())
    assert recovery.gradient_residual < 1e-10


def test_attack_agrees_with_the_analysis():
    rng = np.random.default_rng(2)
    network = dense.random_network((16, 40, 40, 5), rng)
    pool, pool_labels = _batch(rng, 300)
    points = ex.survey(network, pool, pool_labels, (2, 3, 4), 15, rng)
    assert sum(point.insecure for point in points) > 0 and sum(point.insecure for point in points) < 45  # both kinds drawn
    assert all(point.disagreements == 0 for point in points)
    assert all(point.worst_error < 1e-8 for point in points)


def _confident_case(trial):
    """A network scaled up until its softmax saturates, and a batch of two it classifies confidently."""
    rng = np.random.default_rng(trial)
    widths = (12, int(rng.integers(8, 40)), int(rng.integers(8, 40)), 4)
    network = dense.random_network(widths, rng).scaled(float(rng.choice([3.0, 5.0, 8.0])))
    inputs = rng.random((2, 12))
    labels = dense.softmax(dense.forward(network, inputs).output).argmax(axis=1)
    return network, inputs, labels


@pytest.mark.parametrize("trial, failure", [
    (1741, "more than the batch size"),  # loss vectors nearly anti-parallel: p_y = 1 - 5e-6 and 0.52 over the same two classes
    (1279, "more than the batch size"),  # p_y within 5e-12 of 1
    (8, "no exclusive neuron at ReLU layer 1"),  # p_y within 4e-12 of 1
])
def test_analysis_says_why_the_attack_fails_on_a_very_confident_model(trial, failure):
    # Issue 14: analyse said insecure, reconstruct failed ("more groups than the batch size"). The
    # paper's condition is about activation patterns; the attack also needs the loss vectors apart.
    network, inputs, labels = _confident_case(trial)
    plain = ex.analyse(network, inputs)
    assert plain.insecure and plain.recoverable is None
    with pytest.raises(ValueError, match=failure):
        ex.reconstruct(network, dense.gradients(network, inputs, labels), 2)
    report = ex.analyse(network, inputs, labels=labels)
    assert report.insecure and report.state == plain.state and report.reason == plain.reason  # the paper's verdict stays
    assert report.recoverable is False
    assert "insecure by exclusivity, but the attack fails" in report.attack_reason and failure in report.attack_reason
    assert "fit so confidently that its loss vector p - onehot(y) has norm" in report.attack_reason
    assert "grouping tolerance of 1e-12" in report.attack_reason


def test_analysis_with_labels_agrees_with_the_attack_on_ordinary_batches():
    network, inputs, labels = _insecure((16, 64, 5), 3)
    report = ex.analyse(network, inputs, labels=labels)
    assert report.insecure and report.recoverable is True and "recovers every input" in report.attack_reason
    reduced = ex.analyse(network, inputs, first_relu=False, labels=labels)
    assert reduced.recoverable is False and "reduced" in reduced.attack_reason


def test_not_insecure_at_the_last_layer_is_reported_with_counts():
    rng = np.random.default_rng(3)
    network = dense.random_network((16, 32, 5), rng)
    inputs, labels = _batch(rng, 2)
    inputs = np.vstack([inputs, inputs[:1]])  # a duplicated sample shares every unit with its twin
    labels = np.append(labels, labels[0])
    with pytest.raises(ex.NotInsecureError, match=r"only \d of 3 samples show >= 2 exclusive neurons at the last ReLU layer"):
        ex.reconstruct(network, dense.gradients(network, inputs, labels), 3)
    assert not ex.analyse(network, inputs).insecure


def test_not_insecure_at_a_lower_layer_is_reported():
    # Wide last layer, a first layer of width 4: the last layer separates the samples, the first cannot.
    rng = np.random.default_rng(4)
    network = dense.random_network((16, 4, 256, 5), rng)
    pool, pool_labels = _batch(rng, 200)
    index = ex.find_batch(network, pool, 3, lambda report: report.counts[1].min() >= 2 and report.counts[0].min() == 0, rng)
    with pytest.raises(ex.NotInsecureError, match="no exclusive neuron at ReLU layer 1"):
        ex.reconstruct(network, dense.gradients(network, pool[index], pool_labels[index]), 3)


def test_zero_bias_gradient_is_reported_not_divided():
    assert ex._solve_rows(np.ones((3, 4)), np.zeros(3), np.array([0, 2])) is None
    np.testing.assert_allclose(ex._solve_rows(np.outer([2.0, 0.0, 1.0], [1, 2, 3, 4]), np.array([2.0, 0.0, 1.0]), np.array([0, 1, 2])),
                               [1, 2, 3, 4])


def test_loss_groups_skip_zero_and_single_columns():
    direction = np.array([0.2, -0.5, 0.3])
    other = np.array([-0.4, 0.1, 0.3])
    columns = np.stack([2 * direction, np.zeros(3), 0.5 * direction, other, direction + other, 3 * other], axis=1)
    groups = ex.loss_groups(columns)
    assert [group.tolist() for group in groups] == [[0, 2], [3, 5]]


def test_bad_inputs_are_named():
    network, inputs, labels = _insecure((16, 64, 5), 3)
    gradient = dense.gradients(network, inputs, labels)
    with pytest.raises(ValueError, match="batch size given is wrong"):
        ex.reconstruct(network, gradient, 2)
    unbiased = dense.DenseNetwork(network.weights, [None, network.biases[1]])
    with pytest.raises(ValueError, match=r"hidden layer\(s\) \[0\] have no bias"):
        ex.reconstruct(unbiased, gradient, 3)
    with pytest.raises(ValueError, match="NaN"):
        ex.reconstruct(network, [(gradient[0][0] * np.nan, gradient[0][1]), gradient[1]], 3)


# ----------------------------------------------------------------------------------
# Torch: the registered attack, the reduced network
# ----------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------
# Artifact batches
# ----------------------------------------------------------------------------------


def test_artifact_batch_keeps_the_gradient_and_moves_the_pixels():
    rng = np.random.default_rng(6)
    network = dense.random_network((16, 3, 32, 5), rng)
    pool, pool_labels = _batch(rng, 100)
    index = ex.find_batch(network, pool, 6, "secure", rng)
    artifact = ex.artifact_batch(network, pool[index], pool_labels[index])
    assert artifact.gradient_difference < 1e-12
    assert artifact.largest_change > 0.3
    assert artifact.inputs.min() >= 0 and artifact.inputs.max() <= 1
    assert artifact.dimension == (6 - 3) * (16 - 3)
    # The same perturbation on a different model changes its gradient: the test can fail.
    other = dense.random_network((16, 3, 32, 5), rng)
    moved = np.abs(dense.flatten_gradients(dense.gradients(other, artifact.inputs, pool_labels[index]))
                   - dense.flatten_gradients(dense.gradients(other, pool[index], pool_labels[index]))).max()
    assert moved > 1e-6


def test_exclusive_sample_is_pinned():
    rng = np.random.default_rng(7)
    network = dense.random_network((16, 4, 32, 5), rng)
    pool, pool_labels = _batch(rng, 100)
    index = ex.find_batch(network, pool, 6, lambda report: 0 < (report.counts[0] > 0).sum() < 6, rng)
    counts = ex.analyse(network, pool[index]).counts[0]
    sample_basis, input_basis = ex.perturbation_basis(network, pool[index], pool_labels[index])
    assert input_basis.shape == (16, 12)
    np.testing.assert_allclose(sample_basis[counts > 0], 0.0, atol=1e-12)


def _secure_batch():
    """A batch of 6 without exclusivity on a (16-3-32-5) network: room for artifact batches."""
    rng = np.random.default_rng(6)
    network = dense.random_network((16, 3, 32, 5), rng)
    pool, pool_labels = _batch(rng, 100)
    index = ex.find_batch(network, pool, 6, "secure", rng)
    return network, pool[index], pool_labels[index]


def test_artifact_batch_refuses_bad_targets_and_bounds():
    network, batch, labels = _secure_batch()
    # Issue 14: target=(99, 0) was an IndexError inside the module; reversed bounds an "infeasible" programme.
    with pytest.raises(ValueError, match="target sample must be between 0 and 5; got 99"):
        ex.artifact_batch(network, batch, labels, target=(99, 0))
    with pytest.raises(ValueError, match="target pixel must be between 0 and 15; got 16"):
        ex.artifact_batch(network, batch, labels, target=(0, 16))
    with pytest.raises(TypeError, match="target must be 'invert' or a"):
        ex.artifact_batch(network, batch, labels, target=3)
    with pytest.raises(ValueError, match=r"low < high; got \(1.0, 0.0\)"):
        ex.artifact_batch(network, batch, labels, bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="outside the pixel box"):
        ex.artifact_batch(network, batch, labels, bounds=(0.0, 0.5))
    with pytest.raises(ValueError, match=r"labels must lie in 0..4"):
        ex.artifact_batch(network, batch, labels + 5)


def test_entry_points_refuse_what_is_not_a_network_or_a_batch():
    network, inputs, labels = _insecure((16, 64, 5), 3)
    with pytest.raises(TypeError, match="must be a ReLU gradcore.analysis.dense.DenseNetwork"):
        ex.analyse("network", inputs)
    with pytest.raises(ValueError, match=r"inputs must be shaped \(16,\) or \(B, 16\)"):
        ex.analyse(network, inputs[:, :5])
    with pytest.raises(TypeError, match="batch size must be a whole number"):
        ex.reconstruct(network, dense.gradients(network, inputs, labels), 3.0)
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        ex.reconstruct(network, dense.gradients(network, inputs, labels), 3, tolerance=-1.0)
    with pytest.raises(ValueError, match="batch size must be between 1 and 3"):
        ex.find_batch(network, inputs, 4, "secure", np.random.default_rng(0))


def test_no_artifact_without_room():
    rng = np.random.default_rng(8)
    network = dense.random_network((16, 8, 32, 5), rng)
    inputs, labels = _batch(rng, 3)
    with pytest.raises(ValueError, match="no gradient-preserving perturbation"):
        ex.artifact_batch(network, inputs, labels)


def test_sparse_programme_matches_the_dense_null_space_one():
    """The artifact programme in sparse form reaches the optimum of the dense null-space form (the earlier code)."""
    from scipy.optimize import linprog

    network, batch, labels = _secure_batch()
    artifact = ex.artifact_batch(network, batch, labels)
    sample_basis, input_basis = ex.perturbation_basis(network, batch, labels)
    mapping, direction = np.kron(sample_basis, input_basis), 1.0 - 2.0 * batch.ravel()
    dense = linprog(-(direction @ mapping), A_ub=np.vstack([mapping, -mapping]),
                    b_ub=np.concatenate([1.0 - batch.ravel(), batch.ravel()]), bounds=[(None, None)] * mapping.shape[1])
    assert direction @ (artifact.inputs - batch).ravel() == pytest.approx(-dense.fun, rel=1e-6)
    # In the null space of W_0 exactly: the pre-activations of the first layer do not move.
    np.testing.assert_allclose((artifact.inputs - batch) @ network.weights[0].T, 0.0, atol=1e-12)


def test_moved_share_by_hand():
    truth = np.array([[0.0, 0.5, 1.0, 0.2]])
    artifact = np.array([[0.3, 0.5, 0.7, 0.2]])
    assert ex.moved_share(artifact, truth) == 0.5  # 0.3 and 0.3 move by >= 0.25
    assert ex.moved_share(artifact, truth, moved=0.4) == 0.0
    assert ex.moved_share(artifact * 2 - 1, truth * 2 - 1, bounds=(-1.0, 1.0)) == 0.5  # a share of the range, any range
    np.testing.assert_allclose(ex.moved_share(np.vstack([artifact, truth]), np.vstack([truth, truth]), axis=1), [0.5, 0.0])


def test_learning_attack_sweep_counts_recovered_batches():
    digits = gradcore.data.load("digits")
    config = {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "line_search": "strong_wolfe", "init": "randn", "iterations": 5}
    sweep = experiments.exclusivity.learning_attack_sweep(digits, (32,), (1, 2), 2, config, seed=0, threshold=40.0)
    assert set(sweep.psnr) == {32} and all(len(values) == 2 for values in sweep.psnr[32].values())
    for size in (1, 2):
        assert sweep.recovered(32, size) == np.mean([value >= 40.0 for value in sweep.psnr[32][size]])
    assert sweep.by_width()[32] == np.mean([sweep.recovered(32, 1), sweep.recovered(32, 2)])
    assert sweep.by_batch() == {1: sweep.recovered(32, 1), 2: sweep.recovered(32, 2)}
    strict = experiments.exclusivity.LearningSweep(sweep.psnr, float("inf"))
    assert strict.by_batch() == {1: 0.0, 2: 0.0}
