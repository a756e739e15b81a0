"""Gradient-inversion attacks, all behind one contract (:mod:`gradcore.attacks.base`).

``gradcore.attack(name, model, gradient, shape=..., ...)`` runs any attack in
:data:`ATTACKS` and returns an :class:`AttackResult`. One module per family, all
imported here so the registry is complete on ``import gradcore``:

* :mod:`~gradcore.attacks.matching`: DLG and iDLG (Zhu et al., 2019; Zhao et al., 2020);
* :mod:`~gradcore.attacks.inverting`: cosine + total variation, FedAvg unrolling and the
  EOT attacker (Geiping et al., 2020; Zhang et al., 2025);
* :mod:`~gradcore.attacks.analytic`: closed forms: one linear layer, the walk-back, the
  minimal MLP and the two-step CNN attack (Geiping et al., 2020; Qian et al.);
* :mod:`~gradcore.attacks.exclusivity`: the deterministic attacks of Pan et al. (2022);
* :mod:`~gradcore.attacks.regularised`: regularised gradient matching (Qian et al.);
* :mod:`~gradcore.attacks.generative`: searches with a generative prior: GGL, GIAS, GIFD
  (Li et al., 2022; Jeon et al., 2021; Fang et al., 2023);
* :mod:`~gradcore.attacks.shared`: what the families share: the Euclidean and cosine
  matching distances and iDLG's label inference.

The README's "Adding an attack" says how to add one.
"""

from . import analytic, exclusivity, generative, inverting, matching, regularised, shared
from .base import (
    ATTACKS,
    INITIALISERS,
    OPTIMISERS,
    AttackResult,
    Observation,
    OptimiserSteps,
    Steps,
    attack,
    empty_history,
    first_linear,
    last_linear,
    optimise,
    recorder,
)
from .matching import dlg, idlg
from .shared import cosine_distance, euclidean_distance, infer_labels

__all__ = [
    "ATTACKS",
    "INITIALISERS",
    "OPTIMISERS",
    "AttackResult",
    "Observation",
    "OptimiserSteps",
    "Steps",
    "analytic",
    "attack",
    "cosine_distance",
    "dlg",
    "empty_history",
    "euclidean_distance",
    "exclusivity",
    "first_linear",
    "generative",
    "idlg",
    "infer_labels",
    "inverting",
    "last_linear",
    "matching",
    "optimise",
    "recorder",
    "regularised",
    "shared",
]
