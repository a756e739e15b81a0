"""Defenses a client applies to its gradient before sharing it.

Each defense is a function ``(gradient, generator, **options) -> gradient`` registered
in :data:`DEFENSES`; :func:`defend` looks one up by name. Defenses that must look at
the client's data (Soteria, CENSOR) additionally declare keyword-only *context*
arguments among ``model``, ``inputs``, ``labels`` and ``loss``; :func:`defend` passes
each of them only to the defenses that declare it, so the plain contract still holds
for the others and old callers keep working.

Registered here:

* ``none``, ``noise``, ``clip``, ``dp``: sharing as is, Gaussian noise, norm clipping
  and their DP-SGD composition (Abadi et al., 2016);
* ``withhold``: share zeros, i.e. skip the round (a control for defenses deployed only in
  some rounds: what is lost by not contributing at all);
* ``sparsify``: top-k sparsification, per layer (the "Sparsi" baseline of CENSOR, [15]);
* ``soteria``: prune the most input-revealing features of the representation feeding
  the last fully-connected layer (Sun et al., CVPR 2021);
* ``censor``: orthogonal-subspace sampling with loss-guided selection (Zhang et al.,
  NDSS 2025, Algorithm 1).
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import nn

from . import models
from . import validation as check
from .gradients import Gradient, loss_after_update, norm, stateless
from .registry import Registry

DEFENSES: Registry = Registry("defense")

#: The client-side context a defense may declare as keyword arguments.
CONTEXT = ("model", "inputs", "labels", "loss")


def context(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    loss: str | Callable = "cross_entropy",
) -> dict:
    """What a defense may see besides the gradient: the client's model, batch and loss.

    Only defenses that declare these arguments receive them (see :func:`defend`).
    """
    return {"model": model, "inputs": inputs, "labels": labels, "loss": loss}


def defend(
    gradient: Sequence[torch.Tensor],
    name: str,
    seed: int = 0,
    context: dict | None = None,
    **options,
) -> Gradient:
    """Apply the defense registered as ``name`` with a seeded generator.

    Parameters
    ----------
    gradient : sequence of torch.Tensor
        The client's gradient (or update), one tensor per trainable parameter.
    name : str
        Registry name in :data:`DEFENSES`.
    seed : int
        Seed of the defense's randomness.
    context : dict, optional
        What the client knows besides its gradient: ``model``, ``inputs``, ``labels``,
        ``loss``. Each entry reaches only defenses whose signature names it.
    **options
        The defense's own settings (``sigma``, ``bound``, ``keep``, ``trials``, ...).

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Before anything is computed: a gradient that is not a sequence of finite floating
        tensors of one dtype and device (NaN and infinite entries are refused, naming the
        entry and, with a model in the context, its parameter), one that does not fit the
        context's model, an unknown context key, or an option of the wrong type or range
        (the message names the option and the accepted range).
    """
    function = DEFENSES[name]
    check.integer("seed", seed)
    if context is not None and not isinstance(context, dict):
        raise check.GradcoreTypeError(
            f"context must be a dict with keys among {', '.join(CONTEXT)}; got "
            f"{check.describe(context)}"
        )
    unknown = set(context or {}) - set(CONTEXT)
    if unknown:
        raise check.GradcoreValueError(
            f"unknown defense context {sorted(unknown)}; known: {', '.join(CONTEXT)}"
        )
    model = (context or {}).get("model")
    if model is not None:
        check.trainable_parameters("the context's model", model)
    gradient = check.gradient(gradient, model)
    check_options(name, function, options)
    generator = torch.Generator().manual_seed(seed)
    accepted = inspect.signature(function).parameters
    passed = {key: value for key, value in (context or {}).items() if key in accepted}
    defended = tuple(function(gradient, generator, **passed, **options))
    # A defense must never turn a finite gradient into garbage (e.g. noise beyond the dtype's
    # range).
    if check.all_finite(defended):
        return defended
    for index, entry in enumerate(defended):
        if not bool(torch.isfinite(entry).all()):
            settings = ", ".join(
                f"{key}={value!r}" if isinstance(value, (int, float, str)) else key
                for key, value in options.items()
            )
            raise check.GradcoreValueError(
                f"the {name} defense ({settings or 'no options'}) produced non-finite values in "
                f"entry {index} (dtype {entry.dtype}): its options exceed what the gradient's "
                "dtype can hold"
            )
    return defended


def check_options(name: str, function: Callable, options: dict) -> None:
    """Refuse options the defense ``name`` does not have, misses, or gets with the wrong type or
    range."""
    check.options(f"defense {name!r}", function, options, skip=("gradient", "generator") + CONTEXT)


@dataclass(frozen=True)
class Privacy:
    """What a registered defense is as a differential-privacy mechanism (read by
    :mod:`gradcore.privacy`).

    A Gaussian mechanism clips what it releases to a bound and adds Gaussian noise; its noise
    multiplier ``z`` (noise standard deviation over the bound) is all an accountant needs.
    ``noise_multiplier`` maps the defense's options to ``z`` (0 for no noise, epsilon infinite);
    ``needs`` are the options it reads; ``clips`` says what the bound bounds (``"batch"``: the
    gradient of the client's whole batch, so a sample-level statement needs a batch of one; empty
    for a defense that adds no noise and so states nothing).
    A defense that is no Gaussian mechanism has ``noise_multiplier`` None and says ``why``.
    """

    noise_multiplier: Callable[[Mapping], float] | None = None
    needs: tuple = ()
    clips: str = "batch"
    why: str = ""


NO_NOISE = Privacy(lambda options: 0.0, clips="")


def declares(privacy: Privacy) -> Callable:
    """Attach ``privacy`` (:class:`Privacy`) to a registered defense: its noise multiplier is its
    own property."""

    def decorate(function: Callable) -> Callable:
        function.privacy = privacy
        return function

    return decorate


def privacy_of(name: str) -> Privacy:
    """A registered defense's :class:`Privacy`; an unknown name raises, naming the known ones."""
    return getattr(
        DEFENSES[name],
        "privacy",
        Privacy(
            why=f"the {name!r} defense is not a Gaussian mechanism; no epsilon can be stated for it"
        ),
    )


def _require(name: str, **context) -> None:
    missing = [key for key, value in context.items() if value is None]
    if missing:
        raise check.GradcoreValueError(
            f"the {name} defense needs the client's {', '.join(missing)}: share through "
            "gradcore.shared_gradient / Scenario.gradient, or pass defend(..., context={...})"
        )


@DEFENSES.register("none")
@declares(NO_NOISE)
def no_defense(gradient: Gradient, generator: torch.Generator) -> Gradient:
    """Share the gradient as it is."""
    return gradient


@DEFENSES.register("withhold")
def withhold(gradient: Gradient, generator: torch.Generator) -> Gradient:
    """Share zeros: the client contributes nothing this round (a control, not a defense one would
    deploy).

    The control for CENSOR's deployment in the first rounds (Zhang et al., NDSS 2025,
    Sec. III): a client that withholds its update in those rounds leaks nothing either, so
    what CENSOR adds is whatever its update is worth beyond not training at all.
    """
    return tuple(torch.zeros_like(g) for g in gradient)


@DEFENSES.register("noise")
@declares(
    Privacy(
        why="the noise defense has no differential-privacy guarantee: without clipping a "
        "gradient's sensitivity is unbounded, so no sigma bounds epsilon; use the dp defense "
        "(clip, then noise) or DP-SGD clients"
    )
)
def gaussian_noise(gradient: Gradient, generator: torch.Generator, sigma: float) -> Gradient:
    """Add i.i.d. N(0, sigma^2) to every entry: the noise half of DP-SGD (Abadi et al., 2016)."""
    if sigma < 0:
        raise check.GradcoreValueError(f"noise scale sigma must be non-negative, got {sigma}")
    return tuple(
        g + sigma * torch.randn(g.shape, generator=generator, dtype=g.dtype).to(g.device)
        for g in gradient
    )


def measured_norm(gradient: Sequence[torch.Tensor]) -> float:
    """Euclidean norm of the whole gradient in float64, free of overflow and underflow.

    Every entry is divided by one power of two near the largest magnitude (an exact
    operation) before squaring, so a gradient of entries near 1e30 or 1e-30 is measured
    as accurately as one near 1; float32 entries square exactly in float64. This is the
    measure :func:`clip` keeps at or below its bound.
    """
    entries = [g.detach().reshape(-1) for g in gradient if g.numel()]
    if not entries:
        return 0.0
    flat = torch.cat(entries).double()
    largest = flat.abs().max().item()
    if largest == 0.0:
        return 0.0
    if not math.isfinite(largest):
        return math.inf
    exponent = math.frexp(largest)[1]
    total = float(_times_power_of_two(flat, -exponent).pow(2).sum())
    try:
        return math.ldexp(math.sqrt(total), exponent)
    except OverflowError:  # beyond float64: longer than any bound
        return math.inf


@DEFENSES.register("clip")
@declares(NO_NOISE)
def clip(gradient: Gradient, generator: torch.Generator, bound: float) -> Gradient:
    """Rescale the whole gradient to Euclidean norm at most ``bound``: DP-SGD's other half.

    A gradient whose norm (:func:`measured_norm`) is at most ``bound`` is returned as it
    is, the same tensors, bit for bit. A longer one is multiplied by one factor so that
    its norm is ``bound`` up to rounding and never above it, at any scale and in float32
    as in float64.
    """
    if bound <= 0:
        raise check.GradcoreValueError(f"clip bound must be positive, got {bound}")
    total = measured_norm(gradient)
    if total <= bound:
        return tuple(gradient)
    dtype = gradient[0].dtype
    # The first factor is the one gradcore always computed, in the gradient's precision (so a
    # clipped float32 gradient keeps its bits where it already met the bound); rounding can
    # leave the product a few units above the bound, so the factor steps down until it is not.
    factor = bound / norm(gradient)
    if bool(torch.isfinite(factor)) and float(factor) >= torch.finfo(dtype).tiny:
        for _ in range(8):
            clipped = tuple(g * factor for g in gradient)
            if measured_norm(clipped) <= bound:
                return clipped
            factor = torch.nextafter(factor, torch.zeros_like(factor))
    # The gradient's own precision overflowed or underflowed (entries near 1e30 or 1e-30 in
    # float32): scale in float64, round once to the dtype, step down by the dtype's epsilon.
    exact = bound / total
    for _ in range(64):
        clipped = tuple((g.double() * exact).to(dtype) for g in gradient)
        if measured_norm(clipped) <= bound:
            return clipped
        exact *= 1.0 - torch.finfo(dtype).eps
    raise RuntimeError(
        f"clip could not bring a gradient of norm {total:g} within {bound:g}"
    )  # not reached: each step shrinks it


@DEFENSES.register("dp")
@declares(
    Privacy(
        lambda options: float(options["sigma"]) / float(options["bound"]), needs=("bound", "sigma")
    )
)
def clip_then_noise(
    gradient: Gradient, generator: torch.Generator, bound: float, sigma: float
) -> Gradient:
    """Clip to norm ``bound``, then add N(0, sigma^2): the order DP-SGD uses."""
    return gaussian_noise(clip(gradient, generator, bound), generator, sigma)


# ----------------------------------------------------------------------------------
# Exclusivity reduction: a defense that changes the model, not the gradient
# ----------------------------------------------------------------------------------


def exclusivity_reduction(model: nn.Sequential) -> nn.Sequential:
    """A copy of an MLP without the ReLU after its first hidden layer (Pan et al., USENIX Security
    2022, Sec. 6).

    With no activation there, no sample has an exclusively activated neuron in the first
    hidden layer, so a batch larger than that layer's width is in the secure state
    (Theorem 2). The weights are the model's (copied); the client then shares the plain
    gradient of the reduced model. Needs ``[Flatten...] Linear ReLU Linear ...`` with at
    least two hidden layers (without the second, removing the ReLU leaves a linear model).
    """
    if not isinstance(model, nn.Sequential):
        raise check.GradcoreValueError(
            f"exclusivity reduction needs an nn.Sequential MLP, got a {type(model).__name__}"
        )
    modules = list(model)
    first = next((i for i, m in enumerate(modules) if not isinstance(m, nn.Flatten)), len(modules))
    linears = sum(isinstance(m, nn.Linear) for m in modules)
    if (
        first + 1 >= len(modules)
        or not isinstance(modules[first], nn.Linear)
        or not isinstance(modules[first + 1], nn.ReLU)
    ):
        raise check.GradcoreValueError(
            "exclusivity reduction needs an MLP whose first Linear is followed by a ReLU"
        )
    if linears < 3:
        raise check.GradcoreValueError(
            "exclusivity reduction needs two hidden layers: without the second, removing the first "
            "ReLU leaves a linear model"
        )
    return nn.Sequential(*[copy.deepcopy(m) for i, m in enumerate(modules) if i != first + 1])


# ----------------------------------------------------------------------------------
# Top-k sparsification
# ----------------------------------------------------------------------------------


def kept_count(size: int, keep: float) -> int:
    """Entries top-k keeps of a tensor of ``size``: ``round(keep * size)``, at least one."""
    return max(1, min(size, int(round(keep * size))))


@DEFENSES.register("sparsify")
def sparsify(gradient: Gradient, generator: torch.Generator, keep: float) -> Gradient:
    """Keep the ``keep`` fraction of largest-magnitude entries of each layer, zero the rest.

    Gradient compression as a defense (Lin et al., 2018; the "Sparsi" baseline of CENSOR,
    Sec. V-A). Each tensor keeps exactly :func:`kept_count` entries; ties are broken by
    ``torch.topk``'s order, so the count is exact even for repeated values.
    """
    if not 0 < keep <= 1:
        raise check.GradcoreValueError(f"the kept fraction must lie in (0, 1], got {keep}")
    sparse = []
    for g in gradient:
        flat = g.reshape(-1)
        index = torch.topk(flat.abs(), kept_count(flat.numel(), keep)).indices
        mask = torch.zeros_like(flat, dtype=torch.bool)
        mask[index] = True
        sparse.append(torch.where(mask, flat, torch.zeros_like(flat)).reshape(g.shape))
    return tuple(sparse)


# ----------------------------------------------------------------------------------
# Soteria
# ----------------------------------------------------------------------------------


def last_linear(model: nn.Module) -> nn.Linear:
    """The model's last ``nn.Linear``: its input is the representation Soteria perturbs."""
    layer = models.output_layer(model)
    if layer is None:
        raise check.GradcoreValueError(
            "Soteria needs a model whose last layer is nn.Linear (the representation is its input)"
        )
    return layer


def representation_sensitivity(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """Per-feature ``|r_i| / ||d r_i / d x||`` summed over the batch (Sun et al., 2021, Sec. 4.2).

    ``r`` is the input of the last linear layer. The ratio approximates ``||d x / d r_i||``,
    how far the input moves per unit change of feature ``i``: the larger, the more the
    feature reveals of ``x``. A feature that does not depend on the input (zero
    Jacobian row) scores 0. Assumes each sample's representation depends on its own
    input only (no batch statistics in training mode).
    """
    captured = {}
    handle = last_linear(model).register_forward_hook(
        lambda module, args, output: captured.__setitem__("r", args[0])
    )
    try:
        x = inputs.detach().clone().requires_grad_(True)
        model(x)
    finally:
        handle.remove()
    representation = captured["r"].reshape(len(x), -1)
    features = representation.shape[1]
    # One vector-Jacobian product per feature, batched: basis[f] selects feature f of every sample.
    basis = torch.eye(features, dtype=representation.dtype, device=representation.device)
    basis = basis.unsqueeze(1).expand(features, len(x), features)
    (jacobian,) = torch.autograd.grad(representation, x, grad_outputs=basis, is_grads_batched=True)
    row_norms = jacobian.reshape(features, len(x), -1).norm(dim=2).T  # (B, F)
    magnitude = representation.detach().abs()
    ratio = torch.where(
        row_norms > 0,
        magnitude / torch.where(row_norms > 0, row_norms, torch.ones_like(row_norms)),
        torch.zeros_like(row_norms),
    )
    return ratio.sum(dim=0)


@DEFENSES.register("soteria")
def soteria(
    gradient: Gradient,
    generator: torch.Generator,
    prune: float,
    *,
    model: nn.Module | None = None,
    inputs: torch.Tensor | None = None,
) -> Gradient:
    """Soteria: prune the representation features that reveal the input most (Sun et al., CVPR
    2021).

    The gradient of the last linear layer's weight is ``dL/dz r^T``; zeroing the columns
    of the ``prune`` fraction of features with the largest :func:`representation_sensitivity`
    removes what the attacker would learn most from. Other tensors are shared as they are,
    as in the authors' code, which perturbs the defended layer only.
    """
    _require("soteria", model=model, inputs=inputs)
    if not 0 <= prune < 1:
        raise check.GradcoreValueError(f"the pruned fraction must lie in [0, 1), got {prune}")
    layer = last_linear(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    index = next((i for i, p in enumerate(trained) if p is layer.weight), None)
    if index is None:
        raise check.GradcoreValueError(
            "the last linear layer's weight is not trainable, so its gradient cannot be pruned"
        )
    sensitivity = representation_sensitivity(model, inputs)
    pruned = int(round(prune * len(sensitivity)))
    mask = torch.ones_like(sensitivity)
    if pruned:
        mask[torch.topk(sensitivity, pruned).indices] = 0
    defended = list(gradient)
    defended[index] = gradient[index] * mask.to(gradient[index].dtype).unsqueeze(0)
    return tuple(defended)


# ----------------------------------------------------------------------------------
# CENSOR
# ----------------------------------------------------------------------------------

PROJECTIONS = ("exact", "public")


def _power_of_two(tensor: torch.Tensor) -> int:
    """Exponent ``k`` such that ``tensor / 2**k`` has its largest entry in [0.5, 1), or 0 when no
    rescaling is needed.

    No rescaling (0) while the largest magnitude keeps the tensor's squares and their sum
    well inside its dtype's range: then CENSOR computes exactly what it always did. Outside
    it (entries near 1e30 or 1e-30 in float32), dividing by a power of two is exact and keeps
    every sum of squares finite and normal.
    """
    if tensor.numel() == 0:
        return 0
    largest = tensor.detach().abs().max().item()
    if largest == 0.0 or not math.isfinite(largest):
        return 0
    info = torch.finfo(tensor.dtype)
    if (
        math.sqrt(info.tiny / info.eps)
        <= largest
        <= math.sqrt(info.max / tensor.numel()) * info.eps
    ):
        return 0
    return math.frexp(largest)[1]


def _times_power_of_two(tensor: torch.Tensor, exponent: int) -> torch.Tensor:
    """``tensor * 2**exponent``, exact unless the result itself over- or underflows.

    Applied in steps of at most 2**100, each a power of two the dtype holds exactly; the
    steps move monotonically towards the result, so no intermediate over- or underflows.
    """
    while exponent:
        step = max(-100, min(100, exponent))
        tensor = tensor * (2.0**step)
        exponent -= step
    return tensor


def _projection(
    random: torch.Tensor, true: torch.Tensor, projection: str
) -> tuple[torch.Tensor, int]:
    """``(vector, k)`` with ``vector * 2**k`` the projection of :func:`orthogonal_projection`; ``k =
    0`` where it fits the dtype."""
    if projection not in PROJECTIONS:
        raise check.GradcoreValueError(
            f"unknown projection {projection!r}; known: {', '.join(PROJECTIONS)}"
        )
    exponent = _power_of_two(true)
    scaled = _times_power_of_two(true, -exponent)  # true itself when exponent is 0
    squared = (scaled * scaled).sum()
    if (
        projection == "public"
    ):  # u - <u, g>/||g|| g, u = r/||r||; with g = 2^k scaled its term is 2^k <u, s>/||s|| s
        unit = random / random.norm()
        if squared == 0:
            return unit, 0
        along = (unit * scaled).sum() / squared.sqrt() * scaled
        term = _times_power_of_two(along, exponent)
        if exponent == 0 or bool(torch.isfinite(term).all()):
            return unit - term, 0
        # Too large for the dtype: return the projection divided by 2^k, the same direction.
        return _times_power_of_two(unit, -exponent) - along, exponent
    if squared == 0:
        return random.clone(), 0
    return random - (random * scaled).sum() / squared * scaled, 0  # invariant to the scale of g


def orthogonal_projection(
    random: torch.Tensor, true: torch.Tensor, projection: str = "exact"
) -> torch.Tensor:
    """Remove from ``random`` its component along ``true`` (CENSOR, Algorithm 1, step 1).

    ``"exact"`` is the paper's ``r - <r, g>/<g, g> g``, orthogonal to ``g`` for every
    ``g != 0`` at any scale (the inner products are taken on ``g`` divided by a power of two,
    so they neither overflow nor underflow). ``"public"`` is what the released code computes
    (github.com/KaiyuanZh/censor, ``defense.py``, ``generate_orthogonal_gradient``): it
    scales the draw to unit norm, ``u = r / ||r||``, and subtracts ``<u, g>/||g|| g``,
    dividing by the norm where the paper divides by its square. Its inner product with ``g``
    is ``<u, g> (1 - ||g||)``: orthogonal only when ``||g|| = 1``. A zero ``g`` leaves the
    draw as is (scaled to unit norm for ``"public"``).
    """
    vector, exponent = _projection(random, true, projection)
    return _times_power_of_two(vector, exponent)


def _scaled_norm(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(n, k)`` with ``n * 2**k`` the Euclidean norm of ``tensor``, ``n`` computed without
    overflow or underflow."""
    exponent = _power_of_two(tensor)
    return _times_power_of_two(tensor, -exponent).norm(), exponent


def _rescale(tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``tensor`` rescaled to the Euclidean norm of ``like`` (zeros if ``tensor`` is zero), at any
    scale."""
    target, target_exponent = _scaled_norm(like)
    current, current_exponent = _scaled_norm(tensor)
    if not current > 0:
        return torch.zeros_like(tensor)
    return _times_power_of_two(tensor * (target / current), target_exponent - current_exponent)


def censor_candidate(
    gradient: Gradient,
    random: Sequence[torch.Tensor],
    projection: str = "exact",
    layerwise: bool = True,
) -> Gradient:
    """One CENSOR candidate: project ``random`` orthogonally to ``gradient`` and restore the norm.

    ``layerwise=True`` projects and rescales each layer on its own (Algorithm 1);
    ``False`` treats the whole gradient as one vector (the ablation of Table VII).
    """
    if layerwise:
        return tuple(
            _rescale(_projection(r, g, projection)[0], g) for r, g in zip(random, gradient)
        )
    flat_g = torch.cat([g.reshape(-1) for g in gradient])
    flat_r = torch.cat([r.reshape(-1) for r in random])
    flat = _rescale(_projection(flat_r, flat_g, projection)[0], flat_g)
    sizes = [g.numel() for g in gradient]
    return tuple(part.reshape(g.shape) for part, g in zip(torch.split(flat, sizes), gradient))


def _normal_like(gradient: Gradient, generator: torch.Generator) -> tuple:
    return tuple(
        torch.randn(g.shape, generator=generator, dtype=g.dtype).to(g.device) for g in gradient
    )


@DEFENSES.register("censor")
def censor(
    gradient: Gradient,
    generator: torch.Generator,
    trials: int = 20,
    lr: float = 0.1,
    projection: str = "exact",
    layerwise: bool = True,
    perturbations: Sequence[Sequence[torch.Tensor]] | None = None,
    *,
    model: nn.Module | None = None,
    inputs: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    loss: str | Callable | None = None,
) -> Gradient:
    """CENSOR: sample in the orthogonal complement, keep the candidate that lowers the loss most.

    Zhang et al., NDSS 2025, Algorithm 1. For each of ``trials`` candidates: draw a
    random gradient ``r ~ N(0, I)`` of the model's shape, project each layer onto the
    orthogonal complement of the true layer gradient, rescale it to the true layer's
    norm; then take one step ``theta - lr * candidate`` and measure the local loss. The
    candidate with the lowest loss is shared (the cold-posterior selection, M -> 0).

    Parameters
    ----------
    trials : int
        Candidates ``T`` (the paper's default: 20).
    lr : float
        Step size of the one-step update that scores a candidate.
    projection : {"exact", "public"}
        See :func:`orthogonal_projection`.
    layerwise : bool
        Per-layer projection and rescaling (the paper) or one global one (Table VII).
    perturbations : sequence of gradients, optional
        Use these instead of normal draws, one per trial (Sec. V-E: the gradient of a
        public image, which misleads the attacker towards that image).
    model, inputs, labels, loss
        The client's context, to score candidates.
    """
    _require("censor", model=model, inputs=inputs, labels=labels, loss=loss)
    if perturbations is not None:
        perturbations = [tuple(p) for p in perturbations]
        trials = len(perturbations)
    if trials < 1:
        raise check.GradcoreValueError(f"CENSOR needs at least one trial, got {trials}")
    # Scoring a candidate runs the model forward; in training mode batch norm would update
    # the running statistics of the client's model in place, once per trial.
    scorer = stateless(model)
    best, best_loss = None, math.inf
    for trial in range(trials):
        random = (
            perturbations[trial] if perturbations is not None else _normal_like(gradient, generator)
        )
        if len(random) != len(gradient) or any(
            r.shape != g.shape for r, g in zip(random, gradient)
        ):
            raise check.GradcoreValueError(
                "a perturbation must have the gradient's shapes, one tensor per trainable parameter"
            )
        candidate = censor_candidate(
            gradient,
            [r.to(g.device, g.dtype) for r, g in zip(random, gradient)],
            projection,
            layerwise,
        )
        value = loss_after_update(scorer, tuple(lr * c for c in candidate), inputs, labels, loss)
        if best is None or value < best_loss:
            best, best_loss = candidate, value
    return best
