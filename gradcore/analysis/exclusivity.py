"""Neuron exclusivity: when an averaged gradient gives every sample of a batch away, and when it
cannot.

Pan, Zhang, Yang, Yang, Wu, Lin and Wang (2022), "Exploring the Security Boundary of Data
Reconstruction via Neuron Exclusivity Analysis", USENIX Security 2022.

A ReLU network ``f(x) = W_H D_H (... W_1 D_1 (W_0 x + b_0) ...) + b_H`` forwards each sample
along its own *activation pattern* ``(D_1, ..., D_H)``: the diagonal 0/1 matrices of the
units it switches on at each ReLU layer. A unit that exactly one sample of the batch
switches on is an *exclusively activated neuron* (ExAN) of that sample; ``N_i^m`` counts
the ExANs of sample ``m`` at ReLU layer ``i`` (Sec. 4). The paper's two boundary
conditions:

* **insecure** (sufficient exclusivity): ``N_H^m >= 2`` and ``N_i^m >= 1`` for
  ``i = 1 .. H-1``, for every sample. Then a deterministic algorithm recovers the whole
  batch from its average gradient (Sec. 5), which :func:`reconstruct` implements;
* **secure** (lack of exclusivity): ``N_1^m = 0`` for every sample and ``M > d_1``. Then
  infinitely many *artifact batches* share the gradient (Theorem 2, Corollary 1), which
  :func:`artifact_batch` constructs.

A batch meeting neither condition is "neither": the paper proves nothing about it. The
registered attacks built on :func:`reconstruct` are in :mod:`gradcore.attacks.exclusivity`.

The attack, with the choices made where the source (the paper's body without its
appendices) leaves details open:

1. *Loss vectors.* Column ``j`` of the last layer's weight gradient is
   ``(1/M) sum_m a_H^m[j] g^m`` with ``g^m = p^m - onehot(y_m)``; for an ExAN of sample ``m``
   it is a positive multiple of ``g^m`` alone. The paper detects the repeated values of
   the ratio vectors ``[G_H]_c / [G_H]_1``; gradcore groups the *normalised columns*
   instead (equal up to ``tolerance``), which is the same test without dividing by
   entries that may be zero. Groups of two or more columns are the samples: that is
   why the last layer needs two ExANs, a single one is indistinguishable from a shared
   unit. The label is the one negative entry of ``g^m``.
2. *Activation patterns.* A row ``j`` of ``dL/dW_{i-1}`` whose unit is an ExAN of sample
   ``m`` holds ``(1/M) delta^m[j] a_{i-1}^m`` and the bias gradient ``(1/M) delta^m[j]``:
   only sample ``m`` reaches it. The ratio is that sample's input to the layer, hence its
   pattern one layer down and, with every sample's pattern, the ExANs there.
3. *Inputs.* At the first layer the same rows give the linear system
   ``G_0[j] = gb_0[j] x_m`` for every ExAN ``j`` of ``m``, solved in least squares.

Choices and limits, stated rather than hidden:

* every hidden layer must have a bias. The paper omits biases and says they reduce to a
  "constant calibration" (its App. D, not in the source); with them the solve is a
  division and no per-sample scale of ``g^m`` is needed. A bias-free hidden layer is
  refused with a ``ValueError``;
* the batch size ``M`` is taken as given: it is part of the server's
  :class:`~gradcore.attacks.Observation`. Partial reproductions report estimating it from
  the gradient as unreliable; here the number of column groups found is checked against
  it, and a mismatch is reported, not guessed around;
* a batch that is not insecure raises :class:`NotInsecureError` naming the layer, the
  samples and their counts; nothing divides by zero (a group of exclusive rows whose bias
  gradients all vanish is reported as such).

Conventions follow :mod:`gradcore.analysis.dense`: float64
:class:`~gradcore.analysis.dense.DenseNetwork`, layers ``0 .. L-1``, ``L = H + 1``; "ReLU layer
``i``" (``i = 1 .. H``, the paper's index) is the output of linear layer ``i - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import sparse
from scipy.optimize import linear_sum_assignment, linprog
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from torch import nn

from .. import validation as check
from . import dense
from .dense import DenseNetwork

STATES = ("insecure", "secure", "neither")


class NotInsecureError(check.AttackRefused):
    """The batch behind a gradient does not meet the insecure boundary condition; the message says
    where."""


# ----------------------------------------------------------------------------------
# Forward and backward, with or without the first ReLU (exclusivity reduction, Sec. 6)
# ----------------------------------------------------------------------------------


def _check_network(network) -> None:
    if not isinstance(network, DenseNetwork) or network.activation != "relu":
        raise check.GradcoreTypeError(
            "network must be a ReLU gradcore.analysis.dense.DenseNetwork (dense.from_torch "
            f"converts a torch MLP); got {check.describe(network)}"
        )


def _check_batch(network: DenseNetwork, inputs, labels=None) -> None:
    """A batch ``(B, d0)`` of finite inputs and, when given, one class index per sample within the
    classes."""
    _check_network(network)
    dense.check_inputs(network, inputs, allow_single=False)
    if labels is not None:
        dense.check_batch(network, inputs, labels, "cross_entropy")


def _forward(
    network: DenseNetwork, inputs: np.ndarray, first_relu: bool = True
) -> tuple[list, list]:
    """Inputs and pre-activations of every layer for a batch ``(B, d0)``."""
    passed = dense.forward(network.with_first_activation(first_relu), np.atleast_2d(inputs))
    return passed.inputs, passed.pre_activations


def _sensitivities(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, first_relu: bool = True
) -> tuple[list, list]:
    """Each sample's ``dl_m/dz_l`` at every layer, ``(B, out_l)``, under cross-entropy; also the
    layer inputs.

    ``first_relu=False`` is the network after exclusivity reduction: the first hidden
    layer feeds the second linearly.
    """
    _check_batch(network, inputs, labels)
    passed, sensitivities = dense.per_sample_sensitivities(
        network.with_first_activation(first_relu),
        np.atleast_2d(inputs),
        np.atleast_1d(np.asarray(labels)),
    )
    return passed.inputs, sensitivities


def batch_gradients(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, first_relu: bool = True
) -> list:
    """The average gradient ``(dL/dW_l, dL/db_l)`` per layer, with or without the first ReLU."""
    _check_batch(network, inputs, labels)
    return dense.gradients(
        network.with_first_activation(first_relu), np.atleast_2d(inputs), np.atleast_1d(labels)
    )


# ----------------------------------------------------------------------------------
# The analysis (Sec. 4)
# ----------------------------------------------------------------------------------


def activation_patterns(
    network: DenseNetwork, inputs: np.ndarray, first_relu: bool = True
) -> list[np.ndarray]:
    """``D_i`` of every sample at ReLU layers ``i = 1 .. H``, as ``(B, d_i)`` booleans (unit on
    where ``z > 0``).

    Without the first ReLU every unit of the first hidden layer passes every sample,
    so that layer's pattern is all ones.
    """
    _check_batch(network, inputs)
    if network.depth < 2:
        raise check.AttackRefused(
            "neuron exclusivity needs at least one hidden ReLU layer; the network is a single "
            "linear layer"
        )
    _, pre_activations = _forward(network, inputs, first_relu)
    patterns = [pre > 0 for pre in pre_activations[:-1]]
    if not first_relu:
        patterns[0] = np.ones_like(patterns[0])
    return patterns


def exclusive_neurons(pattern: np.ndarray) -> np.ndarray:
    """``(B, d)`` booleans: unit ``j`` is on for sample ``m`` and for no other sample of the
    batch."""
    pattern = np.asarray(pattern, dtype=bool)
    return pattern & (pattern.sum(axis=0, keepdims=True) == 1)


def exclusive_counts(patterns: Sequence[np.ndarray]) -> np.ndarray:
    """``N_i^m``: ExANs of each sample at each ReLU layer, shaped ``(H, B)``."""
    return np.stack([exclusive_neurons(pattern).sum(axis=1) for pattern in patterns])


def classify(counts: np.ndarray, first_width: int) -> tuple[str, str]:
    """The exclusivity state of a batch from its ``N_i^m`` table, and why.

    Returns
    -------
    state : {"insecure", "secure", "neither"}
        ``insecure``: ``N_H^m >= 2`` and ``N_i^m >= 1`` below, for every ``m``;
        ``secure``: ``N_1^m = 0`` for every ``m`` and ``M > d_1``; else ``neither``.
    reason : str
        For ``insecure`` and ``secure``, the condition met; for ``neither``, which part of
        each condition fails (the first layer and sample short of ExANs).
    """
    counts = np.asarray(counts)
    depth, batch = counts.shape
    short = []
    for layer in range(depth, 0, -1):
        need = 2 if layer == depth else 1
        lacking = np.flatnonzero(counts[layer - 1] < need)
        if len(lacking):
            short.append(
                f"ReLU layer {layer} of {depth}: {len(lacking)} of {batch} samples have fewer than "
                f"{need} exclusive neurons (sample {lacking[0]} has "
                f"{counts[layer - 1, lacking[0]]})"
            )
    if not short:
        return (
            "insecure",
            f"sufficient exclusivity: every sample has >= 2 ExANs at ReLU layer {depth} and >= 1 "
            "below",
        )
    with_first = int((counts[0] > 0).sum())
    if with_first == 0 and batch > first_width:
        return (
            "secure",
            f"lack of exclusivity: no ExAN at the first ReLU layer and batch size {batch} > width "
            f"{first_width}",
        )
    secure_fails = []
    if with_first:
        secure_fails.append(f"{with_first} samples have ExANs at the first layer")
    if batch <= first_width:
        secure_fails.append(f"batch size {batch} <= first width {first_width}")
    return "neither", f"not insecure ({short[0]}); not secure ({', '.join(secure_fails)})"


@dataclass
class ExclusivityReport:
    """The exclusivity state of one batch on one network.

    Attributes
    ----------
    counts : numpy.ndarray
        ``(H, B)`` ExANs per ReLU layer (row ``i - 1`` is the paper's layer ``i``) and sample.
    first_width : int
        ``d_1``, the width of the first hidden layer.
    state : str
        ``insecure``, ``secure`` or ``neither`` (:func:`classify`).
    reason : str
        Why.
    recoverable : bool or None
        With labels given to :func:`analyse`: whether :func:`reconstruct` recovers this
        batch (every input and label) from its average gradient; ``None`` without labels.
    attack_reason : str
        Why or why not. The paper's conditions are about activation patterns; the attack
        also needs the loss vectors ``p - onehot(y)`` to be told apart in the gradient, which
        fails for samples fit so confidently that their loss vector nearly vanishes, or
        whose loss vectors are nearly parallel: then an "insecure" batch is not recovered,
        and this says so.
    """

    counts: np.ndarray
    first_width: int
    state: str
    reason: str
    recoverable: bool | None = None
    attack_reason: str = ""

    @property
    def batch_size(self) -> int:
        return self.counts.shape[1]

    @property
    def insecure(self) -> bool:
        return self.state == "insecure"

    @property
    def secure(self) -> bool:
        return self.state == "secure"


def analyse(
    network: DenseNetwork,
    inputs: np.ndarray,
    first_relu: bool = True,
    labels: np.ndarray | None = None,
    tolerance: float = 1e-12,
) -> ExclusivityReport:
    """Classify a batch ``(B, d0)`` on ``network`` (the server cannot run this: it needs the batch).

    With ``labels`` the report also says whether the deterministic attack recovers the
    batch from its average gradient, and if not, why (``recoverable``, ``attack_reason``):
    the exclusivity state and the attack can disagree for very confident models, and the
    report then names the loss vectors that the attack cannot tell apart.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Not a :class:`~gradcore.analysis.dense.DenseNetwork`, inputs that are not a finite batch
        ``(B, d0)``, labels outside the classes; never for the state of the batch.
    """
    check.boolean("first_relu", first_relu)
    check.number("tolerance", tolerance, low=0, low_open=True)
    _check_batch(network, inputs, labels)
    counts = exclusive_counts(activation_patterns(network, inputs, first_relu))
    state, reason = classify(counts, network.widths[1])
    report = ExclusivityReport(counts, network.widths[1], state, reason)
    if labels is not None:
        report.recoverable, report.attack_reason = _attack_verdict(
            network, np.atleast_2d(inputs), np.asarray(labels), first_relu, tolerance, state
        )
    return report


def _attack_verdict(
    network: DenseNetwork,
    inputs: np.ndarray,
    labels: np.ndarray,
    first_relu: bool,
    tolerance: float,
    state: str,
    exact: float = 1e-6,
) -> tuple[bool, str]:
    """Run :func:`reconstruct` on the batch's own gradient: did it recover the batch, and if not,
    why."""
    if not first_relu:
        return (
            False,
            "the attack needs a ReLU after the first hidden layer; this network is reduced",
        )
    try:
        recovery = reconstruct(
            network, dense.gradients(network, inputs, labels), len(inputs), tolerance
        )
    except (
        check.AttackRefused,
        np.linalg.LinAlgError,
    ) as error:  # declined, or an ill-conditioned solve
        outcome = f"the attack fails on this batch's gradient ({error})"
    else:
        error = worst_relative_error(recovery.inputs, inputs)
        if error < exact and sorted(recovery.labels.tolist()) == sorted(labels.tolist()):
            return True, f"the attack recovers every input (relative error {error:.1g}) and label"
        outcome = f"the attack returns inputs off by {error:.2g} (relative) or wrong labels"
    if state != "insecure":
        return False, outcome
    return (
        False,
        f"insecure by exclusivity, but {outcome}: "
        f"{_loss_vector_diagnosis(network, inputs, labels, tolerance)}",
    )


def _loss_vector_diagnosis(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, tolerance: float
) -> str:
    """Why the column grouping cannot separate the samples: the smallest loss vector and the two
    least separable ones.

    A column of the last layer's gradient shared by samples ``m`` and ``n`` is
    ``a_m g_m + a_n g_n``; its direction leaves ``g_n``'s by about ``(a_m / a_n) |g_m perp g_n| /
    |g_n|``. When that is near the tolerance, shared columns group with each other or with a
    sample's own columns and the attack sees the wrong number of samples.
    """
    probabilities = dense.softmax(dense.forward(network, inputs).output)
    loss_vectors = probabilities.copy()
    loss_vectors[np.arange(len(labels)), labels] -= 1.0
    norms = np.linalg.norm(loss_vectors, axis=1)
    smallest = int(np.argmin(norms))
    text = (
        f"sample {smallest} is fit so confidently that its loss vector p - onehot(y) has norm "
        f"{norms[smallest]:.2g} (p_y = {probabilities[smallest, labels[smallest]]:.12g}), against "
        f"{norms.max():.2g} for the largest"
    )
    separations = []
    for m in range(len(labels)):
        for n in range(len(labels)):
            if m != n and norms[n] > 0:
                along = loss_vectors[n] / norms[n]
                separations.append(
                    (
                        np.linalg.norm(loss_vectors[m] - (loss_vectors[m] @ along) * along)
                        / norms[n],
                        m,
                        n,
                    )
                )
    if separations:
        separation, m, n = min(separations)
        text += (
            f"; the columns samples {m} and {n} share leave sample {n}'s direction by about "
            f"{separation:.2g} per unit ratio of their activations, against a grouping tolerance "
            f"of {tolerance:g}"
        )
    return text


# ----------------------------------------------------------------------------------
# The deterministic attack (Sec. 5)
# ----------------------------------------------------------------------------------


@dataclass
class ExclusivityRecovery:
    """What :func:`reconstruct` recovers from an insecure batch's average gradient.

    Attributes
    ----------
    inputs : numpy.ndarray
        ``(B, d0)`` recovered inputs, in the order of the loss-vector groups.
    labels : numpy.ndarray
        ``(B,)`` recovered labels.
    loss_directions : numpy.ndarray
        ``(B, K)`` unit vectors along each sample's loss vector ``p - onehot(y)``.
    exclusive : list of list of numpy.ndarray
        ``exclusive[i - 1][m]``: the ExANs of sample ``m`` at ReLU layer ``i`` that were used.
    activations : list of numpy.ndarray
        Recovered input of every layer ``(B, d_l)`` (``activations[0]`` is ``inputs``).
    gradient_residual : float
        ``max |G(recovered) - G| / max |G|`` over all entries: the self-check.
    """

    inputs: np.ndarray
    labels: np.ndarray
    loss_directions: np.ndarray
    exclusive: list
    activations: list
    gradient_residual: float


def loss_groups(last_weight_gradient: np.ndarray, tolerance: float = 1e-12) -> list[np.ndarray]:
    """Columns of ``dL/dW_H`` that point the same way, in groups of two or more (step 1).

    Parameters
    ----------
    last_weight_gradient : numpy.ndarray
        ``(K, d_H)``, the output layer's weight gradient.
    tolerance : float
        Largest distance between unit columns counted as equal; round-off is ~1e-16 in
        float64, distinct samples' loss vectors sit orders of magnitude further apart.
        The limit: a sample fit so well that its loss vector is ~1/tolerance times smaller
        than another's hides in the shared columns (they all point nearly along the other
        sample's vector), and two shared columns may then group spuriously.

    Returns
    -------
    list of numpy.ndarray
        Column indices of each group, ordered by their first column.
    """
    columns = np.asarray(last_weight_gradient, dtype=np.float64)
    norms = np.linalg.norm(columns, axis=0)
    live = np.flatnonzero(
        norms > 0
    )  # a unit no sample switches on has a zero column; it is skipped, never divided by
    units = columns[:, live] / norms[live]
    # Cosines shortlist the pairs (a distance <= tolerance means a cosine >= 1 - tolerance^2 / 2),
    # exact distances decide.
    cosines = units.T @ units
    first, second = np.nonzero(np.triu(cosines >= 1.0 - max(1e-10, tolerance**2), k=1))
    equal = np.linalg.norm(units[:, first] - units[:, second], axis=0) <= tolerance
    graph = coo_matrix(
        (np.ones(int(equal.sum())), (first[equal], second[equal])), shape=(len(live), len(live))
    )
    _, component = connected_components(graph, directed=False)
    groups = [live[component == label] for label in np.unique(component)]
    return sorted((group for group in groups if len(group) >= 2), key=lambda group: group[0])


def _solve_rows(
    weight_gradient: np.ndarray, bias_gradient: np.ndarray, rows: np.ndarray
) -> np.ndarray | None:
    """Least-squares ``a`` of ``G[j] = gb[j] a`` over the exclusive rows ``j``; ``None`` if every
    ``gb[j]`` is zero."""
    coefficients = bias_gradient[rows]
    energy = float(coefficients @ coefficients)
    if energy == 0.0:
        return None
    return coefficients @ weight_gradient[rows] / energy


def _require_biases(network: DenseNetwork) -> None:
    if network.depth < 2:
        raise check.AttackRefused(
            "the exclusivity attack needs at least one hidden ReLU layer; the network is a single "
            "linear layer"
        )
    unbiased = [layer for layer in range(network.depth - 1) if network.biases[layer] is None]
    if unbiased:
        raise check.AttackRefused(
            f"hidden layer(s) {unbiased} have no bias: gradcore's exclusivity attack divides by "
            "the bias gradient of every hidden layer (the paper's bias-free calibration is not "
            "implemented)"
        )


def reconstruct(
    network: DenseNetwork, layer_gradients: Sequence, batch_size: int, tolerance: float = 1e-12
) -> ExclusivityRecovery:
    """Recover a whole batch and its labels from its average gradient (Pan et al., 2022, Sec. 5).

    Parameters
    ----------
    network : DenseNetwork
        The shared model, a bias on every hidden layer.
    layer_gradients : sequence of (numpy.ndarray, numpy.ndarray or None)
        The batch-mean cross-entropy gradient, as :func:`gradcore.analysis.dense.gradients` returns
        it.
    batch_size : int
        ``M``, known to the server.
    tolerance : float
        Of the column grouping (:func:`loss_groups`).

    Returns
    -------
    ExclusivityRecovery

    Raises
    ------
    NotInsecureError
        The gradient shows fewer than ``M`` samples with two ExANs at the last ReLU layer,
        or a sample without an ExAN at a lower layer, or exclusive rows that carry no
        gradient; the message names the layer, the samples and the counts.
    ValueError
        A network outside the family (no hidden layer, a bias-free hidden layer), a
        gradient that does not fit it, a batch size below 1, or more groups than ``M``.
    """
    _check_network(network)
    check.positive_int("batch size", batch_size)
    check.number("tolerance", tolerance, low=0, low_open=True)
    _require_biases(network)
    gradients = dense.check_gradients(network, layer_gradients)
    depth, hidden = network.depth, network.depth - 1
    groups = loss_groups(gradients[-1][0], tolerance)
    if len(groups) > batch_size:
        raise check.AttackRefused(
            f"{len(groups)} groups of parallel loss columns at the last ReLU layer, more than the "
            f"batch size {batch_size}: the batch size given is wrong, the loss is not "
            "cross-entropy, or the samples' loss vectors p - onehot(y) are so small (a confidently "
            "fit sample) or so nearly parallel that shared columns group spuriously at this "
            "tolerance (analyse(..., labels=...) names them)"
        )
    if len(groups) < batch_size:
        raise NotInsecureError(
            f"not insecure: only {len(groups)} of {batch_size} samples show >= 2 exclusive neurons "
            f"at the last ReLU layer (layer {hidden}, width {network.widths[hidden]}); the others "
            "have at most one, which the gradient cannot tell from a shared unit; or a sample is "
            "fit so confidently that its loss vector p - onehot(y) vanishes from the gradient "
            "(analyse(..., labels=...) says which)"
        )
    columns = gradients[-1][0]
    directions = np.stack(
        [columns[:, group[0]] / np.linalg.norm(columns[:, group[0]]) for group in groups]
    )
    negative = (directions < 0).sum(axis=1)
    if np.any(negative != 1):
        raise check.GradcoreValueError(
            "a loss direction does not have exactly one negative entry, as p - onehot(y) must "
            "under cross-entropy: the loss is not cross-entropy, the tolerance is too loose, or a "
            "sample is fit so well that p_y rounds to 1"
        )
    labels = directions.argmin(axis=1)
    activations = [None] * depth
    exclusive = [None] * hidden
    exclusive[hidden - 1] = groups
    for relu_layer in range(hidden, 0, -1):
        weight_gradient, bias_gradient = gradients[relu_layer - 1]
        recovered = []
        for sample, rows in enumerate(exclusive[relu_layer - 1]):
            solution = _solve_rows(weight_gradient, bias_gradient, rows)
            if solution is None:
                raise NotInsecureError(
                    f"not solvable: the {len(rows)} exclusive neurons of sample {sample} at ReLU "
                    f"layer {relu_layer} carry zero bias gradient, so nothing can be divided out"
                )
            recovered.append(solution)
        activations[relu_layer - 1] = np.stack(recovered)
        if relu_layer == 1:
            break
        # The recovered inputs of linear layer relu_layer - 1 are the activations of ReLU layer
        # relu_layer - 1.
        counts = exclusive_neurons(activations[relu_layer - 1] > 0)
        lacking = np.flatnonzero(counts.sum(axis=1) == 0)
        if len(lacking):
            raise NotInsecureError(
                f"not insecure: {len(lacking)} of {batch_size} samples (first: sample "
                f"{lacking[0]}) have no exclusive neuron at ReLU layer {relu_layer - 1} (width "
                f"{network.widths[relu_layer - 1]}), so their inputs below cannot be separated "
                "from the others'"
            )
        exclusive[relu_layer - 2] = [np.flatnonzero(row) for row in counts]
    layer_inputs, _ = _forward(network, activations[0])
    for layer in range(1, depth):
        activations[layer] = layer_inputs[layer]
    # Self-check: the recovered batch, its labels and the model give back the gradient.
    again = dense.flatten_gradients(dense.gradients(network, activations[0], labels))
    given = dense.flatten_gradients(gradients)
    residual = float(np.abs(again - given).max() / max(np.abs(given).max(), np.finfo(float).tiny))
    return ExclusivityRecovery(activations[0], labels, directions, exclusive, activations, residual)


def worst_relative_error(recovered: np.ndarray, truth: np.ndarray) -> float:
    """``max_m ||x_hat_m - x_m|| / ||x_m||`` after matching the two batches' orders (Hungarian, on
    distances)."""
    recovered, truth = np.atleast_2d(recovered), np.atleast_2d(truth)
    cost = np.linalg.norm(recovered[:, None, :] - truth[None, :, :], axis=2)
    rows, columns = linear_sum_assignment(cost)
    scale = np.maximum(np.linalg.norm(truth[columns], axis=1), np.finfo(float).tiny)
    return float((cost[rows, columns] / scale).max())


# ----------------------------------------------------------------------------------
# Surveys: how often a batch is insecure, and whether the attack agrees
# ----------------------------------------------------------------------------------


@dataclass
class SurveyPoint:
    """Batches of one size on one network: how many were insecure / secure, how many the attack
    recovered."""

    batch_size: int
    trials: int
    insecure: int
    secure: int
    recovered: int
    disagreements: (
        int  # the attack succeeded on a batch the analysis does not call insecure, or the reverse
    )
    worst_error: float  # largest relative input error over the recovered batches (0 if none)

    @property
    def insecure_rate(self) -> float:
        return self.insecure / self.trials

    @property
    def recovered_rate(self) -> float:
        return self.recovered / self.trials


def survey(
    network: DenseNetwork,
    images: np.ndarray,
    labels: np.ndarray,
    batch_sizes: Sequence[int],
    trials: int,
    rng: np.random.Generator,
    attack: bool = True,
    exact: float = 1e-6,
) -> list[SurveyPoint]:
    """Draw ``trials`` batches per size from ``images`` ``(N, d0)``; classify each and (optionally)
    attack its gradient.

    A batch counts as recovered when :func:`reconstruct` returns inputs within relative
    error ``exact`` of the truth and the right labels.
    """
    _check_network(network)
    check.integers("batch_sizes", batch_sizes, low=1)
    check.positive_int("trials", trials)
    for size in batch_sizes:
        check.integer("batch size", size, low=1, high=len(images))
    images = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    labels = np.asarray(labels)
    points = []
    for batch_size in batch_sizes:
        insecure = secure = recovered = disagreements = 0
        worst = 0.0
        for _ in range(trials):
            index = rng.choice(len(images), size=batch_size, replace=False)
            batch, batch_labels = images[index], labels[index]
            report = analyse(network, batch)
            insecure += report.insecure
            secure += report.secure
            if not attack:
                continue
            success = False
            try:
                recovery = reconstruct(
                    network, dense.gradients(network, batch, batch_labels), batch_size
                )
                error = worst_relative_error(recovery.inputs, batch)
                success = error < exact and sorted(recovery.labels.tolist()) == sorted(
                    batch_labels.tolist()
                )
                worst = max(worst, error) if success else worst
            except (
                check.AttackRefused,
                np.linalg.LinAlgError,
            ):  # not insecure, or ill-conditioned: a failure either way
                pass
            recovered += success
            disagreements += success != report.insecure
        points.append(
            SurveyPoint(batch_size, trials, insecure, secure, recovered, disagreements, worst)
        )
    return points


def find_batch(
    network: DenseNetwork,
    images: np.ndarray,
    batch_size: int,
    state: str | Callable[[ExclusivityReport], bool],
    rng: np.random.Generator,
    tries: int = 200,
    first_relu: bool = True,
) -> np.ndarray:
    """Indices of a random batch in the exclusivity ``state`` (deterministic given ``rng``);
    ``ValueError`` if none in ``tries``.

    ``state`` is one of :data:`STATES` or a test on the batch's :class:`ExclusivityReport`.
    """
    if isinstance(state, str) and state not in STATES:
        raise check.GradcoreValueError(f"unknown state {state!r}; known: {', '.join(STATES)}")
    if not (isinstance(state, str) or callable(state)):
        raise check.GradcoreTypeError(
            f"state must be one of {', '.join(STATES)} or a test on a report; got "
            f"{check.describe(state)}"
        )
    _check_network(network)
    check.integer("batch size", batch_size, low=1, high=len(images))
    check.positive_int("tries", tries)
    accept = state if callable(state) else (lambda report: report.state == state)
    images = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    for _ in range(tries):
        index = rng.choice(len(images), size=batch_size, replace=False)
        if accept(analyse(network, images[index], first_relu)):
            return index
    wanted = state if isinstance(state, str) else "matching"
    raise check.GradcoreValueError(
        f"no {wanted} batch of size {batch_size} in {tries} draws on widths {network.widths}"
    )


# ----------------------------------------------------------------------------------
# The secure boundary: artifact batches (Theorem 2, Corollary 1)
# ----------------------------------------------------------------------------------


def _null_space(matrix: np.ndarray, relative: float = 1e-10) -> np.ndarray:
    """Orthonormal basis ``(n, k)`` of the null space of an ``(r, n)`` matrix, by SVD."""
    _, singular, right = np.linalg.svd(matrix)
    rank = int((singular > relative * max(singular.max(initial=0.0), np.finfo(float).tiny)).sum())
    return right[rank:].T


def perturbation_basis(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, first_relu: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The two factors of the gradient-preserving perturbations of a batch.

    A perturbation ``E`` ``(B, d0)`` with ``W_0 e_m = 0`` leaves every pre-activation, so every
    pattern, loss vector and gradient above the first layer unchanged; the first layer's
    gradient then changes by ``(1/M) sum_m delta_0^m e_m^T``, which vanishes when
    ``E = C A N^T`` with ``C`` spanning the null space of ``[delta_0^1 ... delta_0^M]``
    and ``N`` that of ``W_0``. ``C`` is non-trivial once ``M`` exceeds the rank of the
    sensitivities (at most ``d_1``); a sample with an ExAN at the first layer is pinned
    (its row of ``C`` is zero), which is why lack of exclusivity matters.

    Returns
    -------
    sample_basis : numpy.ndarray
        ``C``, ``(B, q)``.
    input_basis : numpy.ndarray
        ``N``, ``(d0, r)``.
    """
    _, sensitivities = _sensitivities(network, inputs, labels, first_relu)
    return _null_space(sensitivities[0].T), _null_space(network.weights[0])


@dataclass
class Artifact:
    """A batch with the same average gradient as the true one.

    Attributes
    ----------
    inputs : numpy.ndarray
        ``(B, d0)``, inside the pixel box.
    largest_change : float
        ``max |artifact - truth|`` over all pixels.
    gradient_difference : float
        ``max |G(artifact) - G(truth)|``.
    dimension : int
        ``q * r``, the dimension of the perturbation subspace used.
    """

    inputs: np.ndarray
    largest_change: float
    gradient_difference: float
    dimension: int


def artifact_batch(
    network: DenseNetwork,
    inputs: np.ndarray,
    labels: np.ndarray,
    target: str | tuple[int, int] = "invert",
    bounds: tuple[float, float] = (0.0, 1.0),
    first_relu: bool = True,
) -> Artifact:
    """The most different batch, within the pixel box, whose average gradient equals the true one
    (Corollary 1).

    A linear programme over the subspace of :func:`perturbation_basis`:

    * ``target="invert"``: maximise ``sum (1 - 2 u) * e`` with ``u`` the pixel's position in
      the box, pushing every pixel towards the far end (a visibly obfuscated batch);
    * ``target=(m, p)``: maximise the change of pixel ``p`` of sample ``m`` towards the far end.

    Raises
    ------
    ValueError
        The batch admits no such perturbation (the subspace is trivial: ``M`` is not above
        the rank of the first layer's sensitivities, or ``W_0`` has full column rank).
    """
    _check_batch(network, inputs, labels)
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise check.GradcoreTypeError(
            f"bounds must be a (low, high) pair; got {check.describe(bounds)}"
        )
    check.number("bounds[0] (low)", bounds[0])
    check.number("bounds[1] (high)", bounds[1])
    if not bounds[0] < bounds[1]:
        raise check.GradcoreValueError(
            f"bounds must be (low, high) with low < high; got {tuple(bounds)}"
        )
    inputs = np.atleast_2d(np.asarray(inputs, dtype=np.float64))
    if inputs.min() < bounds[0] or inputs.max() > bounds[1]:
        raise check.GradcoreValueError(
            f"the inputs lie in [{inputs.min():g}, {inputs.max():g}], outside the pixel box "
            f"{tuple(bounds)}: no perturbation can keep them inside it"
        )
    if isinstance(target, str):
        check.one_of("target", target, ("invert",))
    else:
        if not isinstance(target, (tuple, list)) or len(target) != 2:
            raise check.GradcoreTypeError(
                f"target must be 'invert' or a (sample, pixel) pair; got {check.describe(target)}"
            )
        check.integer("target sample", target[0], low=0, high=len(inputs) - 1)
        check.integer("target pixel", target[1], low=0, high=inputs.shape[1] - 1)
    check.boolean("first_relu", first_relu)
    low, high = bounds
    _, sensitivities = _sensitivities(network, inputs, labels, first_relu)
    sample_basis, weight = (
        _null_space(sensitivities[0].T),
        np.asarray(network.weights[0], dtype=np.float64),
    )
    free_inputs = weight.shape[1] - np.linalg.matrix_rank(weight)
    dimension = sample_basis.shape[1] * free_inputs
    if dimension == 0:
        raise check.GradcoreValueError(
            f"no gradient-preserving perturbation: sensitivities leave {sample_basis.shape[1]} "
            f"free sample directions and W_0 {free_inputs} free input directions"
        )
    # E = C U with U (q, d0) and W_0 u_j = 0: sparse, so that photo-sized inputs stay cheap (the
    # dense kron(C, N) of the null-space coordinates has (M d0) x (q (d0 - d1)) entries).
    q, width = sample_basis.shape[1], inputs.shape[1]
    mapping = sparse.kron(sparse.csr_matrix(sample_basis), sparse.identity(width), format="csr")
    keep_null = sparse.kron(sparse.identity(q), sparse.csr_matrix(weight), format="csr")
    position = (inputs.ravel() - low) / (high - low)
    if isinstance(target, str):
        if target != "invert":
            raise check.GradcoreValueError(
                f"unknown target {target!r}: 'invert' or a (sample, pixel) pair"
            )
        direction = 1.0 - 2.0 * position
    else:
        sample, pixel = target
        direction = np.zeros_like(position)
        flat = sample * inputs.shape[1] + pixel
        direction[flat] = 1.0 if position[flat] <= 0.5 else -1.0
    objective = -(mapping.T @ direction)
    lower, upper = low - inputs.ravel(), high - inputs.ravel()
    solution = linprog(
        objective,
        A_ub=sparse.vstack([mapping, -mapping]),
        b_ub=np.concatenate([upper, -lower]),
        A_eq=keep_null,
        b_eq=np.zeros(keep_null.shape[0]),
        bounds=[(None, None)] * (q * width),
        method="highs",
    )
    if solution.status != 0:
        raise check.GradcoreValueError(f"the perturbation programme failed: {solution.message}")
    # The solver meets W_0 u_j = 0 to its tolerance only: project onto the null space exactly, then
    # shrink the step by the round-off this moved it across the box, so the gradient keeps to
    # round-off.
    directions = solution.x.reshape(q, width)
    directions = directions - np.linalg.lstsq(weight, weight @ directions.T, rcond=None)[0].T
    perturbation = sample_basis @ directions
    moved = inputs + perturbation
    outside = (
        np.maximum(moved - high, low - moved) > 1e-12
    )  # beyond round-off: shrink the step; within it: clip
    scale = 1.0
    if outside.any():
        room = np.where(perturbation > 0, high - inputs, low - inputs)[outside]
        scale = float(np.clip(room / perturbation[outside], 0.0, 1.0).min())
    artifact = np.clip(inputs + scale * perturbation, low, high)  # clips round-off only
    truth_gradient = dense.flatten_gradients(batch_gradients(network, inputs, labels, first_relu))
    artifact_gradient = dense.flatten_gradients(
        batch_gradients(network, artifact, labels, first_relu)
    )
    return Artifact(
        artifact,
        float(np.abs(artifact - inputs).max()),
        float(np.abs(artifact_gradient - truth_gradient).max()),
        dimension,
    )


def moved_share(
    artifact: np.ndarray,
    truth: np.ndarray,
    moved: float = 0.25,
    bounds: tuple[float, float] = (0.0, 1.0),
    axis=None,
):
    """Share of pixels an artifact batch moves by at least ``moved`` of the pixel range (Pan et
    al.'s 25%, Fig. 5)."""
    change = np.abs(
        np.asarray(artifact, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    ) / (bounds[1] - bounds[0])
    return (change >= moved).mean(axis=axis)


def split_head(model: nn.Sequential) -> int:
    """Index of the FCN head in ``trunk + head``: the first Linear after which only Linear and ReLU
    follow."""
    if not isinstance(model, nn.Sequential):
        raise check.GradcoreValueError(
            "the hybrid attack needs an nn.Sequential trunk + FCN head, got a "
            f"{type(model).__name__}"
        )
    modules = list(model)
    start = len(modules)
    while start > 0 and isinstance(modules[start - 1], (nn.Linear, nn.ReLU)):
        start -= 1
    while start < len(modules) and not isinstance(modules[start], nn.Linear):
        start += 1
    if start >= len(modules) or start == 0:
        raise check.GradcoreValueError(
            "no trunk + fully-connected head split found: the model must end on Linear/ReLU layers "
            "after a trunk"
        )
    return start
