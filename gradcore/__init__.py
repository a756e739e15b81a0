"""gradcore: gradient inversion, exact and executable.

The library behind the gradcore book. One module per concept:

* :mod:`gradcore.data`: offline datasets (digits, photos, optional CIFAR/ImageNet);
* :mod:`gradcore.models`: the attacked networks (linear unit, MLP, LeNet, ConvNet, ResNet);
* :mod:`gradcore.gradients`: what a client computes (gradients, local updates);
* :mod:`gradcore.defenses`: what a client does to its gradient first (noise, clipping, top-k,
Soteria, CENSOR);
* :mod:`gradcore.client`: what a client shares: its gradient or update, after its defense;
* :mod:`gradcore.federated`: Dirichlet non-i.i.d. clients and FedSGD with a defense on every update;
* :mod:`gradcore.privacy`: the (epsilon, delta) of clipped Gaussian noise (Opacus's accountants) and
DP-SGD clients;
* :mod:`gradcore.evaluation`: every attack against every defense, scored;
* :mod:`gradcore.attacks`: every attack behind one contract, one module per family (matching,
inverting,
  analytic, exclusivity, regularised, generative);
* :mod:`gradcore.flower`: a real Flower deployment on loopback, with a curious server that keeps
every client's update;
* :mod:`gradcore.scenarios`: a client's situation (its private batch, the model it received), ready
to attack;
* :mod:`gradcore.experiments`: the chapters' experiments (scenarios re-exported);
* :mod:`gradcore.analysis`: the exact analyses, a wing of their own (float64 numpy where the maths
is exact):
  ``dense`` (one dense network), ``linear`` (the linear unit), ``walkback`` (Geiping et al.'s
  Proposition 3.1), ``exclusivity`` (Pan et al., 2022: ExAN, secure boundary, artifact batches,
  reduction), ``minimal`` (minimal model structure: closed forms, counting, deconvolution), ``blas``
  (BLAS thread control);
* :mod:`gradcore.metrics`: MSE, PSNR, SSIM, LPIPS;
* :mod:`gradcore.plots`: the book's figures;
* :mod:`gradcore.claims`: paper-vs-reproduced tables that chapters assert on;
* :mod:`gradcore.papers`: every paper's hyper-parameters and reported numbers, as data;
* :mod:`gradcore.specs`: attack and defense specs (the dicts papers and chapters write) read in one
place;
* :mod:`gradcore.validation`: the checks every entry point runs on its arguments, and the
  library's errors (:class:`GradcoreError`, :class:`GradcoreValueError`,
  :class:`GradcoreTypeError`).

The book's own tooling is a wing of its own, :mod:`gradcore.book` (the ``gradcore`` command, chapter
execution, the output check, the Status and results pages, the browser check, the job pool): the
science above never imports it.
"""

from __future__ import annotations

import importlib
import os
import random

__version__ = "0.1.0"

#: Submodules, imported on first use (``gradcore.data``, ``from gradcore import data``): the command
#: line (``gradcore run``, ``gradcore test``) and the output check start without importing torch.
SUBMODULES = (
    "analysis",
    "attacks",
    "book",
    "claims",
    "client",
    "data",
    "defenses",
    "errors",
    "evaluation",
    "experiments",
    "federated",
    "flower",
    "generative",
    "gradients",
    "metrics",
    "models",
    "papers",
    "plots",
    "privacy",
    "registry",
    "scenarios",
    "specs",
    "training",
    "validation",
)
#: Names the package exports from its submodules, imported with them on first use.
EXPORTS = {
    "ATTACKS": "attacks",
    "AttackResult": "attacks",
    "attack": "attacks",
    "infer_labels": "attacks",
    "Claims": "claims",
    "DATASETS": "data",
    "DEFENSES": "defenses",
    "defend": "defenses",
    "share": "client",
    "shared_gradient": "client",
    "batch_gradient": "gradients",
    "per_sample_gradients": "gradients",
    "METRICS": "metrics",
    "MODELS": "models",
    "GradcoreError": "errors",
    "GradcoreTypeError": "errors",
    "GradcoreValueError": "errors",
}


def __getattr__(name: str):
    if name in SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in EXPORTS:
        return getattr(importlib.import_module(f".{EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'gradcore' has no attribute {name!r}")


def __dir__() -> list:
    return sorted({*globals(), *SUBMODULES, *EXPORTS})


def setup(seed: int = 0, threads: int | None = 2, deterministic: bool = True):
    """Seed every generator, fix the thread count and pick the device.

    A fixed thread count makes CPU reductions, and so every printed number, repeat
    from run to run on one machine. The environment variable ``GRADCORE_THREADS``
    overrides ``threads`` (``gradcore drift`` uses it to measure how far the book's
    numbers move with the thread count).

    Returns
    -------
    torch.device
        ``cuda`` when a GPU is present, else ``cpu``.
    """
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    override = os.environ.get("GRADCORE_THREADS", "").strip()
    if override:
        if not override.isdigit() or int(override) < 1:
            raise ValueError(f"GRADCORE_THREADS must be a positive whole number, got {override!r}")
        threads = int(override)
    if threads is not None:
        torch.set_num_threads(threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


__all__ = sorted({*SUBMODULES, *EXPORTS, "setup"})
