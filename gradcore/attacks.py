"""Gradient-inversion attacks, all behind one contract.

``attack(name, model, gradient, shape=..., ...)`` validates what the server observed,
runs the registered attack and returns an :class:`AttackResult`: the reconstruction,
the labels, and a per-iteration history of the objective (and of MSE/PSNR when the
private truth is passed, for plotting only; the attack never reads it).

Registered here:

* ``closed_form``: the exact single-sample leak through a biased first linear layer,
  ``x = dL/dW_i / dL/db_i`` (Zhu et al., 2019, Sec. 3; Geiping et al., 2020, Prop. 3.1
  for one layer).
* ``dlg``: Euclidean gradient matching over a batch of dummies, with L-BFGS as in Zhu
  et al. (2019), plain gradient descent as in the linear-unit demonstration, or Adam.
  Without given labels, the dummy labels are optimised jointly as soft labels.
* ``idlg``: labels read off the last layer's gradient (Zhao et al., 2020), then DLG.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn
from tqdm import tqdm

from . import gradients as grads
from . import metrics
from . import validation as check
from .registry import Registry

ATTACKS: Registry = Registry("attack")


@dataclass
class AttackResult:
    """What every attack returns.

    Attributes
    ----------
    reconstruction : torch.Tensor
        ``(B, *shape)`` recovered inputs, detached.
    labels : torch.Tensor or None
        Recovered (or given) labels, ``(B,)`` int64, or regression targets.
    history : dict of list
        ``iteration`` and ``objective`` always; ``mse`` and ``psnr`` (aligned to the
        truth) when the truth was passed.
    snapshots : list of (int, torch.Tensor)
        Reconstructions at chosen iterations, for convergence figures.
    attack : str
        Registry name of the attack.
    seconds : float
        Wall time; varies from run to run, so chapters print it only as ``wall ... s``.
    diverged : bool
        The objective became non-finite; the reconstruction is the last finite one.
    """

    reconstruction: torch.Tensor
    labels: torch.Tensor | None
    history: dict = field(default_factory=dict)
    snapshots: list = field(default_factory=list)
    attack: str = ""
    seconds: float = 0.0
    diverged: bool = False

    def score(self, truth: torch.Tensor, metric: str = "psnr") -> torch.Tensor:
        """Per-image metric against the truth, after aligning the batch order."""
        order = metrics.align(self.reconstruction, truth)
        return metrics.measure(metric, self.reconstruction[order], truth)

    def aligned(self, truth: torch.Tensor) -> torch.Tensor:
        """The reconstruction reordered to line up with ``truth``."""
        return self.reconstruction[metrics.align(self.reconstruction, truth)]

    def final(self, key: str) -> float:
        """Last recorded value of a history entry."""
        return self.history[key][-1]


@dataclass
class Observation:
    """What the honest-but-curious server knows when it attacks.

    The model and its weights, the shared gradient, the input shape and the batch
    size; optionally the labels (or regression targets) and the loss. ``truth`` is
    the private batch, used only to record quality over iterations.

    Everything is checked on construction, before any attack runs (see
    :mod:`gradcore.validation`): the gradient fits the model (one finite tensor per
    trainable parameter, of its shape, dtype and device, not zero everywhere), the shape
    fits the model (one forward pass of zeros), the batch size is a positive whole
    number, the labels fit the loss and the model's outputs (integer classes in range, or
    regression targets of the output's size), and the truth is a finite floating batch
    ``(batch_size, *shape)``.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        The first argument that does not fit, named, with what was expected and what was given.
    """

    model: nn.Module
    gradient: tuple
    shape: tuple
    batch_size: int = 1
    labels: torch.Tensor | None = None
    loss: str | Callable = "cross_entropy"
    truth: torch.Tensor | None = None
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        check.trainable_parameters("model", self.model)
        self.gradient = grads.validate(self.gradient, self.model)
        check.positive_int("batch size", self.batch_size)
        check.input_shape("shape", self.shape)
        self.shape = tuple(int(s) for s in self.shape)
        check.loss("loss", self.loss)
        check.integer("seed", self.seed)
        check.boolean("progress", self.progress)
        outputs = check.model_outputs(self.model, self.shape, "inputs")
        device = self.gradient[0].device
        if self.labels is not None:
            check.targets_for("labels", self.labels, self.batch_size, outputs, self.loss, device)
        if self.truth is not None:
            check.tensor("truth", self.truth, floating=True)
            if tuple(self.truth.shape) != (self.batch_size, *self.shape):
                raise check.GradcoreValueError(f"truth has shape {tuple(self.truth.shape)}, expected {(self.batch_size, *self.shape)} "
                                               "(batch_size samples of the given shape)")
            check.finite("truth", self.truth)


def attack(name: str, model: nn.Module, gradient: Sequence[torch.Tensor], *, shape: Sequence[int], batch_size: int = 1,
           labels: torch.Tensor | None = None, loss: str | Callable = "cross_entropy", truth: torch.Tensor | None = None,
           seed: int = 0, progress: bool = True, **config) -> AttackResult:
    """Run the attack registered as ``name`` on a shared gradient.

    Parameters
    ----------
    name : str
        ``closed_form``, ``dlg``, ``idlg``, or any later registered attack.
    model : torch.nn.Module
        The global model whose gradient was shared, in the mode the client used.
    gradient : sequence of torch.Tensor
        The shared gradient, one tensor per trainable parameter.
    shape : sequence of int
        Shape of one private input, e.g. ``(3, 32, 32)``.
    batch_size : int
        Number of private samples averaged into the gradient.
    labels : torch.Tensor, optional
        Known labels (or regression targets); inferred or optimised when absent.
    loss : str or callable
        The training loss, by name in :data:`gradcore.gradients.LOSSES`.
    truth : torch.Tensor, optional
        Private batch, used only to record MSE/PSNR in the history.
    seed : int
        Seed of the dummy initialisation.
    progress : bool
        Show a progress bar.
    **config
        Attack settings (iterations, optimiser, step size, ...).

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Before the attack starts: an unknown or missing setting, a setting of the wrong type
        or range (``iterations=-5``, ``lr="0.1"``), or an observation that does not fit the
        model (see :class:`Observation`).
    """
    attack_function = ATTACKS[name]
    check.options(f"attack {name!r}", attack_function, config, skip=("observation",))
    observation = Observation(model, gradient, shape, batch_size, labels, loss, truth, seed, progress)
    start = time.perf_counter()
    result = attack_function(observation, **config)
    result.seconds = time.perf_counter() - start
    result.attack = name
    return result


def _recorder(observation: Observation, history: dict) -> Callable[[int, float, torch.Tensor], None]:
    def record(iteration: int, objective: float, reconstruction: torch.Tensor) -> None:
        history["iteration"].append(iteration)
        history["objective"].append(objective)
        if observation.truth is not None:
            aligned = reconstruction[metrics.align(reconstruction, observation.truth)]
            history["mse"].append(metrics.mse(aligned, observation.truth).mean().item())
            history["psnr"].append(metrics.psnr(aligned, observation.truth).mean().item())

    return record


def _empty_history(observation: Observation) -> dict:
    keys = ["iteration", "objective"] + (["mse", "psnr"] if observation.truth is not None else [])
    return {key: [] for key in keys}


# ----------------------------------------------------------------------------------
# Closed form
# ----------------------------------------------------------------------------------


def _first_linear(model: nn.Module) -> nn.Linear:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            break
    raise check.GradcoreValueError("the closed form needs a model whose first weighted layer is fully connected")


def _parameter_index(model: nn.Module, parameter: torch.Tensor) -> int:
    for index, candidate in enumerate(grads.trainable(model)):
        if candidate is parameter:
            return index
    raise check.GradcoreValueError("that layer's parameters are not trainable, so the gradient holds nothing for them")


@ATTACKS.register("closed_form")
def closed_form(observation: Observation) -> AttackResult:
    """Exact input of a single sample from a biased fully-connected first layer.

    For ``z = W x + b`` and one sample, ``dL/dW_i = (dL/dz_i) x`` and ``dL/db_i = dL/dz_i``,
    so any row with ``dL/db_i != 0`` gives ``x = (dL/dW_i) / (dL/db_i)`` with no
    optimisation (Zhu et al., 2019; Geiping et al., 2020, Prop. 3.1). The row with the
    largest ``|dL/db_i|`` is used, as the best conditioned.
    """
    if observation.batch_size != 1:
        raise check.GradcoreValueError("the closed form recovers a single sample; a batch of "
                                       f"{observation.batch_size} yields only a mixture of its inputs (use 'dlg')")
    layer = _first_linear(observation.model)
    if layer.bias is None:
        raise check.GradcoreValueError("the closed form needs a bias in the first fully-connected layer")
    weight_gradient = observation.gradient[_parameter_index(observation.model, layer.weight)]
    bias_gradient = observation.gradient[_parameter_index(observation.model, layer.bias)]
    row = int(torch.argmax(bias_gradient.abs()))
    if bias_gradient[row] == 0:
        raise check.GradcoreValueError("blocked: every row of the first layer's bias gradient is zero, so no row can be divided out")
    reconstruction = (weight_gradient[row] / bias_gradient[row]).reshape(1, *observation.shape)
    history = _empty_history(observation)
    _recorder(observation, history)(0, 0.0, reconstruction)
    return AttackResult(reconstruction.detach(), observation.labels, history)


# ----------------------------------------------------------------------------------
# Label inference (iDLG)
# ----------------------------------------------------------------------------------


def _last_linear(model: nn.Module) -> nn.Linear:
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise check.GradcoreValueError("label inference needs a fully-connected output layer")
    return layers[-1]


def infer_labels(model: nn.Module, gradient: Sequence[torch.Tensor], batch_size: int = 1) -> torch.Tensor:
    """Labels from the output layer's weight gradient (Zhao et al., 2020, iDLG).

    With cross-entropy and one sample of class ``c``, row ``i`` of ``dL/dW`` is
    ``(p_i - [i = c]) a`` where ``a`` is the layer's input. When ``a`` is
    non-negative (sigmoid or ReLU features), only row ``c`` has a negative sum, so the
    label is the arg-min of the row sums: exact, not a guess. For a batch this is a
    heuristic: the ``batch_size`` most negative rows, a label possibly repeated.
    """
    gradient = check.gradient(gradient, model)
    check.positive_int("batch_size", batch_size)
    layer = _last_linear(model)
    weight_gradient = tuple(gradient)[_parameter_index(model, layer.weight)]
    row_sums = weight_gradient.sum(dim=1)
    if batch_size == 1:
        return torch.argmin(row_sums).reshape(1)
    order = torch.argsort(row_sums)
    negative = order[row_sums[order] < 0]
    picks = negative[:batch_size] if len(negative) else order[:1]
    return picks.repeat((batch_size + len(picks) - 1) // len(picks))[:batch_size].sort().values


# ----------------------------------------------------------------------------------
# Gradient matching (DLG)
# ----------------------------------------------------------------------------------

INITIALISERS: Registry = Registry("initialisation")
INITIALISERS.add("randn", lambda shape, generator: torch.randn(shape, generator=generator))
INITIALISERS.add("rand", lambda shape, generator: torch.rand(shape, generator=generator))
INITIALISERS.add("gray", lambda shape, generator: torch.full(shape, 0.5))

OPTIMISERS: Registry = Registry("optimiser")
OPTIMISERS.add("lbfgs", lambda params, lr, max_iter=20, line_search=None: torch.optim.LBFGS(
    params, lr=lr, max_iter=max_iter, history_size=100, line_search_fn=line_search))
OPTIMISERS.add("gd", lambda params, lr, **_: torch.optim.SGD(params, lr=lr))
OPTIMISERS.add("adam", lambda params, lr, **_: torch.optim.Adam(params, lr=lr))


def euclidean_distance(candidate: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """``sum_l ||g_l(x_hat) - g_l(x)||^2``: DLG's matching objective (Zhu et al., 2019, Eq. 4)."""
    return sum((c - t).pow(2).sum() for c, t in zip(candidate, target))


@ATTACKS.register("dlg")
def dlg(observation: Observation, optimiser: str = "lbfgs", iterations: int = 300, lr: float = 1.0, init: str = "randn",
        max_iter: int = 20, line_search: str | None = None, snapshots: Sequence[int] = (), record_every: int = 1) -> AttackResult:
    """Deep Leakage from Gradients: match the shared gradient with dummy inputs.

    Minimises :func:`euclidean_distance` over a batch of dummy inputs (and, without
    known labels, dummy soft labels) jointly (Zhu et al., 2019, Algorithm 1).

    Parameters
    ----------
    optimiser : {"lbfgs", "gd", "adam"}
        L-BFGS as in the paper; ``gd`` is plain gradient descent with step ``lr``.
    iterations : int
        Optimiser steps (for L-BFGS each step makes up to ``max_iter`` evaluations).
    lr : float
        Step size.
    init : {"randn", "rand", "gray"}
        Dummy initialisation.
    snapshots : sequence of int
        Iterations at which to keep a copy of the reconstruction (0 is the start).
    record_every : int
        Record history every so many iterations.
    """
    generator = torch.Generator().manual_seed(observation.seed)
    batch = (observation.batch_size, *observation.shape)
    # Dummies live in the model's precision and on its device; drawn on the CPU so seeds repeat everywhere.
    dtype, device = observation.gradient[0].dtype, observation.gradient[0].device
    dummy = INITIALISERS[init](batch, generator).to(device, dtype).requires_grad_(True)
    variables = [dummy]
    learn_labels = observation.labels is None
    if learn_labels:
        if observation.loss != "cross_entropy":
            raise check.GradcoreValueError("labels can only be learned for a cross-entropy loss; pass the regression targets")
        num_classes = _last_linear(observation.model).out_features
        label_logits = torch.randn((observation.batch_size, num_classes), generator=generator).to(device, dtype).requires_grad_(True)
        variables.append(label_logits)
    model, target, loss = observation.model, observation.gradient, observation.loss
    options = {"max_iter": max_iter, "line_search": line_search} if optimiser == "lbfgs" else {}
    optimizer = OPTIMISERS[optimiser](variables, lr, **options)

    def current_labels():
        return torch.softmax(label_logits, dim=-1) if learn_labels else observation.labels

    def closure():
        optimizer.zero_grad()
        candidate = grads.batch_gradient(model, dummy, current_labels(), loss, create_graph=True)
        distance = euclidean_distance(candidate, target)
        distance.backward()
        return distance

    def objective_at(inputs: torch.Tensor) -> float:
        return euclidean_distance(grads.batch_gradient(model, inputs, current_labels().detach(), loss), target).item()

    result = optimise(observation, dummy, optimizer, closure, objective_at, iterations, f"dlg ({optimiser})", snapshots, record_every)
    labels = current_labels().detach()
    result.labels = labels.argmax(dim=-1) if learn_labels else labels
    return result


def optimise(observation: Observation, dummy: torch.Tensor, optimizer: torch.optim.Optimizer, closure: Callable[[], torch.Tensor],
             objective_at: Callable[[torch.Tensor], float], iterations: int, description: str, snapshots: Sequence[int] = (),
             record_every: int = 1) -> AttackResult:
    """The loop every gradient-matching attack shares: step, stop on divergence, record, keep snapshots.

    ``closure`` is what ``optimizer.step`` evaluates; ``objective_at`` scores a detached
    iterate for the history (``optimizer.step`` returns the objective *before* its update,
    so the recorded iterate is evaluated itself). On a non-finite objective or dummy the
    loop stops and the last finite reconstruction is returned with ``diverged=True``.
    The result's labels are the observation's; the caller replaces them if it learns its own.

    L-BFGS can stall: its line search fails, no variable moves, and every later step
    repeats the same computation (no movement leaves its curvature history and step
    size as they were), spending up to ``max_iter`` evaluations each. After two
    consecutive steps that leave every variable bitwise unchanged the loop stops and
    records the remaining iterations with that fixed point, exactly what running them
    would have recorded.
    """
    history, kept = _empty_history(observation), []
    record = _recorder(observation, history)
    wanted = set(snapshots)
    last_good, diverged = dummy.detach().clone(), False
    record(0, objective_at(last_good), last_good)
    if 0 in wanted:
        kept.append((0, last_good.clone()))
    variables = [p for group in optimizer.param_groups for p in group["params"]]
    detect_stall, unmoved = type(optimizer) is torch.optim.LBFGS, 0  # a subclass may step differently
    progress = tqdm(range(1, iterations + 1), desc=description, disable=not observation.progress, file=sys.stderr,
                    mininterval=2.0, ncols=80)
    for iteration in progress:
        before = [v.detach().clone() for v in variables] if detect_stall else []
        objective = optimizer.step(closure)
        if not torch.isfinite(objective) or not torch.isfinite(dummy).all():
            diverged = True
            break
        unmoved = unmoved + 1 if before and all(torch.equal(b, v) for b, v in zip(before, variables)) else 0
        last_good = dummy.detach().clone()
        stalled = unmoved >= 2
        value = None
        for step in range(iteration, (iterations if stalled else iteration) + 1):
            if step % record_every == 0 or step == iterations:
                value = objective_at(last_good) if value is None else value  # the same iterate every time
                record(step, value, last_good)
            if step in wanted:
                kept.append((step, last_good.clone()))
        if stalled:
            progress.update(iterations - iteration)
            break
    progress.close()
    return AttackResult(last_good, observation.labels, history, kept, diverged=diverged)


@ATTACKS.register("idlg")
def idlg(observation: Observation, **config) -> AttackResult:
    """iDLG: infer the labels from the output layer (Zhao et al., 2020), then run DLG with them fixed."""
    if observation.labels is None:
        observation.labels = infer_labels(observation.model, observation.gradient, observation.batch_size)
    return dlg(observation, **config)
