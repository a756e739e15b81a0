"""What a defense does to the gradient it defends, and what it costs: the CENSOR chapters'
diagnostics.

Zhang et al. (NDSS 2025), Sec. V: CENSOR shares a gradient orthogonal to the true one, layer by
layer (:func:`gradient_effects`, :func:`layer_cosines`, :func:`norm_ratios`,
:func:`projection_cosines`: the exact projection against the released code's); with a public image's
gradient as its perturbation it leads the attacker to that image (:func:`misdirection`, Sec. V-E);
its cost beside the gradient's is
:func:`overhead` / :func:`overheads` (App. B). :func:`clipped_direction` says why clipping alone
leaves the direction an attack matches untouched (the what-protects chapter).
"""

from __future__ import annotations

import statistics
import time
from typing import Mapping, Sequence

import torch
from torch import nn

from .. import defenses
from .. import gradients as grads
from .. import metrics as quality
from .. import validation as check
from ..attacks import attack
from ..claims import Table
from ..specs import defense_spec


def gradient_effects(case, defenses: Mapping[str, Mapping], seed: int = 0) -> Table:
    """Per defense: cosine of the shared gradient to the true one, its norm ratio, and its worst
    layer cosine.

    The cosine is what the cosine + TV attack matches; a per-layer cosine near 0 means
    every layer's direction is gone, not just the whole vector's.
    """
    true = case.gradient()
    true_flat = grads.flatten(true)
    rows = []
    for label, spec in defenses.items():
        defense = defense_spec(spec)
        shared = case.gradient(defense.name, seed=seed, **defense.options)
        flat = grads.flatten(shared)
        cosine = float(flat @ true_flat / (flat.norm() * true_flat.norm()))
        layers = [abs(c) for c in layer_cosines(shared, true)]
        rows.append(
            [
                label,
                f"{cosine:.4f}",
                f"{max(layers):.1e}" if max(layers) < 1e-3 else f"{max(layers):.4f}",
                f"{float(flat.norm() / true_flat.norm()):.4f}",
            ]
        )
    return Table(
        f"What each defense shares ({case.name}, batch of {case.batch_size})",
        ["defense", "cosine to true gradient", "largest |cosine| of a layer", "norm / true norm"],
        rows,
    )


def misdirection(
    case,
    decoy_inputs: torch.Tensor,
    decoy_labels: torch.Tensor,
    attack_name: str,
    seed: int = 0,
    censor_lr: float = 0.1,
    **config,
) -> dict:
    """CENSOR with a public image's gradient as the perturbation (Sec. V-E, Fig. 10), then attacked.

    The client projects the decoy's gradient onto the orthogonal complement of its own
    and rescales it per layer; the attacker inverts what is shared. Returns the
    reconstruction, its MSE to the private batch and to the decoy, and the MSE of a gray
    guess to the decoy. The attacker is not told the labels: it infers them from the
    shared gradient. ``censor_lr`` is CENSOR's scoring step; ``config`` goes to the attack.
    """
    decoy_gradient = tuple(
        g.detach() for g in grads.batch_gradient(case.model, decoy_inputs, decoy_labels, case.loss)
    )
    shared = case.gradient("censor", seed=seed, perturbations=[decoy_gradient], lr=censor_lr)
    # The attacker reads the labels off the shared gradient (as GGL does), so it meets the decoy's
    # label.
    outcome = attack(
        attack_name,
        case.model,
        shared,
        shape=case.shape,
        batch_size=case.batch_size,
        labels=None,
        loss=case.loss,
        seed=seed,
        progress=False,
        **config,
    )
    reconstruction = outcome.reconstruction.clamp(0, 1)
    return {
        "reconstruction": reconstruction,
        "mse_private": float(
            quality.mse(outcome.aligned(case.inputs).clamp(0, 1), case.inputs).mean()
        ),
        "mse_decoy": float(
            quality.mse(
                reconstruction[quality.align(reconstruction, decoy_inputs)], decoy_inputs
            ).mean()
        ),
        "mse_gray_decoy": float(
            quality.mse(torch.full_like(decoy_inputs, 0.5), decoy_inputs).mean()
        ),
        "labels": outcome.labels,
    }


def layer_cosines(shared: Sequence[torch.Tensor], true: Sequence[torch.Tensor]) -> list[float]:
    """Cosine between each layer of a shared gradient and the true one (layers where both are
    non-zero)."""
    return [
        float((s * t).sum() / (s.norm() * t.norm()))
        for s, t in zip(shared, true)
        if s.norm() > 0 and t.norm() > 0
    ]


def clipped_direction(cases: Sequence, bound: float) -> tuple[float, int]:
    """What clipping to ``bound`` leaves of each case's gradient: the least layer cosine to the raw
    gradient, in float64, and on how many cases the bound acts at all (the raw gradient's norm above
    it).

    Clipping multiplies the whole gradient by ``min(1, bound / norm)``, so the cosine is 1 up to
    round-off: an attack that matches the direction faces the same objective as undefended.
    """
    least, active = 1.0, 0
    for case in cases:
        raw = [g.double() for g in case.gradient()]
        shared = [g.double() for g in case.gradient("clip", bound=bound)]
        least = min(least, *layer_cosines(shared, raw))
        active += int(float(grads.norm(raw)) > bound)
    return least, active


def gradient_norms(cases: Sequence) -> list[float]:
    """The Euclidean norm of each case's raw (undefended) gradient, over all its layers, in
    float64: what a fixed clipping bound is set against."""
    return [float(grads.norm([g.double() for g in case.gradient()])) for case in cases]


def acting_clip(cases: Sequence, fraction: float = 0.5) -> dict:
    """A clipping defense that acts on every case: the bound ``fraction`` of the least raw gradient
    norm among ``cases``.

    A fixed bound (CENSOR's baseline clips to norm 4, Sec. V-A) leaves every gradient whose norm
    is below it as it is; a claim about what clipping does is only tested where it clips.
    """
    check.number("fraction", fraction, low=0, high=1, low_open=True, high_open=True)
    return {"defense": "clip", "bound": fraction * min(gradient_norms(cases))}


def norm_ratios(shared: Sequence[torch.Tensor], true: Sequence[torch.Tensor]) -> list[float]:
    """``||shared_l|| / ||true_l||`` per layer (layers with a non-zero true gradient)."""
    return [float(s.norm() / t.norm()) for s, t in zip(shared, true) if t.norm() > 0]


def projection_cosines(gradient: Sequence[torch.Tensor], generator: torch.Generator) -> dict:
    """Cosine of each layer's projected draw to the true layer gradient, exact vs released code.

    Returns ``{"exact": [...], "public": [...], "norms": [...]}``, one entry per layer with
    a non-zero gradient: the exact projection is orthogonal to round-off, the released
    one only where the layer's norm happens to be 1.
    """
    result = {"exact": [], "public": [], "norms": []}
    for g in gradient:
        if g.norm() == 0:
            continue
        r = torch.randn(g.shape, generator=generator, dtype=g.dtype).to(g.device)
        for kind in defenses.PROJECTIONS:
            p = defenses.orthogonal_projection(r, g, kind)
            result[kind].append(((p * g).sum() / (p.norm() * g.norm())).item())
        result["norms"].append(g.norm().item())
    return result


def overhead(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    name: str,
    loss: str = "cross_entropy",
    repeats: int = 5,
    seed: int = 0,
    **options,
) -> float:
    """Time of the defense divided by the time of computing the gradient it defends.

    Both are the median of ``repeats`` wall-clock runs. Timings vary between runs and
    machines: print them only in a sanitised form (e.g. a ``wall ...`` line) and never
    assert more than a sanity check.
    """
    if repeats < 1:
        raise check.GradcoreValueError(f"repeats must be at least 1, got {repeats}")
    context = defenses.context(model, inputs, labels, loss)
    gradient_times, defense_times = [], []
    for repeat in range(repeats):
        start = time.perf_counter()
        gradient = tuple(g.detach() for g in grads.batch_gradient(model, inputs, labels, loss))
        gradient_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        defenses.defend(gradient, name, seed=seed + repeat, context=context, **options)
        defense_times.append(time.perf_counter() - start)
    return statistics.median(defense_times) / max(statistics.median(gradient_times), 1e-9)


def overheads(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    specs: dict,
    loss: str = "cross_entropy",
    repeats: int = 7,
    seed: int = 0,
) -> dict:
    """:func:`overhead` of several defenses, interleaved: ``{label: median defense time / median
    gradient time}``.

    ``specs`` maps a label to ``{"defense": name, **options}``. Each repeat times one
    gradient and then every defense in turn, so a slower moment of a shared machine hits
    all of them alike; the ratios between defenses (CENSOR vs Soteria, Zhang et al.,
    NDSS 2025, App. B) are then steadier than their absolute times.
    """
    if repeats < 1:
        raise check.GradcoreValueError(f"repeats must be at least 1, got {repeats}")
    context = defenses.context(model, inputs, labels, loss)
    read = {label: defense_spec(spec) for label, spec in specs.items()}
    gradient_times, defense_times = [], {label: [] for label in specs}
    for repeat in range(repeats):
        start = time.perf_counter()
        gradient = tuple(g.detach() for g in grads.batch_gradient(model, inputs, labels, loss))
        gradient_times.append(time.perf_counter() - start)
        for label, spec in read.items():
            start = time.perf_counter()
            defenses.defend(
                gradient, spec.name, seed=seed + repeat, context=context, **spec.options
            )
            defense_times[label].append(time.perf_counter() - start)
    base = max(statistics.median(gradient_times), 1e-9)
    return {label: statistics.median(times) / base for label, times in defense_times.items()}
