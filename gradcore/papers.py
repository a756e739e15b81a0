"""Every paper's settings and reported numbers, as data, in one place per paper.

A chapter reads ``papers.DLG.settings(profile)`` for its hyper-parameters and
``papers.DLG.reported`` for the numbers its claims table compares against. The
``ci`` profile is a scaled-down run that finishes on two CPU cores; ``paper`` is the
paper's own setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from .registry import Registry

PAPERS: Registry = Registry("paper")
PROFILES = ("ci", "paper")


@dataclass(frozen=True)
class Paper:
    """One source: its citation, its settings per profile, and what it reports."""

    key: str
    citation: str
    common: dict
    profiles: dict
    reported: dict = field(default_factory=dict)

    def settings(self, profile: str) -> SimpleNamespace:
        """The settings of a profile (``ci`` or ``paper``) merged over the common ones."""
        if profile not in self.profiles:
            raise ValueError(f"unknown profile {profile!r} for {self.key}; known: {', '.join(self.profiles)}")
        return SimpleNamespace(**{**self.common, **self.profiles[profile]})


DLG = PAPERS.add("dlg", Paper(
    key="dlg",
    citation="L. Zhu, Z. Liu, S. Han. Deep Leakage from Gradients. NeurIPS 2019; "
             "B. Zhao, K. R. Mopuri, H. Bilen. iDLG: Improved Deep Leakage from Gradients. arXiv:2001.02610, 2020.",
    common={
        # Sec. 1 of the chapter: the linear unit (the source's demonstration).
        # The source's knobs are qualitative; these values span "works" to "fails" on digits.
        "linear_step": 0.01,
        "linear_iterations": 400,
        "linear_batch_sizes": (1, 2, 4, 8),
        "linear_steps": (0.0003, 0.001, 0.003, 0.01, 0.03),
        "linear_sigmas": (0.0, 0.01, 0.1, 1.0),
        "linear_bounds": (None, 10.0, 1.0, 0.1),
        # Sec. 3: LeNet, L-BFGS with lr 1 and 20 evaluations per step, U(-0.5, 0.5) weights
        # (Zhu et al., Sec. 4.1). Deviation: a strong-Wolfe line search, without which some
        # seeds leave the sigmoids' working range in the first step and never return.
        "lbfgs": {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "line_search": "strong_wolfe", "init": "randn"},
        "image_size": 32,
        "lenet_images": 2,
        "lenet_batch": 4,
        # iDLG, Sec. 4: LeNet, single samples, 100 output classes for the CIFAR-100 analogue.
        "digits_classes": 10,
        "photos_classes": 100,
    },
    profiles={
        "ci": {"threads": 2, "lenet_iterations": 100, "label_trials": 100, "dlg_label_trials": 10, "dlg_label_iterations": 10},
        "paper": {"threads": None, "lenet_iterations": 300, "label_trials": 1000, "dlg_label_trials": 100, "dlg_label_iterations": 300},
    },
    reported={
        # iDLG, Table 1: label accuracy of DLG vs iDLG at batch size 1 on LeNet.
        "label_accuracy": {"MNIST": (89.9, 100.0), "CIFAR-100": (83.3, 100.0), "LFW": (79.1, 100.0)},
        "lbfgs_iterations": 300,
    },
))
