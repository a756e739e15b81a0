"""The minimal-structure chapter's experiments: sweeps, surveys, galleries and the race.

Each runs the analysis of :mod:`gradcore.analysis.minimal` or a registered attack over a chapter's
settings (Qian, Nassar and Hansen, "Minimal Model Structure Analysis for Input
Reconstruction in Federated Learning") and returns what the chapter prints or plots.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from .. import attacks, client, models
from .. import validation as check
from ..analysis import minimal
from ..claims import Table
from ..scenarios import scenario, scenarios


def cnn_case(dataset, seed: int = 0, **options):
    """A one-instance :class:`gradcore.experiments.Scenario` on a seeded float64
    :func:`gradcore.models.conv_mlp`."""
    with models.seeded(seed):
        model = models.conv_mlp(dataset.shape, dataset.num_classes, **options)
    return scenario(dataset, model, 1, seed=seed, dtype=torch.float64)


def batch_sweep(
    dataset,
    batch_sizes: Sequence[int],
    regularisers: Sequence[str],
    model_options: dict,
    attack_options: dict,
    weights: dict,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """``{regulariser: {B: AttackResult}}``: the same seeded batch and model for every regulariser.

    ``weights`` maps a regulariser to its ``lambda``; the model is ``models.build("mlp",
    ...)`` with ``model_options``, in float64 so round-off never decides a comparison.
    """
    runs: dict = {name: {} for name in regularisers}
    cases = {
        size: scenario(dataset, "mlp", size, seed=seed, dtype=torch.float64, **model_options)
        for size in batch_sizes
    }
    jobs = [(name, size) for name in regularisers for size in batch_sizes]
    for name, size in tqdm(
        jobs,
        desc=f"batch sweep ({dataset.name})",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    ):
        runs[name][size] = cases[size].attack(
            "regularised_matching",
            regulariser=name,
            weight=weights.get(name, 0.0),
            seed=seed,
            **attack_options,
        )
    return runs


@dataclass
class SaturationSweep:
    """Result of :func:`saturation_sweep`: per initial dummy scale, one entry per draw."""

    shares: dict  # {scale: [share of sigmoid inputs outside the threshold at the start]}
    final_mse: dict  # {scale: [the attack's final MSE]}

    def count(self, scale: float, below: float | None = None, above: float | None = None) -> int:
        """Draws at ``scale`` whose final MSE is at most ``below`` (or at least ``above``)."""
        values = np.asarray(self.final_mse[scale])
        return int((values <= below).sum() if below is not None else (values >= above).sum())

    def rows(self) -> list[list]:
        """Per scale: median saturated share, median and largest final MSE."""
        return [
            [
                scale,
                float(np.median(self.shares[scale])),
                float(np.median(self.final_mse[scale])),
                float(np.max(self.final_mse[scale])),
            ]
            for scale in self.shares
        ]


def saturation_sweep(
    dataset,
    scales: Sequence[float],
    draws: int,
    model_options: dict,
    attack_options: dict,
    threshold: float = 4.0,
    seed: int = 0,
    progress: bool = True,
) -> SaturationSweep:
    """Sigmoid saturation as a failure mode (Qian et al., Sec. 2.2), over random draws.

    Each draw is a different digit on a fresh float64 ``mlp`` (``model_options``), seed
    ``seed * 1000 + draw``, attacked by ``regularised_matching`` without a regulariser
    (``attack_options``) from a standard-normal dummy times each of ``scales``. The share of
    hidden pre-activations outside ``[-threshold, threshold]`` is measured on that very start.
    """
    check.positive_int("draws", draws)
    cases = scenarios(
        dataset,
        "mlp",
        1,
        count=draws,
        seed=seed * 1000,
        distinct=True,
        dtype=torch.float64,
        **model_options,
    )
    shares: dict = {scale: [] for scale in scales}
    final: dict = {scale: [] for scale in scales}
    jobs = [(scale, index) for scale in scales for index in range(draws)]
    for scale, index in tqdm(
        jobs,
        desc="saturation sweep",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    ):
        case, case_seed = cases[index], seed * 1000 + index
        start = (
            attacks.INITIALISERS["randn"](
                (1, *dataset.shape), torch.Generator().manual_seed(case_seed)
            )
            * scale
        )
        shares[scale].append(minimal.saturation(case.model, start.to(torch.float64), threshold))
        result = case.attack(
            "regularised_matching",
            regulariser="none",
            seed=case_seed,
            init_scale=scale,
            **attack_options,
        )
        final[scale].append(result.final("mse"))
    return SaturationSweep(shares, final)


def weight_sweep(
    dataset,
    batch_size: int,
    regularisers: Sequence[str],
    weights: Sequence[float],
    model_options: dict,
    attack_options: dict,
    seed: int = 0,
    known: dict | None = None,
) -> dict:
    """``{regulariser: {lambda: final MSE}}`` on one seeded batch and model (Qian et al., Sec. 3).

    The source gives no ``lambda``; before a regulariser is said not to help, it is tried at
    several weights on the same batch, model and start (the same as :func:`batch_sweep`'s for
    this batch size and seed). ``known`` (``{regulariser: {lambda: final MSE}}``) holds runs
    already made on that case, which are taken as they are instead of being repeated.
    """
    known = known or {}
    case = scenario(dataset, "mlp", batch_size, seed=seed, dtype=torch.float64, **model_options)

    def final(name, weight):
        if weight in known.get(name, {}):
            return known[name][weight]
        return case.attack(
            "regularised_matching", regulariser=name, weight=weight, seed=seed, **attack_options
        ).final("mse")

    return {name: {weight: final(name, weight) for weight in weights} for name in regularisers}


# ----------------------------------------------------------------------------------
# Surveys the chapter shows as tables
# ----------------------------------------------------------------------------------


def exactness_rows(
    image: torch.Tensor,
    label: torch.Tensor,
    architectures: dict,
    activations: Sequence[str],
    num_classes: int,
    seed: int = 0,
) -> list[list]:
    """The Sec. 2.2 closed form over architectures: ``[activation, network, rows used, dead rows,
    relative error]`` per model.

    Each model is ``models.build("mlp", ...)`` in float64; the gradient is what the client
    shares; a model whose first layer passes nothing back is reported as ``blocked``.
    """
    rows = []
    for activation in activations:
        for name, widths in architectures.items():
            model = models.build(
                "mlp",
                tuple(image.shape[1:]),
                num_classes,
                seed=seed,
                widths=widths,
                activation=activation,
            ).double()
            gradient = client.shared_gradient(model, image.double(), label)
            weight_gradient, bias_gradient = minimal.first_layer_gradients(model, gradient)
            try:
                inversion = minimal.first_layer_inversion(weight_gradient, bias_gradient)
            except check.AttackRefused:  # blocked: no live row to divide by
                rows.append([activation, name, 0, len(bias_gradient), "blocked"])
                continue
            rows.append(
                [
                    activation,
                    name,
                    len(inversion.rows),
                    inversion.dead_rows,
                    minimal.relative_error(inversion.input, image.numpy()),
                ]
            )
    return rows


def span_rows(dataset, batch_size: int, hidden_units: Sequence[int], seed: int = 0) -> list[list]:
    """Proposition 2 over widths: ``[hidden units, n1 >= B, rank of dL/dW, batch outside its span]``
    per width."""
    rows = []
    for hidden in hidden_units:
        case = scenario(
            dataset,
            "mlp",
            batch_size,
            seed=seed,
            dtype=torch.float64,
            widths=(hidden,),
            activation="sigmoid",
        )
        weight_gradient = case.gradient()[0].numpy()
        rank, _ = minimal.svd_solve(weight_gradient)
        residual = minimal.batch_span_residual(weight_gradient, case.inputs.flatten(1).numpy())
        rows.append([hidden, minimal.demixing_condition(hidden, batch_size), rank, residual])
    return rows


def compare_with_dlg(cases: dict, dlg_config: dict, iterations: int, seed: int = 0) -> dict:
    """``{name: (two-step AttackResult, DLG AttackResult)}`` on the same one-instance CNN cases.

    The two-step attack runs with ``deconvolution_iterations=iterations`` where it must
    optimise; DLG (Zhu et al., 2019) runs for ``dlg_config["iterations"]`` steps with the labels
    known.
    """
    return {
        name: (
            case.attack("two_step", known_labels=False, iterations=iterations),
            case.attack("dlg", seed=seed, **dlg_config),
        )
        for name, case in cases.items()
    }


def closed_form_gallery(
    images: torch.Tensor,
    labels: torch.Tensor,
    architectures: dict,
    activation: str,
    num_classes: int,
    seed: int = 0,
) -> list[tuple[str, torch.Tensor]]:
    """``[(architecture, reconstructions)]``: each image attacked alone with ``minimal_mlp``, one
    row per MLP."""
    rows = []
    for name, widths in architectures.items():
        model = models.build(
            "mlp",
            tuple(images.shape[1:]),
            num_classes,
            seed=seed,
            widths=widths,
            activation=activation,
        ).double()
        recovered = [
            attacks.attack(
                "minimal_mlp",
                model,
                client.shared_gradient(model, image[None].double(), label[None]),
                shape=images.shape[1:],
            ).reconstruction
            for image, label in zip(images, labels)
        ]
        rows.append((name, torch.cat(recovered)))
    return rows


def cnn_gallery(
    dataset, configurations: dict, count: int, dlg_config: dict, iterations: int, seed: int = 0
) -> tuple:
    """Private images ``(count, C, H, W)`` and ``{row label: reconstructions}`` of the two-step
    attack and DLG.

    One single-instance case per seed ``seed .. seed + count - 1`` and per ``conv_mlp``
    configuration (``{label: options}``); the images depend only on the seed, so every
    row lines up with the same private images.
    """
    truth, rows = None, {}
    for label, options in configurations.items():
        cases = {k: cnn_case(dataset, seed=seed + k, **options) for k in range(count)}
        truth = torch.cat([case.inputs for case in cases.values()])
        results = compare_with_dlg(cases, dlg_config, iterations, seed)
        rows[f"two-step, {label}"] = torch.cat([two.reconstruction for two, _ in results.values()])
        rows[f"DLG, {label}"] = torch.cat([dlg.reconstruction for _, dlg in results.values()])
    return truth, rows


@dataclass
class Race:
    """Result of :func:`race`: the two-step attack and DLG timed to the same accuracy target."""

    target: float  # relative input error both attacks must reach
    dlg_iterations: (
        int | None
    )  # L-BFGS steps DLG needs to reach the target (None: not within its budget)
    two_step_error: float
    two_step_seconds: float  # median over the repeats
    dlg_seconds: float | None  # median over the repeats of a DLG run stopped at ``dlg_iterations``

    @property
    def speedup(self) -> float:
        """DLG's time over the two-step attack's (inf when DLG never reaches the target)."""
        return math.inf if self.dlg_seconds is None else self.dlg_seconds / self.two_step_seconds


def race(
    case, dlg_config: dict, target: float, repeats: int = 5, iterations: int = 2000, seed: int = 0
) -> Race:
    """Time the two-step attack (Qian et al., Sec. 2.3) against DLG (Zhu et al., 2019) to one
    accuracy target.

    The source says the two-step route "speeds up the overall reconstruction". A fair race
    asks both attacks for the same relative input error ``target``: one DLG run with the full
    budget ``dlg_config["iterations"]`` finds the first L-BFGS step at which DLG is within the
    target; then, alternately, ``repeats`` two-step runs and ``repeats`` DLG runs stopped at
    that step (recording nothing in between) are timed in this process, and the medians kept.
    Absolute seconds vary between machines and runs; the ratio (:attr:`Race.speedup`) is what
    a chapter should compare.
    """
    check.positive_int("repeats", repeats)
    if not 0 < target < 1:
        raise check.GradcoreValueError(f"target is a relative error in (0, 1); got {target!r}")
    gradient, truth = case.gradient(), case.inputs
    norm = float(truth.norm())
    scout = case.attack("dlg", seed=seed, **{**dlg_config, "record_every": 1})
    errors = [math.sqrt(mse * truth.numel()) / norm for mse in scout.history["mse"]]
    steps = next(
        (step for step, error in zip(scout.history["iteration"], errors) if error <= target), None
    )
    two_times, dlg_times, error = [], [], math.nan
    for _ in range(repeats):
        start = time.perf_counter()
        result = minimal.two_step(case.model, gradient, case.shape, iterations=iterations)
        two_times.append(time.perf_counter() - start)
        error = minimal.relative_error(result.input, truth.numpy())
        if steps is not None:
            run = case.attack(
                "dlg",
                seed=seed,
                **{**dlg_config, "iterations": max(steps, 1), "record_every": max(steps, 1)},
            )
            dlg_times.append(run.seconds)
    return Race(
        target,
        steps,
        error,
        float(np.median(two_times)),
        float(np.median(dlg_times)) if dlg_times else None,
    )


def solvability_table(configurations: Sequence[dict], seed: int = 0, largest_rank: int = 1024):
    """One row per layer configuration: the counting verdict and the rank of a random such layer.

    Each configuration holds the keyword arguments of :func:`conv_counting`. The rank
    column checks the count against linear algebra: a full-rank convolution matrix is what
    least-squares deconvolution actually needs (computed up to ``largest_rank`` unknowns).
    """
    rng, rows = np.random.default_rng(seed), []
    for configuration in configurations:
        shape = (
            configuration["kernels"],
            configuration["channels"],
            configuration["kernel_size"],
            configuration["kernel_size"],
        )
        weight = rng.normal(size=shape)
        unknowns = configuration["channels"] * configuration["width"] ** 2
        count = minimal.conv_counting(
            **configuration,
            **({"weight": weight} if unknowns <= largest_rank else {"largest_rank": largest_rank}),
        )
        if count.rank is not None:
            rows.append(count.row() + [f"{count.rank}/{unknowns}"])
        else:  # an SVD that size takes longer than the point is worth
            rows.append(count.row() + ["not computed"])
    header = [
        "input",
        "k",
        "s",
        "p",
        "d'",
        "h",
        "h needed",
        "dense units",
        "B",
        "equations",
        "unknowns",
        "solvable",
        "rank (B=1)",
    ]
    return Table("Solvability of one convolutional layer by counting", header, rows)
