"""Ready-made federated scenarios and the chapters' experiments, so chapters stay a handful of
calls.

* :class:`Scenario`, :func:`scenario`, :func:`scenarios` (from :mod:`gradcore.scenarios`): one
  client's private batch and the global model; it produces what the client shares
  (optionally defended) and runs any registered attack on it with the truth attached;
* :mod:`gradcore.experiments.common`: the small experiments several chapters share (label
  trials, steps to a PSNR, single-image runs);
* :mod:`gradcore.experiments.minimal`: the minimal-structure chapter's sweeps, tables,
  galleries and race;
* :mod:`gradcore.experiments.exclusivity`: the neuron-exclusivity chapter's attack sweep;
* :mod:`gradcore.experiments.generative`: CENSOR's GAN-prior rows (generators trained here,
  Observation 2);
* :mod:`gradcore.experiments.privacy`: what epsilon protects (attacks and DP-SGD at a sweep of noise
  multipliers);
* :mod:`gradcore.experiments.protection`: what protects a deployment (the settings, attacks and
  deployments both what-protects pages build);
* :mod:`gradcore.experiments.deployments`: federated deployments, one entry point (:func:`run`:
FedSGD
  once per deployment spec), and where each is weakest (rounds, defense strength, architecture);
* :mod:`gradcore.experiments.diagnostics`: what a defense does to the gradient and what it costs
  (CENSOR's layer cosines, its misdirection, overheads);
* :mod:`gradcore.experiments.curious_server`: the book's attacks on a real Flower deployment's
  captured updates, beside gradcore's own gradients of the same clients.
"""

from ..scenarios import Scenario, scenario, scenarios
from . import (
    curious_server,
    deployments,
    diagnostics,
    exclusivity,
    generative,
    minimal,
    privacy,
    protection,
)
from .common import (
    attack_rows,
    attack_single_images,
    batch_slowdown,
    binomial_spread,
    final_table,
    first_below,
    keep_snapshots,
    label_accuracy,
    label_outcomes,
    linear_descent_draws,
    mean_final,
    median_steps,
    steps_to_psnr,
)

__all__ = [
    "Scenario",
    "attack_rows",
    "attack_single_images",
    "batch_slowdown",
    "binomial_spread",
    "curious_server",
    "deployments",
    "diagnostics",
    "exclusivity",
    "final_table",
    "first_below",
    "generative",
    "keep_snapshots",
    "label_accuracy",
    "linear_descent_draws",
    "median_steps",
    "label_outcomes",
    "mean_final",
    "minimal",
    "privacy",
    "protection",
    "scenario",
    "scenarios",
    "steps_to_psnr",
]
