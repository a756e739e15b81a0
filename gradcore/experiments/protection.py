"""What protects a deployment: every attack of the book against every defense, on shared settings.

The what-protects chapter spans two pages (the matrix, costs and rounds; then epsilon and what
it all says about deployment). Both build the same four settings, the same attacks (the
GAN-prior ones with a digit generator trained on the digits not attacked) and the same
deployments from here, so a page can be executed on its own and still attack what the other
attacks. The settings are ``papers.WHAT_PROTECTS``'s.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch import nn

from .. import data, defenses, evaluation, generative, models, papers
from ..scenarios import scenarios
from . import generative as generative_experiments
from .deployments import over_rounds as attack_rounds  # this module has its own over_rounds

#: Whose settings these functions read: every ``settings`` argument is ``PAPER.settings(profile)``.
PAPER = papers.WHAT_PROTECTS


def mlp_builder(
    dataset: data.Dataset, widths: Sequence[int], reduce: bool = False
) -> Callable[[int], nn.Module]:
    """A builder ``seed -> ReLU MLP`` on ``dataset``, with exclusivity reduction if ``reduce``.

    Exclusivity reduction (Pan et al., USENIX Security 2022, Sec. 6) removes the ReLU after
    the first hidden layer: :func:`gradcore.defenses.exclusivity_reduction`.
    """
    change = defenses.exclusivity_reduction if reduce else (lambda model: model)
    return lambda case_seed: change(
        models.fcn(dataset.shape, dataset.num_classes, widths, seed=case_seed)
    )


def hybrid_cnn_builder(dataset: data.Dataset, options: Mapping) -> Callable[[int], nn.Module]:
    """A builder ``seed -> ReLU CNN with a fully-connected head`` (Pan et al., Fig. 4) on
    ``dataset``."""
    return lambda case_seed: models.hybrid_cnn(
        dataset.shape, dataset.num_classes, **options, seed=case_seed
    )


def utility_builder(
    dataset: data.Dataset, widths: Sequence[int], seed: int = 0
) -> Callable[[], nn.Module]:
    """A builder ``() -> MLP`` for the federated runs, every run starting from the same weights."""
    return lambda: models.build("mlp", dataset.shape, dataset.num_classes, seed=seed, widths=widths)


def settings_cases(
    digits: data.Dataset,
    photos: data.Dataset,
    settings,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict:
    """The four settings every attack has a place in: ``{label: [Scenario, ...]}``.

    A ReLU MLP with biases on single digits and on a batch (the analytic and exclusivity
    attacks apply), a sigmoid LeNet on single photo crops (DLG, iDLG, cosine + TV, EOT), and
    a ReLU CNN with a fully-connected head on a batch of photos (the hybrid exclusivity attack).
    """
    mlp = mlp_builder(digits, settings.mlp_widths)
    return {
        "digits MLP, 1 image": scenarios(digits, mlp, 1, settings.images, seed, device=device),
        "digits MLP, batch": scenarios(digits, mlp, settings.batch, 1, seed, device=device),
        "photos LeNet, 1 image": scenarios(
            photos, "lenet", 1, settings.images, seed, device=device
        ),
        "photos CNN, batch": scenarios(
            photos,
            hybrid_cnn_builder(photos, settings.hybrid),
            settings.batch,
            1,
            seed,
            device=device,
        ),
    }


def attack_specs(
    settings,
    digits: data.Dataset,
    cases: Mapping[str, Sequence],
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[dict, data.Dataset]:
    """Every attack of the book as :func:`gradcore.evaluation.matrix` specs, and the attacker's
    public digits.

    The GAN-prior attacks (GGL, GIAS, GIFD) search a digit generator trained here on every digit
    that the settings ``settings.gan_scenarios`` do not attack: the attacker's public data,
    returned beside the specs (the class-mean floor is measured on it).
    """
    lbfgs = {
        **settings.lbfgs,
        "iterations": settings.lbfgs_steps,
        "scenarios": settings.optimisation_scenarios,
    }
    specs = {
        "closed form": {"attack": "closed_form"},
        "least squares": {
            "attack": "minimal_mlp",
            "scenarios": ("digits MLP, 1 image", "digits MLP, batch"),
        },
        "walk-back": {"attack": "walk_back"},
        "exclusivity": {"attack": "exclusivity"},
        "exclusivity hybrid": {
            "attack": "exclusivity_hybrid",
            "iterations": settings.hybrid_iterations,
            "scenarios": ("photos LeNet, 1 image", "photos CNN, batch"),
        },
        "DLG": {"attack": "dlg", "labels": "hidden", **lbfgs},
        "iDLG": {"attack": "idlg", "labels": "hidden", **lbfgs},
        "cosine + TV": {
            "attack": "inverting_gradients",
            **settings.cosine,
            "iterations": settings.cosine_iterations,
            "scenarios": settings.optimisation_scenarios,
        },
        "regularised": {
            "attack": "regularised_matching",
            **settings.regularised,
            "iterations": settings.regularised_iterations,
            "scenarios": settings.regularised_scenarios,
        },
        "EOT": {
            "attack": "censor_eot",
            "iterations": settings.eot_iterations,
            "samples": settings.eot_samples,
            "scenarios": settings.eot_scenarios,
            "defenses": ["none", "censor T=20"],
        },
    }
    attacked = torch.cat(
        [case.inputs for label in settings.gan_scenarios for case in cases[label]]
    ).cpu()
    public = digits.without(attacked)
    data.check_disjoint(public, attacked, "the GAN-prior attacks' public digits")
    prior, _ = generative.train_gan(
        public,
        steps=settings.gan_budgets["steps"]["digits"],
        seed=seed,
        device=device,
        **settings.gan_training,
    )
    specs.update(
        generative_experiments.gan_attacks(
            settings.gan_attacks,
            settings.gan_budgets,
            prior,
            against=settings.defenses,
            scenarios=settings.gan_scenarios,
        )
    )
    return specs, public


def deployments(settings) -> dict:
    """Every defense in every round, and CENSOR in its first rounds only (the deployment its authors
    prescribe)."""
    censor_first = {**settings.defenses["censor T=20"], "defended_rounds": settings.censor_rounds}
    return {**settings.defenses, "censor T=20, first rounds": censor_first}


def runs_against(
    grid: evaluation.Evaluation, names: Sequence[str], defense: str
) -> list[tuple[str, str]]:
    """The (setting, attack) pairs of ``names`` that ran against ``defense`` (not refused, not
    skipped)."""
    return [
        (scenario, attack)
        for scenario in grid.scenarios
        for attack in names
        if grid.ran(scenario, attack, defense)
    ]


def over_rounds(
    attacks: Mapping[str, Mapping],
    names: Sequence[str],
    targets: Mapping[str, Mapping],
    snapshots: Mapping,
    dataset: data.Dataset,
    images: int,
    seed: int = 0,
) -> evaluation.Evaluation:
    """The attacks ``names`` on the updates the deployments ``targets`` share at each attacked
    round.

    ``snapshots`` are the global models each deployment kept
    (:func:`gradcore.experiments.deployments.run`); every setting restriction of the attacks' specs
    is dropped, since the model is the deployment's.
    """
    chosen = {
        name: {key: value for key, value in attacks[name].items() if key != "scenarios"}
        for name in names
    }
    return attack_rounds(chosen, targets, snapshots, dataset, images=images, seed=seed)


def protection_row(
    label: str,
    grid: evaluation.Evaluation,
    rounds_grid: evaluation.Evaluation,
    logs: Mapping,
    settings,
    gray_scored: Sequence[str],
) -> list:
    """One deployment's row: what it stopped and refused at round 0, its weakest round, its accuracy
    and cost."""
    # round 0 is defended in both CENSOR deployments
    column = label if label in grid.defenses else "censor T=20"
    ran_stopped, refused, attacked = grid.tally(column, settings.stopped_level, gray_scored)
    where, attack, worst = rounds_grid.weakest(label, settings.round_attacks)
    # Stopped at every round, which round came closest is set by the float path's last bits, not a
    # finding.
    weakest = (
        f"{where}, {attack}" if worst < settings.stopped_level else "none: stopped at every round"
    )
    return [
        label,
        f"{ran_stopped} of {attacked - refused}",
        refused,
        weakest,
        worst,
        logs[label].final(),
        logs["none"].final() - logs[label].final(),
    ]


def reduction_cases(
    digits: data.Dataset,
    widths: Sequence[int],
    batch_size: int,
    images: int,
    reduce: bool,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict:
    """Exclusivity reduction's own setting: single digits and one batch larger than the first
    layer."""
    build = mlp_builder(digits, widths, reduce)
    return {
        "1 image": scenarios(digits, build, 1, images, seed, device=device),
        f"batch {batch_size}": scenarios(digits, build, batch_size, 1, seed, device=device),
    }
