"""The small experiments several chapters share: label trials, steps to a PSNR, single-image runs.

They run on :class:`gradcore.scenarios.Scenario` (a client's private batch and the global
model), re-exported here as ``experiments.Scenario``, ``experiments.scenario`` and
``experiments.scenarios`` so that chapters find everything under one name.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .. import attacks, data, metrics
from .. import validation as check
from ..analysis import linear
from ..claims import Table, bounded
from ..scenarios import Scenario, scenario


def label_outcomes(
    dataset: data.Dataset,
    method: str,
    trials: int,
    num_classes: int | None = None,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device = "cpu",
    seeds=None,
    **config,
) -> dict[int, bool]:
    """Whether an attack gets the label right, per single-sample trial, keyed by the trial's seed.

    Each trial draws a fresh sample and a freshly initialised LeNet (as in Zhao et al.,
    2020, Table 1), both from the trial's seed ``seed, seed + 1, ...`` (or the given
    ``seeds``, e.g. to rerun the trials a first method missed). ``method="idlg"`` reads the
    label off the output layer; ``method="dlg"`` learns it jointly with the image for
    ``config``'s iterations.
    """
    infer: dict[str, Callable[[Scenario, int], torch.Tensor]] = {
        "idlg": lambda case, case_seed: attacks.infer_labels(case.model, case.gradient(), 1),
        "dlg": lambda case, case_seed: (
            case.attack("dlg", known_labels=False, seed=case_seed, **config).labels
        ),
    }
    if method not in infer:
        raise ValueError(f"unknown label method {method!r}; known: {', '.join(infer)}")
    seeds = list(range(seed, seed + trials)) if seeds is None else list(seeds)
    outcomes = {}
    for case_seed in tqdm(
        seeds,
        desc=f"{method} labels ({dataset.name})",
        disable=not progress,
        mininterval=2.0,
        ncols=80,
    ):
        case = scenario(dataset, "lenet", 1, seed=case_seed, num_classes=num_classes, device=device)
        outcomes[case_seed] = bool(infer[method](case, case_seed).item() == case.labels.item())
    return outcomes


def label_accuracy(
    dataset: data.Dataset,
    method: str,
    trials: int,
    num_classes: int | None = None,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device = "cpu",
    **config,
) -> float:
    """Share of single-sample trials whose label an attack gets right (see
    :func:`label_outcomes`)."""
    outcomes = label_outcomes(
        dataset, method, trials, num_classes, seed, progress, device, **config
    )
    return sum(outcomes.values()) / len(outcomes)


def binomial_spread(share: float, trials: int) -> float:
    """Standard error ``sqrt(p (1 - p) / n)`` of a share measured over ``trials`` independent
    trials."""
    if not 0 <= share <= 1 or trials < 1:
        raise ValueError(f"need a share in [0, 1] and at least one trial, got {share} and {trials}")
    return math.sqrt(share * (1 - share) / trials)


def median_steps(steps: np.ndarray):
    """The median of per-draw step counts (``inf`` for a draw that never got there), or "never"."""
    median = float(np.median(steps))
    return median if math.isfinite(median) else "never"


def first_below(history: dict, key: str, threshold: float) -> int | None:
    """First recorded iteration at which ``history[key]`` drops below ``threshold`` (None if
    never)."""
    for iteration, value in zip(history["iteration"], history[key]):
        if value < threshold:
            return iteration
    return None


def steps_to_psnr(
    result: attacks.AttackResult, truth: torch.Tensor, threshold: float
) -> int | None:
    """First kept snapshot at which the reconstruction, clipped to [0, 1] and aligned, reaches
    ``threshold`` dB mean PSNR.

    Clipping scores what a viewer would see: an unclipped dummy far outside the pixel range
    prints a PSNR below 0 dB however close its shape is. Run the attack with
    ``snapshots=range(iterations + 1)`` to resolve every step; None if it never gets there.
    """
    for step, images in result.snapshots:
        order = metrics.align(images, truth)
        if metrics.psnr(images[order].clamp(0, 1), truth).mean().item() >= threshold:
            return step
    return None


@dataclasses.dataclass
class DescentDraws:
    """DLG's gradient descent on the linear unit over many independent draws: ``mse[t, n]`` after
    step ``t`` of draw ``n``."""

    mse: np.ndarray
    steps: np.ndarray

    @property
    def draws(self) -> int:
        return self.mse.shape[1]

    def reached(self, threshold: float) -> np.ndarray:
        """Per draw, whether its final MSE is at or below ``threshold``."""
        return self.mse[-1] <= threshold

    def first_below(self, threshold: float) -> np.ndarray:
        """Per draw, the first step with MSE below ``threshold``; ``inf`` where it never gets
        there."""
        below = self.mse < threshold
        return np.where(below.any(axis=0), below.argmax(axis=0), np.inf)

    def diverged(self, start_factor: float = 1.0) -> np.ndarray:
        """Per draw, whether it ended above where it started (times ``start_factor``): it
        overshot."""
        return ~(self.mse[-1] <= start_factor * self.mse[0])


def linear_descent_draws(
    dataset: data.Dataset,
    draws: int,
    iterations: int,
    seed: int = 0,
    multiple: float = 1.0,
    fraction: float = 0.5,
) -> DescentDraws:
    """DLG's gradient descent on the linear unit (B = 1) over ``draws`` independent draws.

    Draw ``n`` (seed ``seed + n``) is a private digit, a freshly initialised unit and a
    uniform dummy; the step is ``multiple`` times the draw's step rule
    (:func:`gradcore.analysis.linear.step_size` at ``fraction``, from the shared gradient). All
    draws descend together in float64 numpy (:func:`gradcore.analysis.linear.descent`, the torch
    attack's arithmetic), so a claim about DLG on single digits is a rate over hundreds of draws,
    not one draw.
    """
    check.positive_int("draws", draws)
    check.positive_int("iterations", iterations)
    check.number("multiple", multiple, low=0.0, low_open=True)
    cases = [
        scenario(dataset, "linear_unit", 1, seed=seed + n, dtype=torch.float64)
        for n in range(draws)
    ]
    weights, biases = zip(*(linear.parameters(case.model) for case in cases))
    shared = [[g.detach().double().numpy().ravel() for g in case.gradient()] for case in cases]
    weight_gradients = np.stack([g[0] for g in shared])
    bias_gradients = np.array([float(g[1][0]) for g in shared])
    steps = np.array(
        [
            multiple * linear.step_size(w, g, b, fraction)
            for w, g, b in zip(weights, weight_gradients, bias_gradients)
        ]
    )
    starts = np.random.default_rng(seed).random(weight_gradients.shape)
    truth = np.stack([case.inputs.double().numpy().ravel() for case in cases])
    targets = np.array([float(case.labels[0]) for case in cases])
    _, mse = linear.descent(
        np.stack(weights),
        np.array(biases),
        targets,
        weight_gradients,
        bias_gradients,
        starts,
        steps,
        iterations,
        truth=truth,
    )
    return DescentDraws(mse, steps)


def batch_slowdown(
    case: Scenario,
    threshold: float,
    iterations: int,
    alone_iterations: int,
    attack: str = "dlg",
    **config,
) -> tuple[int | None, list, attacks.AttackResult]:
    """Steps a batch needs to reach ``threshold`` dB, and steps each of its samples needs alone.

    Zhu et al. (2019) remark that a batch takes many more iterations than one image. The
    comparison is fair: the same model, the same images, the same attack and labels; each
    sample alone is :meth:`Scenario.alone`. Steps are counted on [0, 1]-clipped
    reconstructions (:func:`steps_to_psnr`). Returns the batch's steps (None if it never
    gets there within ``iterations``), the list of steps alone, and the batch's result
    (with a snapshot at every step).
    """
    batch = case.attack(attack, iterations=iterations, snapshots=range(iterations + 1), **config)
    alone = []
    for index in range(case.batch_size):
        single = case.alone(index)
        run = single.attack(
            attack, iterations=alone_iterations, snapshots=range(alone_iterations + 1), **config
        )
        alone.append(steps_to_psnr(run, single.inputs, threshold))
    return steps_to_psnr(batch, case.inputs, threshold), alone, batch


def keep_snapshots(result: attacks.AttackResult, steps) -> attacks.AttackResult:
    """A copy of ``result`` that keeps only the snapshots at ``steps`` (for a figure)."""
    wanted = set(steps)
    return dataclasses.replace(
        result, snapshots=[(step, images) for step, images in result.snapshots if step in wanted]
    )


def final_table(sweeps: dict, key: str = "mse"):
    """One row per run of a ``{knob: {setting: AttackResult}}`` sweep: its final ``key``, and
    whether it diverged.

    A value beyond 1e3 prints as "diverged (> 1000)" (:func:`gradcore.claims.bounded`): how far a
    diverging run has gone depends on the machine's last bits.
    """
    rows = [
        [knob, setting, bounded(result.final(key)), "diverged" if result.diverged else ""]
        for knob, runs in sweeps.items()
        for setting, result in runs.items()
    ]
    return Table(f"Final {key} per setting", ["knob", "setting", f"final {key}", ""], rows)


def attack_single_images(
    dataset: data.Dataset,
    model: str | nn.Module,
    count: int,
    attack: str,
    config: dict,
    seed: int = 0,
    device: str | torch.device = "cpu",
    evaluation_mode: bool | None = None,
    **model_options,
) -> list[tuple[Scenario, attacks.AttackResult]]:
    """Attack ``count`` clients that each share the gradient of one image (seeds ``seed``, ``seed +
    1``, ...).

    A model given by name is rebuilt for each client with that client's seed; the
    scenarios are returned with the results so a figure can show the private images.
    """
    runs = []
    for k in range(count):
        case = scenario(
            dataset,
            model,
            1,
            seed=seed + k,
            device=device,
            evaluation_mode=evaluation_mode,
            **model_options,
        )
        runs.append((case, case.attack(attack, seed=seed, **config)))
    return runs


def mean_final(runs: list, key: str = "psnr") -> float:
    """Mean over runs (results, or (scenario, result) pairs) of the final value of a history
    entry."""
    results = [run[1] if isinstance(run, tuple) else run for run in runs]
    return float(sum(result.final(key) for result in results) / len(results))


def attack_rows(
    build: Callable[[int], Scenario], runs: dict, network: str, count: int
) -> tuple[torch.Tensor, list]:
    """The private images of one network's single-image scenarios and every attack's reconstructions
    of them.

    ``build(k)`` makes the ``k``-th scenario; ``runs`` maps ``(network, attack)`` to the
    attack's results on scenarios ``0 .. count - 1``. Returns the truth and one
    ``(attack's first word, reconstructions)`` row per attack on ``network``, ready for
    :func:`gradcore.plots.reconstruction_grid`.
    """
    truth = torch.cat([build(k).inputs for k in range(count)]).cpu()
    rows = [
        (attack.split()[0], torch.cat([result.reconstruction for result in results]).cpu())
        for (name, attack), results in runs.items()
        if name == network
    ]
    if not rows:
        raise check.GradcoreValueError(
            f"no runs on {network!r}; networks run: {sorted({name for name, _ in runs})}"
        )
    return truth, rows
