"""CENSOR's GAN-prior rows (Table I: GGL, GIAS, GIFD) with generators trained in the chapter.

* :func:`train_prior`: a public/private split of a data set and a DCGAN trained on the public part;
* :func:`prior_quality`: what the generator draws and how near it comes to its training images;
* :func:`gan_attacks`: the attack specs of :func:`gradcore.evaluation.matrix`, with the prior attached;
* :func:`representatives`: Observation 2, whether a reconstruction is the private image or its class's
  typical image.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from .. import data, generative, plots
from ..claims import Table
from ..evaluation import Evaluation, matrix


@dataclass
class Prior:
    """A generator and the data around it: ``public`` trained it, ``private`` is held out for the attacks."""

    name: str
    public: data.Dataset
    private: data.Dataset
    generator: generative.Generator
    log: generative.GanLog
    seconds: float


def train_prior(dataset: data.Dataset, held_out_per_class: int, steps: int, training: Mapping, seed: int = 0,
                progress: bool = True, device: str | torch.device = "cpu", private_classes: Sequence[str] | None = None) -> Prior:
    """Hold out ``held_out_per_class`` images of every class, train a DCGAN on the rest (:func:`gradcore.generative.train_gan`).

    ``private_classes`` keeps only the held-out images of those classes as the clients'
    private images (the faces of ``lfw_subset``, not its non-face patches); the other
    held-out images are used by nobody.
    """
    public, private = dataset.split(held_out_per_class, seed=seed)
    if private_classes is not None:
        private = private.of_classes(private_classes, "private")
    start = time.perf_counter()
    generator, log = generative.train_gan(public, steps=steps, seed=seed, progress=progress, device=device, **training)
    return Prior(dataset.name, public, private, generator, log, time.perf_counter() - start)


def prior_quality(priors: Mapping[str, Prior], samples: int = 32, seed: int = 0) -> Table:
    """The generators' nearest-neighbour check: samples against their training images.

    For each generator: the mean MSE from a sample to its nearest training image, and the
    same for the held-out (private) images, which the generator never saw. A generator that
    memorised draws samples far nearer to its training set than new images of the same
    distribution are; one that generalises (or is simply poor) does not.
    """
    rows = []
    for label, prior in priors.items():
        classes = torch.arange(samples) % prior.generator.num_classes
        drawn = generative.sample(prior.generator, classes, seed)
        _, sample_distance = generative.nearest_training_images(drawn, prior.public)
        _, held_distance = generative.nearest_training_images(prior.private.images, prior.public)
        rows.append([label, len(prior.public), prior.log.settings["steps"],
                     f"{sample_distance.mean():.4f}", f"{held_distance.mean():.4f}",
                     f"{float((sample_distance < held_distance.min()).float().mean()):.2f}"])
    return Table("The attacker's generators: training and a nearest-neighbour check",
                 ["data", "training images", "steps", "sample -> nearest training image (MSE)",
                  "held-out image -> nearest training image (MSE)", "share of samples nearer than any held-out image"], rows)


def gan_attacks(specs: Mapping[str, Mapping], budgets: Mapping, generator: generative.Generator, suffix: str = "",
                **extra) -> dict:
    """``{label + suffix: spec}`` for :func:`gradcore.evaluation.matrix`: each attack's settings, budget and prior.

    The labels are hidden: as in their papers, the attacks read them off the gradient (iDLG's rule).
    ``extra`` goes into every spec (e.g. ``defenses=["none"]``).
    """
    return {label + suffix: {**spec, **budgets.get(label, {}), "generator": generator, "labels": "hidden", **extra}
            for label, spec in specs.items()}


def attack_matrix(priors: Mapping[str, Prior], cases: Mapping[str, Sequence], specs: Mapping[str, Mapping], budgets: Mapping,
                  defenses: Mapping[str, Mapping], metrics: Sequence[str], seed: int = 0, controls: bool = True) -> Evaluation:
    """Every GAN-prior attack against every defense, each data set with its own generator, and the control.

    ``cases`` maps a scenario label to its cases, ``priors`` the same labels to the generator
    trained for them. The control runs each attack undefended with an untrained generator of
    the same architecture as its prior (``"<attack> (untrained prior)"``): what the attack
    gets from the gradient and its own search alone; ``controls=False`` leaves it out.
    """
    grid = None
    for label, prior in priors.items():
        attacks = gan_attacks(specs, budgets, prior.generator)
        if controls:
            attacks.update(gan_attacks(specs, budgets, generative.untrained(prior.generator, seed + 1), " (untrained prior)",
                                       defenses=["none"]))
        part = matrix(attacks, defenses, {label: cases[label]}, metrics=metrics, seed=seed)
        grid = part if grid is None else grid.update(part)
    return grid


def sample_figure(prior: Prior, count: int = 10, seed: int = 0):
    """Samples of a prior's generator (classes in turn) above their nearest training images."""
    classes = torch.arange(count) % prior.generator.num_classes
    drawn = generative.sample(prior.generator, classes, seed)
    nearest, _ = generative.nearest_training_images(drawn, prior.public)
    return plots.reconstruction_grid(drawn, [("nearest training image", prior.public.images[nearest])],
                                     column_titles=[prior.public.classes[int(c)] for c in classes], first="generated",
                                     size=1.0)


def public_mean_mse(public: data.Dataset, cases: Sequence, classes: Sequence[str] | None = None) -> float:
    """The MSE of the public data's mean image to the private images: what the public data alone gives.

    An attacker with the public data but nothing from the gradient does best, in expected
    squared error, with the mean image of the distribution, and that is nearer to a private
    image than the uniform gray guess is. A GAN-prior attack answers with a plausible image
    whatever the gradient says, so "it learned nothing from the gradient" means "no better
    than this", not "no better than gray". ``classes`` restricts the public data to the
    classes the private images are drawn from (the faces, not the non-face patches).
    """
    if classes is not None:
        public = public.of_classes(classes)
    mean = public.images.mean(dim=0, keepdim=True)
    return float(torch.cat([(case.inputs.cpu() - mean).pow(2).flatten(1).mean(1) for case in cases]).mean())


def ahead_of_baselines(grid: Evaluation, scenario: str, attack: str, defense: str, baselines: Sequence[str],
                       floor: float) -> dict:
    """Does ``defense`` protect at least as well as every baseline against ``attack``, in MSE capped at ``floor``?

    ``floor`` is where the attacker has learned nothing (:func:`public_mean_mse` for a GAN-prior
    attack): beyond it a larger MSE says nothing more, and two defenses that both push the
    attack there protect equally. Returns the strongest baseline, both MSEs, whether the
    defense holds (its capped MSE at least the baseline's) and the margin (the difference of
    the capped MSEs).
    """
    value = {d: grid.value(scenario, attack, d, "mse") for d in (*baselines, defense)}
    strongest = max(baselines, key=lambda d: value[d])
    margin = min(value[defense], floor) - min(value[strongest], floor)
    return {"strongest": strongest, "baseline": value[strongest], "defense": value[defense], "holds": margin >= 0,
            "margin": margin,
            "shown": f"{strongest} {value[strongest]:.4f}, {defense} {value[defense]:.4f} (floor {floor:.4f})"}


def reconstruction_figure(grid: Evaluation, scenario: str, case, attacks: Sequence[str] | None = None):
    """The first image of ``case`` repeated per defense (top), and each attack's reconstruction of it below."""
    attacks = [a for a in grid.attacks if "untrained" not in a] if attacks is None else list(attacks)
    defenses = [d for d in grid.defenses if all(grid.ran(scenario, a, d) for a in attacks)]
    rows = [(attack, torch.cat([grid.cell(scenario, attack, d).reconstructions[0][:1] for d in defenses]).cpu())
            for attack in attacks]
    return plots.reconstruction_grid(torch.cat([case.inputs[:1]] * len(defenses)).cpu(), rows, column_titles=defenses,
                                     size=1.1)


def representatives(grid: Evaluation, scenario: str, attack: str, cases: Sequence, public: data.Dataset,
                    defense: str = "none") -> dict:
    """CENSOR's Observation 2 measured: is the reconstruction the private image, or a typical image of its class?

    ``cases`` are the scenario's cases, as passed to the matrix. For each attacked image: the
    MSE of the reconstruction to the private image (``to private``), to the nearest public
    image of the private image's class (``to class``: what the generator was trained on), and
    of the private image itself to that class (``private to class``). A reconstruction nearer
    to a public image of the class than to the private one, and nearer to the public images
    than the private image is, is a typical member of the class, not the person: what leaked
    is the label. (The second test rules out a reconstruction that is merely poor: a blur is
    near nothing.)
    """
    cell = grid.cell(scenario, attack, defense)
    truths = torch.cat([case.inputs for case in cases])
    labels = torch.cat([case.labels for case in cases])
    reconstructions = torch.cat(cell.reconstructions).cpu()
    truths = truths.cpu()
    to_private = (reconstructions - truths).pow(2).flatten(1).mean(1)

    def nearest_of_class(image: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        same = public.subset(torch.nonzero(public.labels == label).flatten().numpy())
        return generative.nearest_training_images(image[None], same)[1][0]

    to_class = torch.stack([nearest_of_class(image, label) for image, label in zip(reconstructions, labels.cpu())])
    private_to_class = torch.stack([nearest_of_class(image, label) for image, label in zip(truths, labels.cpu())])
    return {"to private": to_private, "to class": to_class, "private to class": private_to_class}
