"""Federated deployments, one entry point: FedSGD once per deployment spec, then where each is
weakest.

:func:`run` trains one FedSGD per deployment (a defense on every client update, CENSOR limited to
its first rounds, Zhang et al., NDSS 2025, Sec. III; or DP-SGD clients) from the same initial
model and client sampling, and keeps the global models an attacker would pick; a deployment's
utility is its log, its weakness what the attacks make of those models:

* :func:`over_rounds`: every attack on the update each deployment shares at several rounds (Table
V);
* :func:`strength_sweep`: one defense raised until every attack is stopped;
* :func:`with_architecture`: a defense that changes the model (exclusivity reduction, Pan et al.,
  USENIX Security 2022) as one more column of an :class:`gradcore.evaluation.Evaluation`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Mapping, NamedTuple, Sequence

import torch
from torch import nn

from .. import data, federated, models, specs
from ..evaluation import Cell, Evaluation, matrix, merge
from ..scenarios import scenarios as draw_scenarios


class Run(NamedTuple):
    """One deployment's FedSGD: its log (accuracy over rounds, releases) and the global models it
    kept."""

    log: federated.FederatedLog
    snapshots: dict


def training_and_test(
    dataset: data.Dataset,
    test_fraction: float = 0.25,
    seed: int = 0,
    test_set: data.Dataset | None = None,
) -> tuple[data.Dataset, data.Dataset]:
    """The clients' training data and the test set of a :func:`run` with these arguments.

    With ``test_set``, ``dataset`` is the training set as it is; without, ``dataset`` is split
    by :func:`gradcore.data.split`. Whatever must stay disjoint from the clients' data (the
    public samples a DP clipping bound is set on) is checked against the first part.
    """
    if test_set is not None:
        return dataset, test_set
    return data.split(dataset, test_fraction, seed)


def run(
    dataset: data.Dataset,
    model: str | Callable[[], nn.Module],
    deployments: Mapping[str, Mapping],
    rounds: int,
    at: Sequence[int] = (),
    seed: int = 0,
    test_fraction: float = 0.25,
    test_set: data.Dataset | None = None,
    model_options: dict | None = None,
    progress: bool = True,
    **options,
) -> dict[str, Run]:
    """FedSGD per deployment from the same initial model and client sampling; the models at rounds
    ``at`` kept.

    Parameters
    ----------
    model : str or callable
        A :func:`gradcore.models.build` name (built with ``seed`` and ``model_options``) or a
        function returning a fresh network, the same initial weights on every call.
    deployments : mapping
        Label to ``{"defense": name or None, "defended_rounds": T, **defense options}`` or
        ``{"dp_sgd": {"noise_multiplier": z, "max_grad_norm": C}}`` (DP-SGD clients). A spec's own
        ``defended_rounds`` limits its defense to the first ``T`` rounds (``None``: every round),
        overriding one given in ``options``.
    at : sequence of int
        Server steps after which to keep the global model (``0``: the initial model).
    test_set : Dataset, optional
        With it, ``dataset`` is the training set as it is (a data set's own split,
        :func:`gradcore.data.train_test`); without, ``dataset`` is split by
        :func:`gradcore.data.split`.
    options
        Go to :func:`gradcore.federated.fedsgd_snapshots` (clients, per_round, alpha, batch_size,
        lr, ...).

    Returns
    -------
    dict
        ``{label: Run(log, snapshots)}``.
    """
    train_set, test_set = training_and_test(dataset, test_fraction, seed, test_set)
    if isinstance(model, str):
        name = model

        def model() -> nn.Module:
            return models.build(
                name, train_set.shape, train_set.num_classes, seed=seed, **(model_options or {})
            )

    runs = {}
    for label, spec in deployments.items():
        read = specs.defense_spec(spec)
        limit = (
            {} if read.defended_rounds is specs.UNSET else {"defended_rounds": read.defended_rounds}
        )
        runs[label] = Run(
            *federated.fedsgd_snapshots(
                model(),
                train_set,
                test_set,
                rounds,
                at,
                defense=read.name,
                defense_options=dict(read.options),
                seed=seed,
                progress=progress,
                dp_sgd=read.dp_sgd,
                **{**options, **limit},
            )
        )
    return runs


def with_architecture(
    evaluation: Evaluation,
    attacks: Mapping[str, Mapping],
    label: str,
    scenarios: Mapping[str, Sequence],
    seed: int = 0,
    progress: bool = True,
    baseline: str = "none",
) -> Evaluation:
    """Add a column ``label`` for a defense that changes the architecture, e.g. exclusivity
    reduction.

    Exclusivity reduction (Pan et al., USENIX Security 2022, Sec. 6) removes the ReLU after
    the first hidden layer, so the client shares the plain gradient of another model.
    ``scenarios`` maps a scenario of ``evaluation`` to its cases on the changed model (the
    same private batches). Every attack that ran undefended on that scenario attacks the
    changed model; one that refuses every case was defeated by the change and scores the
    gray guess (a refused :class:`Cell`), not "not applicable". Scenarios left out get "n/a".
    ``baseline`` is the column of the unchanged model (an attack that ran there, or refused
    there, attacks the changed model).
    ``evaluation`` is extended in place and returned.
    """
    for scenario_label, cases in scenarios.items():
        parsed = {a: specs.attack_spec(spec) for a, spec in attacks.items()}
        ran = {
            a: spec.without_limits()
            for a, spec in parsed.items()
            if evaluation.ran(scenario_label, a, baseline) and spec.defenses is None
        }
        changed = matrix(
            ran,
            {label: {"defense": None}},
            {scenario_label: cases},
            evaluation.metrics,
            seed,
            progress,
        )
        for attack_label in ran:
            if (
                scenario_label,
                attack_label,
            ) in changed.skipped:  # refused every case: the change blocked it
                reason = changed.skipped[(scenario_label, attack_label)]
                evaluation.add(
                    Cell(
                        scenario_label,
                        attack_label,
                        label,
                        dict(changed.reference[scenario_label]),
                        [torch.full_like(case.inputs, 0.5) for case in cases],
                        0.0,
                        [reason] * len(cases),
                        len(cases),
                    )
                )
            elif changed.ran(scenario_label, attack_label, label):
                evaluation.add(changed.cell(scenario_label, attack_label, label))
    if label not in evaluation.defenses:
        evaluation.defenses.append(label)
    return evaluation


def over_rounds(
    attacks: Mapping[str, Mapping],
    deployments: Mapping[str, Mapping],
    snapshots: Mapping[str, Mapping],
    dataset,
    batch_size: int = 1,
    images: int = 1,
    metrics: Sequence[str] = ("mse", "psnr"),
    seed: int = 0,
    progress: bool = True,
) -> Evaluation:
    """Attack the update each deployment shares at several training rounds (CENSOR, Sec. III, Table
    V).

    One scenario per round ``t`` ("round t"): the private images are the same at every
    round (drawn with ``seed``), the model is the deployment's global model after ``t``
    steps (``snapshots[label][t]``, from :func:`run`), and the shared
    gradient is defended as the deployment defends that round (not at all once
    ``t >= defended_rounds``). Columns are the deployments; a refused attack is kept as a
    refusal (``keep_refusals``). :meth:`Evaluation.weakest` then names the round where a
    deployment is weakest.
    """
    rounds = sorted({t for runs in snapshots.values() for t in runs})
    result = Evaluation(
        [f"round {t}" for t in rounds], list(attacks), list(deployments), list(metrics)
    )
    for label, spec in deployments.items():
        limit = spec.get("defended_rounds")
        for t in rounds:
            if t not in snapshots[label]:
                continue
            model = snapshots[label][t]
            cases = draw_scenarios(
                dataset, lambda _, m=model: copy.deepcopy(m), batch_size, images, seed
            )
            shared = (
                {k: v for k, v in spec.items() if k != "defended_rounds"}
                if limit is None or t < limit
                else {"defense": None}
            )
            part = matrix(
                attacks,
                {label: shared},
                {f"round {t}": cases},
                metrics,
                seed,
                progress=False,
                keep_refusals=True,
            )
            merge(result, part)
    return result


def strength_sweep(
    attacks: Mapping[str, Mapping],
    scenarios: Mapping[str, Sequence],
    defense: str,
    parameter: str,
    levels: Sequence[float],
    level: float = 1.0,
    start: Evaluation | None = None,
    start_label: str | None = None,
    metrics: Sequence[str] = ("mse", "psnr"),
    seed: int = 0,
    **options,
) -> tuple[Evaluation, float | None]:
    """Raise one defense's strength until every attack is stopped; only attacks still leaking go on.

    At each of the increasing ``levels`` of ``parameter`` (e.g. the noise's ``sigma``),
    the (scenario, attack) pairs that ended below ``level`` times the gray guess's MSE at
    the previous level are attacked again; a stopped pair stays stopped (a stronger
    defense perturbs the same gradient more). ``start`` / ``start_label`` give the
    first level's results from an existing matrix. Returns the sweep (one column per
    level, labelled ``"{parameter} {value}"``; a pair is scored at the levels it ran at)
    and the first level at which no pair leaks (``None`` if none of ``levels`` does).
    """
    columns = [f"{parameter} {value:g}" for value in levels]
    result = Evaluation(list(scenarios), list(attacks), columns, list(metrics))
    leaking = [(s, a) for s in scenarios for a in attacks]
    first = None
    for value, column in zip(levels, columns):
        if start is not None and value == levels[0]:
            part = Evaluation(
                start.scenarios,
                start.attacks,
                [column],
                start.metrics,
                truths=start.truths,
                reference=start.reference,
            )
            for cell in start.select(defense=start_label):
                if cell.scenario in scenarios and cell.attack in attacks:
                    part.add(dataclasses.replace(cell, defense=column))
        else:
            part = Evaluation(list(scenarios), list(attacks), [column], list(metrics))
            for s in scenarios:
                names = [a for s2, a in leaking if s2 == s]
                if names:
                    merge(
                        part,
                        matrix(
                            {a: attacks[a] for a in names},
                            {column: {"defense": defense, parameter: value, **options}},
                            {s: scenarios[s]},
                            metrics,
                            seed,
                            progress=False,
                            keep_refusals=True,
                        ),
                    )
        merge(result, part)
        leaking = [
            (s, a)
            for s, a in leaking
            if result.ran(s, a, column) and result.to_gray(s, a, column) < level
        ]
        if not leaking:
            first = value
            break
    return result, first


def logs(runs: Mapping[str, Run]) -> dict:
    """``{label: FederatedLog}`` of :func:`run`'s result: a deployment's utility, without the models
    it kept."""
    return {label: each.log for label, each in runs.items()}
