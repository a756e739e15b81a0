"""Attack and defense specs: the small dicts chapters and ``papers.py`` write, read in one place.

An **attack spec** is ``{"attack": registry name, **options}`` plus, optionally, where it runs
(``"scenarios"``, ``"defenses"``: lists of labels), whether the attacker is told the labels
(``"labels": "hidden"``) and options for some defenses only (``"per_defense": {label: {...}}``).
A **defense spec** is ``{"defense": registry name or None, **options}`` plus, for a deployment,
``"defended_rounds"`` (the defense runs in the first rounds only) or ``"dp_sgd"`` (DP-SGD clients
instead of a defense). :func:`attack_spec` and :func:`defense_spec` read them into frozen records,
so no other module needs to know which keys are reserved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from . import validation as check

#: The keys of an attack spec that say where and how it runs; every other key is an option of the
#: attack.
ATTACK_KEYS = ("attack", "scenarios", "defenses", "labels", "per_defense")
#: The keys of a defense spec that describe the deployment; every other key is an option of the
#: defense.
DEFENSE_KEYS = ("defense", "defended_rounds", "dp_sgd")
#: Sentinel: the spec does not say (``defended_rounds`` absent differs from ``None``, every round).
UNSET = object()


@dataclass(frozen=True)
class AttackSpec:
    """An attack spec, read: its registry ``name``, its ``options`` and where it runs."""

    name: str
    options: Mapping = field(default_factory=dict)
    scenarios: tuple | None = None
    defenses: tuple | None = None
    labels: str = "known"
    per_defense: Mapping = field(default_factory=dict)

    def runs_on(self, scenario: str, defense: str | None = None) -> bool:
        """Whether the spec lets the attack run on this scenario (and defense)."""
        return (self.scenarios is None or scenario in self.scenarios) and (
            defense is None or self.defenses is None or defense in self.defenses
        )

    def config(self, defense: str | None = None) -> dict:
        """The attack's options against ``defense``: its own, updated by that defense's
        ``per_defense`` entry."""
        return {**self.options, **self.per_defense.get(defense, {})}

    def without_limits(self) -> dict:
        """The spec as a dict with its attack and options, but neither ``scenarios`` nor
        ``defenses``."""
        kept = {"attack": self.name, **self.options}
        if self.labels != "known":
            kept["labels"] = self.labels
        if self.per_defense:
            kept["per_defense"] = dict(self.per_defense)
        return kept


@dataclass(frozen=True)
class DefenseSpec:
    """A defense spec, read: its registry ``name`` (None: undefended), its ``options``, and how a
    deployment runs it."""

    name: str | None
    options: Mapping = field(default_factory=dict)
    defended_rounds: object = UNSET
    dp_sgd: Mapping | None = None


def attack_spec(spec: Mapping) -> AttackSpec:
    """Read an attack spec (see the module docstring); a spec without ``"attack"`` is refused by
    name."""
    if not isinstance(spec, Mapping) or "attack" not in spec:
        raise check.GradcoreValueError(
            "an attack spec is a dict with an 'attack' registry name, e.g. {'attack': "
            f"'closed_form'}}; got {spec!r}"
        )
    limits = {key: tuple(spec[key]) for key in ("scenarios", "defenses") if key in spec}
    return AttackSpec(
        spec["attack"],
        {k: v for k, v in spec.items() if k not in ATTACK_KEYS},
        labels=spec.get("labels", "known"),
        per_defense=dict(spec.get("per_defense", {})),
        **limits,
    )


def defense_spec(spec: Mapping) -> DefenseSpec:
    """Read a defense spec (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise check.GradcoreTypeError(
            "a defense spec is a dict such as {'defense': 'clip', 'bound': 4.0}; got "
            f"{check.describe(spec)}"
        )
    return DefenseSpec(
        spec.get("defense"),
        {k: v for k, v in spec.items() if k not in DEFENSE_KEYS},
        spec.get("defended_rounds", UNSET),
        spec.get("dp_sgd"),
    )
