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


IG = PAPERS.add("inverting_gradients", Paper(
    key="inverting_gradients",
    citation="J. Geiping, H. Bauermeister, H. Droege, M. Moeller. Inverting Gradients: How easy is it to break "
             "privacy in federated learning? NeurIPS 2020 (arXiv:2003.14053).",
    common={
        # Sec. 3, Prop. 3.1: the walk-back, checked on random float64 networks.
        "walk_widths": (64, 48, 32, 10),
        "survey_widths": (64, 32, 32, 10),
        "survey_trials": 2000,
        "mixture_batch": 8,
        "invariance_scales": (1.0, 1e-2, 1e-4, 1e-6),
        "mlp_widths": (128, 64),
        # Sec. 4: the attack. Adam on signed gradients, step decay at 3/8, 5/8, 7/8, boxed pixels.
        "cosine": {"lr": 0.1, "tv_weight": 1e-4, "init": "rand", "signed": True, "decay": True},
        # DLG's attack as the baseline (Zhu et al., 2019), as in the DLG chapter.
        "euclidean": {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "line_search": "strong_wolfe", "init": "randn"},
        "image_size": 32,
        # A small trained ReLU network in place of the paper's trained ResNet-20 (no pretrained weights offline).
        "convnet_width": 16,
        "train_epochs": 15,
        "train_lr": 1e-3,
        # Which of the paper's Sec. 5 settings each local-training row corresponds to.
        "paper_equivalent": {"1 step, lr 1e-4": "1 step, lr 1e-4", "3 steps, lr 1e-4": "100 steps, lr 1e-4",
                             "100 steps, lr 1e-4": "100 steps, lr 1e-4", "3 steps, lr 1e-2": "5 steps, lr 1e-2",
                             "5 steps, lr 1e-2": "5 steps, lr 1e-2", "3 steps, lr 1e-1": "5 steps, lr 1e-1",
                             "5 steps, lr 1e-1": "5 steps, lr 1e-1"},
    },
    profiles={
        "ci": {"threads": 2, "attack_images": 2, "cosine_iterations": 500, "euclidean_steps": 50, "local_iterations": 200,
               "local_settings": {"1 step, lr 1e-4": (1, 1e-4), "3 steps, lr 1e-4": (3, 1e-4),
                                  "3 steps, lr 1e-2": (3, 1e-2), "3 steps, lr 1e-1": (3, 1e-1)}},
        "paper": {"threads": None, "attack_images": 8, "cosine_iterations": 4800, "euclidean_steps": 300, "local_iterations": 4800,
                  "local_settings": {"1 step, lr 1e-4": (1, 1e-4), "100 steps, lr 1e-4": (100, 1e-4),
                                     "5 steps, lr 1e-2": (5, 1e-2), "5 steps, lr 1e-1": (5, 1e-1)}},
    },
    reported={
        # Sec. 4 / Fig. 2: untrained shallow smooth network (DLG's setting) vs trained ResNet.
        "euclidean_vs_cosine_untrained": (46.25, 18.00),
        # Sec. 5, Fig. 5: local steps and learning rates (PSNR, dB).
        "local_steps": {"1 step, lr 1e-4": 19.77, "100 steps, lr 1e-4": 19.39, "5 steps, lr 1e-2": 23.74, "5 steps, lr 1e-1": 4.96},
        # Table 2: (epochs, images, batch size) -> PSNR.
        "table2": {(1, 4, 2): 16.92, (1, 8, 2): 14.66, (1, 8, 8): 16.49, (5, 1, 1): 25.05, (5, 8, 8): 16.58},
        # Sec. 5: width and depth of ResNets.
        "width": {16: 19.02, 128: 22.94},
        "depth": {18: 22.04, 34: 21.59, 50: 20.98},
    },
))
