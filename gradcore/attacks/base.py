"""The contract every attack keeps: what the server observed in, one result type out.

``attack(name, model, gradient, shape=..., ...)`` validates what the server observed
(:class:`Observation`), runs the attack registered as ``name`` in :data:`ATTACKS` and
returns an :class:`AttackResult`: the reconstruction, the labels, and a per-iteration
history of the objective (and of MSE/PSNR when the private truth is passed, for plotting
only; the attack never reads it).

An attack is a function ``(observation, **settings) -> AttackResult`` registered with
``@ATTACKS.register("name")``. One that computes its answer at once returns
:meth:`AttackResult.one_shot`; one that iterates hands :func:`optimise` an iterate (a
:class:`Steps`) and gets the loop every attack shares: divergence check, stall check,
history, snapshots and progress bar.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn
from tqdm import tqdm

from .. import gradients as grads
from .. import metrics, models
from .. import validation as check
from ..registry import Registry

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

    @classmethod
    def one_shot(
        cls,
        observation: "Observation",
        reconstruction: torch.Tensor,
        labels: torch.Tensor | None = None,
        objective: float = 0.0,
        **fields,
    ) -> "AttackResult":
        """The result of an attack that computes its answer once (a closed form, no iterations).

        The history holds one record, at iteration 0, of ``objective`` (what the attack
        minimised or checked, 0 for an exact formula) and, given the truth, of its quality.
        """
        reconstruction = reconstruction.detach()
        history = empty_history(observation)
        recorder(observation, history)(0, objective, reconstruction)
        return cls(reconstruction, labels, history, **fields)


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
        grads.check_loss("loss", self.loss)
        check.integer("seed", self.seed)
        check.boolean("progress", self.progress)
        outputs = check.model_outputs(self.model, self.shape, "inputs")
        device = self.gradient[0].device
        if self.labels is not None:
            check.targets_for("labels", self.labels, self.batch_size, outputs, self.loss, device)
        if self.truth is not None:
            check.tensor("truth", self.truth, floating=True)
            if tuple(self.truth.shape) != (self.batch_size, *self.shape):
                raise check.GradcoreValueError(
                    f"truth has shape {tuple(self.truth.shape)}, expected "
                    f"{(self.batch_size, *self.shape)} (batch_size samples of the given shape)"
                )
            check.finite("truth", self.truth)


def attack(
    name: str,
    model: nn.Module,
    gradient: Sequence[torch.Tensor],
    *,
    shape: Sequence[int],
    batch_size: int = 1,
    labels: torch.Tensor | None = None,
    loss: str | Callable = "cross_entropy",
    truth: torch.Tensor | None = None,
    seed: int = 0,
    progress: bool = True,
    **config,
) -> AttackResult:
    """Run the attack registered as ``name`` on a shared gradient.

    Parameters
    ----------
    name : str
        Any name in :data:`ATTACKS` (``gradcore.ATTACKS.names()`` lists them).
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
    observation = Observation(
        model, gradient, shape, batch_size, labels, loss, truth, seed, progress
    )
    start = time.perf_counter()
    result = attack_function(observation, **config)
    result.seconds = time.perf_counter() - start
    result.attack = name
    return result


def recorder(observation: Observation, history: dict) -> Callable[[int, float, torch.Tensor], None]:
    """``record(iteration, objective, reconstruction)``: append one entry to ``history``.

    With the observation's truth, also the MSE and PSNR of the reconstruction after
    aligning its batch order to the truth (:func:`gradcore.metrics.align`).
    """

    def record(iteration: int, objective: float, reconstruction: torch.Tensor) -> None:
        history["iteration"].append(iteration)
        history["objective"].append(objective)
        if observation.truth is not None:
            aligned = reconstruction[metrics.align(reconstruction, observation.truth)]
            history["mse"].append(metrics.mse(aligned, observation.truth).mean().item())
            history["psnr"].append(metrics.psnr(aligned, observation.truth).mean().item())

    return record


def empty_history(observation: Observation) -> dict:
    """The history an attack fills: ``iteration`` and ``objective``, plus ``mse`` and ``psnr`` given
    the truth."""
    keys = ["iteration", "objective"] + (["mse", "psnr"] if observation.truth is not None else [])
    return {key: [] for key in keys}


# ----------------------------------------------------------------------------------
# What attacks start from and step with
# ----------------------------------------------------------------------------------

INITIALISERS: Registry = Registry("initialisation")
INITIALISERS.add("randn", lambda shape, generator: torch.randn(shape, generator=generator))
INITIALISERS.add("rand", lambda shape, generator: torch.rand(shape, generator=generator))
INITIALISERS.add("gray", lambda shape, generator: torch.full(shape, 0.5))

OPTIMISERS: Registry = Registry("optimiser")
OPTIMISERS.add(
    "lbfgs",
    lambda params, lr, max_iter=20, line_search=None: torch.optim.LBFGS(
        params, lr=lr, max_iter=max_iter, history_size=100, line_search_fn=line_search
    ),
)
OPTIMISERS.add("gd", lambda params, lr, **_: torch.optim.SGD(params, lr=lr))
OPTIMISERS.add("adam", lambda params, lr, **_: torch.optim.Adam(params, lr=lr))


def first_linear(model: nn.Module) -> nn.Linear:
    """The model's first weighted layer, which must be fully connected (the closed forms read
    it)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            break
    raise check.AttackRefused(
        "the closed form needs a model whose first weighted layer is fully connected"
    )


def last_linear(model: nn.Module, purpose: str = "label inference") -> nn.Linear:
    """The model's fully-connected output layer (label inference and soft labels read it); an attack
    refuses
    a model without one, saying for what (``purpose``) it needed it."""
    layer = models.output_layer(model)
    if layer is None:
        raise check.AttackRefused(f"{purpose} needs a fully-connected output layer")
    return layer


# ----------------------------------------------------------------------------------
# The one optimisation loop
# ----------------------------------------------------------------------------------


class Steps:
    """An attack's iterate, as :func:`optimise` drives it.

    Subclasses say how to take one step (:meth:`step`, returning the objective it saw,
    for the divergence check), what the current reconstruction is (:meth:`current`, a
    detached copy) and what the objective is there (:meth:`objective`, for the history).
    ``variables`` are compared before and after a step when ``can_stall``.
    """

    variables: list = []
    can_stall: bool = False

    def step(self) -> torch.Tensor:
        raise NotImplementedError

    def current(self) -> torch.Tensor:
        raise NotImplementedError

    def objective(self, current: torch.Tensor) -> float:
        raise NotImplementedError


class OptimiserSteps(Steps):
    """Steps of a torch optimiser on a closure (DLG, regularised matching, feature matching).

    ``dummy`` is the optimised tensor; ``view`` maps it to the reconstruction (identity,
    or e.g. a sigmoid for a box-constrained parameterisation); ``objective_at`` scores a
    detached reconstruction (``optimizer.step`` returns the objective *before* its
    update, so the recorded iterate is evaluated itself).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], torch.Tensor],
        dummy: torch.Tensor,
        objective_at: Callable[[torch.Tensor], float],
        view: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ):
        self.optimizer, self.closure, self.dummy, self.objective_at = (
            optimizer,
            closure,
            dummy,
            objective_at,
        )
        self.view = view
        self.variables = [p for group in optimizer.param_groups for p in group["params"]]
        self.can_stall = type(optimizer) is torch.optim.LBFGS  # a subclass may step differently

    def step(self) -> torch.Tensor:
        return self.optimizer.step(self.closure)

    def current(self) -> torch.Tensor:
        dummy = self.dummy.detach().clone()
        if self.view is None:
            return dummy
        with torch.no_grad():
            return self.view(dummy)

    def objective(self, current: torch.Tensor) -> float:
        return self.objective_at(current)


def optimise(
    observation: Observation,
    steps: Steps,
    iterations: int,
    description: str | None = None,
    snapshots: Sequence[int] = (),
    record_every: int = 1,
) -> AttackResult:
    """The loop every iterative attack shares: step, stop on divergence or a stall, record, keep
    snapshots.

    Records iteration 0 (the initialisation), then every ``record_every`` iterations and
    the last. On a non-finite objective or reconstruction the loop stops and the last
    finite reconstruction is returned with ``diverged=True``. The result's labels are the
    observation's; the caller replaces them if it learns its own. ``description`` labels
    the progress bar (none without one, or when the observation asks for none).

    L-BFGS can stall: its line search fails, no variable moves, and every later step
    repeats the same computation (no movement leaves its curvature history and step
    size as they were), spending up to ``max_iter`` evaluations each. After two
    consecutive steps that leave every variable bitwise unchanged the loop stops and
    records the remaining iterations with that fixed point, exactly what running them
    would have recorded.
    """
    history, kept = empty_history(observation), []
    record = recorder(observation, history)
    wanted = set(snapshots)
    last_good, diverged = steps.current(), False
    record(0, steps.objective(last_good), last_good)
    if 0 in wanted:
        kept.append((0, last_good.clone()))
    unmoved = 0
    # A bar updated by hand, not iterated: tqdm's iterator keeps its count locally, so a bar left by
    # a break (a converged run) would show a stale count (it ended at 87% on a finished run).
    progress = tqdm(
        total=iterations,
        desc=description,
        disable=description is None or not observation.progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    )
    for iteration in range(1, iterations + 1):
        before = [v.detach().clone() for v in steps.variables] if steps.can_stall else []
        objective = steps.step()
        candidate = steps.current()
        if not torch.isfinite(objective).all() or not torch.isfinite(candidate).all():
            diverged = True
            # The bar stops short of 100%: say why, so a reader does not take it for a cut-off run.
            # (Where it stopped is in the bar's count, which the output check reads loosely: it
            # moves with the CPU.)
            progress.set_postfix_str("diverged, last finite iterate kept", refresh=False)
            break
        progress.update(1)
        unmoved = (
            unmoved + 1
            if before and all(torch.equal(b, v) for b, v in zip(before, steps.variables))
            else 0
        )
        last_good = candidate
        stalled = unmoved >= 2
        value = None
        for step in range(iteration, (iterations if stalled else iteration) + 1):
            if step % record_every == 0 or step == iterations:
                value = (
                    steps.objective(last_good) if value is None else value
                )  # the same iterate every time
                record(step, value, last_good)
            if step in wanted:
                kept.append((step, last_good.clone()))
        if stalled:  # converged: the remaining steps would not move it, so the run is complete
            progress.update(iterations - iteration)
            break
    progress.close()
    return AttackResult(last_good, observation.labels, history, kept, diverged=diverged)
