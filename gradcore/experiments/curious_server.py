"""A curious server on a real Flower deployment: the book's attacks on what Flower's clients sent.

The what-protects-flower page deploys FedAvg on Flower (:func:`gradcore.flower.run`), one
round per defense of the CENSOR chapter (and one of DP-SGD through Opacus), and attacks
what the server captured. Beside each capture it recomputes, in-process, the gradient
gradcore itself gives for the same client, batch, model and defense seed
(:func:`replayed_gradient`): the attacks on the two must agree to round-off, and the
defenses must do on Flower what they do in-process.

The results are an :class:`gradcore.evaluation.Evaluation` with two scenarios (the
captured gradient, the replayed one), so the page reads them with the matrix's queries
(``to_gray``, ``gain``, ``table``).
"""

from __future__ import annotations

import inspect
import sys
from typing import Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm

from .. import claims, data, evaluation, flower, specs
from .. import metrics as quality
from ..attacks import ATTACKS, attack
from ..errors import AttackRefused
from ..flower import protocol

#: The two ways the page obtains each client's gradient.
CAPTURED, REPLAYED = "captured by the Flower server", "recomputed by gradcore"


def schedule(settings) -> list[dict]:
    """One round per defense of ``settings.flower["defenses"]`` (labels of ``settings.defenses``),
    then DP-SGD,
    then an undefended FedAvg round of several local steps (``settings.flower["fedavg"]``)."""
    deployment = settings.flower
    rounds = [
        flower.make_round(label, settings.defenses[label], lr=deployment["lr"])
        for label in deployment["defenses"]
    ]
    if deployment["dp_sgd"] is not None:
        rounds.append(
            flower.make_round("DP-SGD (Opacus)", dp_sgd=deployment["dp_sgd"], lr=deployment["lr"])
        )
    if deployment.get("fedavg") is not None:
        fedavg = deployment["fedavg"]
        rounds.append(
            flower.make_round(fedavg["label"], lr=deployment["lr"], local=fedavg["local"])
        )
    return rounds


def partitions(settings, seed: int = 0) -> list[list[int]]:
    """Which images each client holds: ``images_per_client`` distinct images per client, drawn with
    the seed."""
    deployment = settings.flower
    size = len(data.load(deployment["dataset"]))
    count = deployment["clients"] * deployment["images_per_client"]
    drawn = torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:count].tolist()
    per = deployment["images_per_client"]
    return [drawn[client * per : (client + 1) * per] for client in range(deployment["clients"])]


def attack_specs(settings) -> dict:
    """The attacks run on the captures: the closed form, and cosine + TV with the settings of
    what-protects."""
    return {
        "closed form": {"attack": "closed_form"},
        "cosine + TV": {
            "attack": "inverting_gradients",
            **settings.cosine,
            "iterations": settings.cosine_iterations,
        },
    }


def deploy(settings, seed: int = 0, directory=None) -> flower.Deployment:
    """Run the page's deployment on Flower: the settings' model, data, clients and schedule."""
    deployment = settings.flower
    return flower.run(
        deployment["model"],
        deployment["dataset"],
        partitions(settings, seed),
        schedule(settings),
        seed=seed,
        directory=directory,
        timeout=deployment["timeout"],
    )


def replayed_gradient(setup: Mapping, dataset, capture: protocol.Capture) -> tuple:
    """What gradcore computes for the captured client, round, model and defense seed, in this
    process: the
    gradient of a one-step round, the update (weights sent minus weights returned) of a FedAvg
    round."""
    model = protocol.received_model(setup, dataset, capture)
    images, labels = protocol.partition(setup, dataset, capture.partition_id)
    update = protocol.client_update(
        model,
        images,
        labels,
        capture.round_spec,
        protocol.client_seed(setup, capture.server_round, capture.partition_id),
    )
    if capture.round_spec["local"] is not None:
        return tuple(update)
    return tuple(step / capture.round_spec["lr"] for step in update)


def captured_observation(model, capture: protocol.Capture) -> tuple:
    """What the curious server attacks: the gradient read back from a one-step round, the update of
    a FedAvg round."""
    if capture.round_spec["local"] is not None:
        return protocol.observed_update(model, capture)
    return protocol.observed_gradient(model, capture)


def round_config(name: str, config: Mapping, round_spec: Mapping) -> dict:
    """An attack's options for one round: on a FedAvg update, an attack that can unroll local
    training (``local``, Geiping et al., 2020, Sec. 6) is told the client's steps; the others read
    the update as it is
    (the closed form divides a weight row by its bias entry, so a sum of steps on one image still
    gives it)."""
    if round_spec["local"] is None or "local" not in inspect.signature(ATTACKS[name]).parameters:
        return dict(config)
    return {**config, "local": {"lr": round_spec["lr"], **round_spec["local"]}}


def relative_gap(observed: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    """``max |observed - reference| / max |reference|`` over every entry: 0 for identical
    gradients."""
    difference = max(float((a - b).abs().max()) for a, b in zip(observed, reference, strict=True))
    scale = max(float(b.abs().max()) for b in reference)
    return difference / scale if scale > 0 else difference


def public_mean(setup: Mapping, dataset) -> torch.Tensor:
    """The mean of the data set's images that no client holds: what an attacker who learned nothing
    submits.

    On MNIST it is a far better guess than uniform gray (the digits are mostly black
    background: gray's MSE is about four times the mean digit's), so clipped noise, most
    of whose pixels clip to black, would "beat" the gray guess without recovering anything.
    """
    held = torch.zeros(len(dataset), dtype=torch.bool)
    held[[index for part in setup["partitions"] for index in part]] = True
    data.check_disjoint(dataset.images[~held], dataset.images[held], "the digits of the mean image")
    return dataset.images[~held].mean(dim=0, keepdim=True)


def attack_deployment(
    result: flower.Deployment, attacks: Mapping[str, Mapping], seed: int = 0, progress: bool = True
) -> tuple[evaluation.Evaluation, dict]:
    """Every attack on every capture, and on gradcore's own gradient of the same client and round.

    Returns the :class:`~gradcore.evaluation.Evaluation` (scenarios :data:`CAPTURED` and
    :data:`REPLAYED`, defenses the rounds' labels; one case per client; its ``reference``, the
    level at which a defense has won, is the :func:`public_mean` image's) and, per round label,
    the largest :func:`relative_gap` between captured and replayed gradients over its clients.
    The attacker knows only the update: labels are read off the gradient where an attack needs them.
    """
    setup, dataset = result.setup, protocol.dataset_of(result.setup)
    labels = [entry["label"] for entry in result.schedule]
    grid = evaluation.Evaluation([CAPTURED, REPLAYED], list(attacks), labels, ["mse", "psnr"])
    truths = [
        protocol.partition(setup, dataset, client)[0] for client in range(len(setup["partitions"]))
    ]
    mean = public_mean(setup, dataset)
    for scenario in (CAPTURED, REPLAYED):
        grid.truths[scenario] = truths
        grid.reference[scenario] = {
            m: float(torch.cat([quality.measure(m, mean.expand_as(t), t) for t in truths]).mean())
            for m in grid.metrics
        }
    gaps = {}
    bar = tqdm(
        total=len(result.captures) * len(attacks),
        desc="attacks on the captures",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    )
    for label, server_round in zip(labels, range(1, len(labels) + 1)):
        captures = [capture for capture in result.captures if capture.server_round == server_round]
        gradients = {CAPTURED: [], REPLAYED: []}
        for capture in captures:
            model = protocol.received_model(setup, dataset, capture)
            gradients[CAPTURED].append((model, captured_observation(model, capture)))
            gradients[REPLAYED].append((model, replayed_gradient(setup, dataset, capture)))
        gaps[label] = max(
            relative_gap(a[1], b[1]) for a, b in zip(gradients[CAPTURED], gradients[REPLAYED])
        )
        for attack_label, spec in attacks.items():
            read = specs.attack_spec(spec)
            config = round_config(read.name, read.config(), captures[0].round_spec)
            for scenario, pairs in gradients.items():
                grid.add(
                    _cell(
                        scenario,
                        attack_label,
                        label,
                        read.name,
                        config,
                        pairs,
                        [truths[c.partition_id] for c in captures],
                        seed,
                    )
                )
            bar.update(len(captures))
    bar.close()
    return grid, gaps


def _cell(
    scenario: str,
    attack_label: str,
    defense_label: str,
    name: str,
    config: dict,
    pairs: list,
    truths: list,
    seed: int,
) -> evaluation.Cell:
    scores, kept, errors, seconds = {"mse": [], "psnr": []}, [], [], 0.0
    for index, ((model, gradient), truth) in enumerate(zip(pairs, truths)):
        try:
            outcome = attack(
                name,
                model,
                gradient,
                shape=tuple(truth.shape[1:]),
                batch_size=len(truth),
                labels=None,
                seed=seed + index,
                progress=False,
                **config,
            )
            reconstruction = outcome.aligned(truth).clamp(0, 1)
            seconds += outcome.seconds
        except AttackRefused as error:  # the attacker learns nothing: scored as the gray guess
            errors.append(str(error))
            reconstruction = torch.full_like(truth, 0.5)
        kept.append(reconstruction)
        for metric in scores:
            scores[metric].extend(quality.measure(metric, reconstruction, truth).tolist())
    return evaluation.Cell(
        scenario,
        attack_label,
        defense_label,
        {m: float(np.mean(v)) for m, v in scores.items()},
        kept,
        seconds,
        errors,
        len(truths),
    )


def verdict(
    grid: evaluation.Evaluation, scenario: str, attack_label: str, defense: str, settings
) -> str:
    """``exact``, ``leaks``, ``stopped`` or ``partial``, by what-protects' levels against the
    reference guess.

    exact: MSE at most ``exact_level`` times the reference's; leaks: PSNR at least ``leak_db``
    above it; stopped: MSE at least ``stopped_level`` times it; partial: in between.
    """
    to_reference = grid.to_gray(scenario, attack_label, defense)
    if to_reference <= settings.exact_level:
        return "exact"
    if grid.gain(scenario, attack_label, defense) >= settings.leak_db:
        return "leaks"
    return "stopped" if to_reference >= settings.stopped_level else "partial"


def verdict_rows(grid: evaluation.Evaluation, settings) -> list[list]:
    """Per attack and round: MSE over the reference on the capture and on the replay, and both
    verdicts."""
    return [
        [
            attack_label,
            defense,
            grid.to_gray(CAPTURED, attack_label, defense),
            grid.to_gray(REPLAYED, attack_label, defense),
            verdict(grid, CAPTURED, attack_label, defense, settings),
            verdict(grid, REPLAYED, attack_label, defense, settings),
        ]
        for attack_label in grid.attacks
        for defense in grid.defenses
    ]


def largest_difference(grid: evaluation.Evaluation, attack_label: str) -> float:
    """Largest ``|MSE(captured) - MSE(replayed)|`` over the rounds, in units of the reference's
    MSE."""
    return max(
        abs(grid.to_gray(CAPTURED, attack_label, d) - grid.to_gray(REPLAYED, attack_label, d))
        for d in grid.defenses
    )


def reconstruction_rows(grid: evaluation.Evaluation, scenario: str = CAPTURED) -> dict:
    """For :func:`gradcore.plots.image_table`: per client and attack, its private image then one
    reconstruction per round."""
    rows = {}
    for client, truth in enumerate(grid.truths[scenario]):
        for attack_label in grid.attacks:
            rows[f"client {client}\n{attack_label}"] = [truth[0]] + [
                grid.cell(scenario, attack_label, d).reconstructions[client][0]
                for d in grid.defenses
            ]
    return rows


def claims_table(
    grid: evaluation.Evaluation, gaps: Mapping[str, float], launch, settings
) -> claims.Claims:
    """The page's claims: Flower's capture is gradcore's gradient, the control, the defenses,
    FedAvg, the deployment.

    Each row can fail: a client that sent something else than gradcore computes (a different
    model, batch, seed or dtype) moves the first two; an attack that no longer recovers the
    undefended digits fails the controls, without which no defense below gets credit; local
    training that mixed other inputs into the update (a batch, augmentation) fails the closed
    form's FedAvg row, an unrolling that does not match the client's steps the cosine row; a
    connection off loopback or a process left running fails the last two.
    """
    rows = verdict_rows(grid, settings)
    same = sum(row[4] == row[5] for row in rows)
    table = claims.Claims("A curious server on Flower")
    table.at_most(
        "the gradient read off Flower's update is gradcore's own gradient of the same batch, to "
        "float32 round-off (largest relative difference)",
        "not claimed",
        max(gaps.values()),
        settings.flower["roundoff"],
    )
    table.at_most(
        "the closed form on the captured update gives gradcore's reconstruction (largest MSE "
        "difference, in units of the mean digit's MSE)",
        "not claimed",
        largest_difference(grid, "closed form"),
        settings.flower["roundoff"],
    )
    table.add(
        f"every attack gets the same verdict on Flower and in-process ({same} of {len(rows)} "
        "rounds and attacks)",
        "not claimed",
        same,
        same == len(rows),
    )
    for attack_label, recovered in (
        ("closed form", ("exact",)),
        ("cosine + TV", ("exact", "leaks")),
    ):
        found = verdict(grid, CAPTURED, attack_label, "none", settings)
        table.add(
            f"undefended, {attack_label} recovers the clients' digits from Flower's update "
            "(verdict on their mean MSE)",
            "Zhu et al. 2019; Geiping et al. 2020",
            found,
            found in recovered,
        )
    controls = all(row.holds for row in table.rows[-2:])
    for defense, source in (("censor T=20", "CENSOR Sec. V"), ("DP-SGD (Opacus)", "not claimed")):
        least = min(grid.to_gray(CAPTURED, a, defense) for a in grid.attacks)
        claim = (
            f"{defense} stops both attacks on Flower's updates (least MSE over the mean digit's)"
        )
        if controls:
            table.at_least(claim, source, least, settings.stopped_level)
        else:
            table.not_reproduced(
                claim, source, least, "the undefended attacks did not recover the digits"
            )
    fedavg = settings.flower.get("fedavg")
    if fedavg is not None and fedavg["label"] in grid.defenses:
        steps = f"{fedavg['local']['epochs']} local steps on one digit"
        for attack_label, recovered, source, how in (
            (
                "closed form",
                ("exact",),
                "not claimed",
                "still reads each digit off the update: every step saw the same image, so a weight "
                "row over its bias entry is that image",
            ),
            (
                "cosine + TV",
                ("exact", "leaks"),
                "Geiping et al. 2020, Sec. 6",
                "unrolled over the client's steps recovers the digits",
            ),
        ):
            found = verdict(grid, CAPTURED, attack_label, fedavg["label"], settings)
            table.add(
                f"undefended FedAvg ({steps}): {attack_label} {how} (verdict on their mean MSE)",
                source,
                found,
                found in recovered,
            )
    table.at_most(
        "no socket of the deployment had an address beyond loopback (count)",
        "not claimed",
        len(launch.foreign_addresses),
        0,
    )
    table.at_most(
        "no process of the deployment outlived it (count)",
        "not claimed",
        len(launch.left_running),
        0,
    )
    return table.check()
