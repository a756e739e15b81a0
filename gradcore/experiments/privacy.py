"""What epsilon protects: the book's attacks and DP-SGD training at a sweep of noise multipliers.

The experiment of the what-protects chapter's privacy section. One noise multiplier ``z``
is one Gaussian mechanism: the attacker reads a single sample's update, clipped to ``C``
with noise ``z * C`` (one DP-SGD step on that sample, the attacker's best case: no other
sample in the batch), while the deployment trains with DP-SGD clients at the same ``z``
and is accounted by :mod:`gradcore.privacy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from .. import data, evaluation, gradients, privacy
from .. import validation as check
from . import deployments, generative


def median_norm(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Median per-sample gradient norm: the clipping bound DP-SGD's authors suggest.

    Abadi et al. (CCS 2016, Sec. 3.1) advise clipping near the median of the unclipped
    norms; measured at the model's initialisation, so that the bound is active for about
    half of the samples. The guarantee holds only if the bound is set without the data it
    protects: pass public samples (:func:`public_samples`).
    """
    per_sample = gradients.per_sample_gradients(model, images, labels)
    norms = torch.sqrt(sum(g.flatten(1).double().pow(2).sum(1) for g in per_sample))
    return float(norms.median())


def public_samples(
    dataset: data.Dataset, private: Sequence[torch.Tensor], samples: int
) -> data.Dataset:
    """Up to ``samples`` images of ``dataset`` that are none of the ``private`` ones, in order.

    A differential-privacy guarantee covers a sample only if nothing of the mechanism was
    chosen with it: a clipping bound measured on the attacked image or on a client's
    training data would leak through the bound itself (Abadi et al., CCS 2016, Sec. 3.1
    treat the bound as a hyper-parameter set without the private data). ``private`` holds
    every image the guarantee protects (the attacked images, the clients' training sets);
    tensors of another image shape than ``dataset``'s cannot be among its samples and are
    skipped. The result is checked with :func:`gradcore.data.check_disjoint`.
    """
    check.positive_int("samples", samples)
    shape = tuple(dataset.shape)
    kept = [
        images.detach().reshape(-1, *images.shape[-3:]).cpu().to(dataset.images.dtype)
        for images in private
        if tuple(images.shape[-3:]) == shape
    ]
    excluded = torch.cat(kept) if kept else dataset.images[:0]
    try:
        public = dataset.without(excluded, tag="public")
    except check.GradcoreValueError as empty:  # nothing left: say what it was needed for
        raise check.GradcoreValueError(
            f"every image of {dataset.name} is private here: a clipping bound needs public samples"
        ) from empty
    public = public.subset(range(min(samples, len(public))), tag="public")
    data.check_disjoint(public, excluded, f"the public {dataset.name} a clipping bound is set on")
    return public


def scenario_bound(case: Sequence, public: data.Dataset) -> float:
    """:func:`median_norm` of a scenario's (first) model on the ``public`` samples."""
    first = case[0]
    device, dtype = first.inputs.device, first.inputs.dtype
    return median_norm(first.model, public.images.to(device, dtype), public.labels.to(device))


def clipping_bounds(
    cases: Mapping[str, Sequence],
    sources: Mapping[str, data.Dataset],
    clients: data.Dataset,
    samples: int,
) -> tuple[dict[str, float], dict[str, data.Dataset]]:
    """Each scenario's clipping bound, set on public samples of its data set.

    The samples exclude every image a guarantee of the page protects: the images of every
    scenario in ``cases`` (all are attacked) and the deployment's ``clients`` training data.
    Returns ``({scenario: bound}, {scenario: public samples})``.
    """
    private = [clients.images, *(case.inputs for each in cases.values() for case in each)]
    public = {name: public_samples(source, private, samples) for name, source in sources.items()}
    return {name: scenario_bound(cases[name], public[name]) for name in sources}, public


def dp_spec(multiplier: float, bound: float) -> dict:
    """The ``dp`` defense at noise multiplier ``multiplier``: clip to ``bound``, noise ``multiplier
    * bound``."""
    return {"defense": "dp", "bound": bound, "sigma": multiplier * bound}


def column(multiplier: float) -> str:
    """The sweep's column label of a noise multiplier."""
    return f"z {multiplier:g}"


def _attacked(sweep: evaluation.Evaluation, label: str) -> list[tuple[str, str]]:
    """The (scenario, attack) pairs that ran against column ``label`` (refusals left out)."""
    return [
        (s, a)
        for s in sweep.scenarios
        for a in sweep.attacks
        if sweep.ran(s, a, label) and not sweep.refused(s, a, label)
    ]


def attack_sweep(
    attacks: Mapping[str, Mapping],
    scenarios: Mapping[str, Sequence],
    multipliers: Sequence[float],
    bounds: Mapping[str, float],
    metrics: Sequence[str] = ("mse", "psnr"),
    seed: int = 0,
) -> evaluation.Evaluation:
    """Every attack on every one-image scenario at every noise multiplier; columns ``"z {z:g}"``.

    Each scenario is clipped at its own bound (``bounds``, e.g. :func:`scenario_bound`), so
    the noise relative to the clipped gradient, and so the guarantee, is the same ``z`` for
    every model.
    """
    for label, case in scenarios.items():
        if any(len(c.labels) != 1 for c in case):
            raise ValueError(
                f"scenario {label!r} shares a batch; a sample-level guarantee holds for one image "
                "only"
            )
    result = None
    for label, case in scenarios.items():
        columns = {column(z): dp_spec(z, bounds[label]) for z in multipliers}
        part = evaluation.matrix(
            attacks, columns, {label: case}, metrics, seed, progress=False, keep_refusals=True
        )
        result = part if result is None else result.update(part)
    return result


def utility(
    dataset,
    build,
    multipliers: Sequence[float],
    bound: float,
    rounds: int,
    seed: int = 0,
    **federated_options,
) -> tuple[dict, dict]:
    """FedSGD at every noise multiplier, twice: DP-SGD clients, and the ``dp`` defense on the batch
    gradient.

    Both clip at ``bound`` and add noise ``z * bound``; DP-SGD clips each sample and
    divides the noisy sum by the expected batch size, the ``dp`` defense clips the batch's
    mean gradient and adds the noise to it. The ``dp`` defense's clients are Poisson-sampled,
    as its client-level accountant assumes (DP-FedSGD); DP-SGD's are drawn as everywhere else
    (its sample-level accounting counts the steps each client took, without amplification by
    client sampling). Returns ``({z: log}, {z: log})``.
    """
    dp_sgd = {z: {"dp_sgd": {"noise_multiplier": z, "max_grad_norm": bound}} for z in multipliers}
    batch = {z: dp_spec(z, bound) for z in multipliers}
    runs = [
        deployments.run(
            dataset,
            build,
            specs,
            rounds,
            seed=seed,
            progress=False,
            **{**federated_options, **sampling},
        )
        for specs, sampling in ((dp_sgd, {}), (batch, {"client_sampling": "poisson"}))
    ]
    return tuple({z: run.log for z, run in each.items()} for each in runs)


def gains(sweep: evaluation.Evaluation, multipliers: Sequence[float]) -> dict:
    """``{attack: [best PSNR over the gray guess per z]}``, best over the scenarios; ``nan`` where
    none ran."""
    out = {attack: [] for attack in sweep.attacks}
    for z in multipliers:
        pairs = _attacked(sweep, column(z))
        for attack, series in out.items():
            ran = [sweep.gain(s, a, column(z)) for s, a in pairs if a == attack]
            series.append(max(ran) if ran else math.nan)
    return out


@dataclass
class PrivacyRow:
    """One noise multiplier: the guarantees, the accuracies, the best attack.

    ``release_epsilon`` is the exact epsilon of the one release the attacks read (q = 1, one
    step: :func:`gradcore.privacy.exact_epsilon`); ``sample_level`` the DP-SGD deployment's
    cumulative guarantee for its worst-off client; ``client_level`` the ``dp`` defense's
    under client sampling (DP-FedSGD); ``server_epsilon`` the same defense's against the
    server, which sees every update of its worst-off client (no sampling amplification).
    """

    multiplier: float
    sample_level: privacy.Guarantee
    client_level: privacy.Guarantee
    accuracy: float
    defense_accuracy: float
    best_gain: float
    best_attack: str
    least_lpips: float
    release_epsilon: float = math.nan
    server_epsilon: float = math.nan

    def cells(self) -> list:
        """The row as the chapter's table prints it."""
        return [
            self.multiplier,
            self.sample_level.delta,
            self.release_epsilon,
            self.sample_level.epsilon["rdp"],
            self.sample_level.epsilon["prv"],
            self.client_level.epsilon["rdp"],
            self.server_epsilon,
            self.accuracy,
            self.defense_accuracy,
            self.best_gain,
            self.best_attack,
            self.least_lpips,
        ]

    header = [
        "z",
        "delta",
        "epsilon of the attacked release (exact)",
        "epsilon, DP-SGD, sample (RDP)",
        "(PRV)",
        "epsilon, dp defense, client (RDP)",
        "(against the server, exact)",
        "accuracy, DP-SGD",
        "accuracy, dp defense",
        "best PSNR over gray (dB)",
        "best attack",
        "least LPIPS-alex",
    ]


def rows(
    sweep: evaluation.Evaluation,
    dp_sgd_logs: Mapping[float, object],
    defense_logs: Mapping[float, object],
    multipliers: Sequence[float],
    client_protocol: privacy.Protocol,
) -> list[PrivacyRow]:
    """Join the attack sweep, the federated runs of :func:`utility` and the accountants, one row per
    ``z``.

    The sample-level guarantee is the DP-SGD run's worst-off client's
    (:func:`gradcore.privacy.deployment_guarantee`); the client-level one is what the
    ``dp`` defense at the same ``z`` gives under ``client_protocol`` (DP-FedSGD).
    """
    out = []
    for z in multipliers:
        label, ran = column(z), _attacked(sweep, column(z))
        gain = {(s, a): sweep.gain(s, a, label) for s, a in ran}
        (scenario, attack), best = (
            max(gain.items(), key=lambda item: item[1]) if gain else (("", "none ran"), math.nan)
        )
        lpips = [
            v for v in (sweep.value(s, a, label, "lpips") for s, a in ran) if not math.isnan(v)
        ]
        seen = max(
            defense_logs[z].releases.values()
        )  # the dp defense's worst-off client: updates the server read
        out.append(
            PrivacyRow(
                z,
                privacy.deployment_guarantee(
                    dp_sgd_logs[z].participation, z, client_protocol.delta
                ),
                privacy.guarantee(dp_spec(z, 1.0), client_protocol),
                dp_sgd_logs[z].final(),
                defense_logs[z].final(),
                best,
                f"{attack} ({scenario})",
                min(lpips) if lpips else math.nan,
                privacy.exact_epsilon(z, 1, client_protocol.delta),
                privacy.exact_epsilon(z, seen, client_protocol.delta),
            )
        )
    return out


def averaged_sweep(
    attacks: Mapping[str, Mapping],
    scenarios: Mapping[str, Sequence],
    table: Sequence[PrivacyRow],
    multipliers: Sequence[float],
    bounds: Mapping[str, float],
    metrics: Sequence[str] = ("mse", "psnr"),
    seed: int = 0,
) -> tuple[evaluation.Evaluation, list[list]]:
    """What the deployment's cumulative guarantee covers: one sample's ``k`` releases, averaged.

    The DP-SGD deployment at noise multiplier ``z`` is accounted over its worst-off client's
    ``k`` steps. An attacker who sees ``k`` releases of the same sample's clipped gradient
    and averages them faces noise ``z / sqrt(k)``: one release at that multiplier (the
    attacker's best case the cumulative epsilon allows). Attacks every scenario there, for
    each ``z`` of ``multipliers``; returns the sweep (columns ``"z {z:g} / sqrt({k})"``) and
    one row per ``z``: ``[z, k, z / sqrt(k), exact epsilon of k releases, the deployment's
    RDP epsilon, best PSNR over gray, best attack]``.
    """
    by_z = {row.multiplier: row for row in table}
    levels = {
        z: (by_z[z].sample_level.protocol.steps, z / math.sqrt(by_z[z].sample_level.protocol.steps))
        for z in multipliers
    }
    result = None
    for label, case in scenarios.items():
        columns = {
            f"z {z:g} / sqrt({k})": dp_spec(averaged, bounds[label])
            for z, (k, averaged) in levels.items()
        }
        part = evaluation.matrix(
            attacks, columns, {label: case}, metrics, seed, progress=False, keep_refusals=True
        )
        result = part if result is None else result.update(part)
    rows = []
    for z, (k, averaged) in levels.items():
        label = f"z {z:g} / sqrt({k})"
        gain = {(s, a): result.gain(s, a, label) for s, a in _attacked(result, label)}
        (scenario, attack), best = (
            max(gain.items(), key=lambda item: item[1]) if gain else (("", "none ran"), math.nan)
        )
        rows.append(
            [
                z,
                k,
                averaged,
                privacy.exact_epsilon(z, k, by_z[z].sample_level.delta),
                by_z[z].sample_level.epsilon["rdp"],
                best,
                f"{attack} ({scenario})",
            ]
        )
    return result, rows


def matched(
    logs: Mapping[str, object], table: Sequence[PrivacyRow], tolerance: float
) -> list[list]:
    """Per deployment, the DP-SGD level of least epsilon that keeps its accuracy (within
    ``tolerance``).

    ``[label, accuracy, z, epsilon (RDP), DP-SGD accuracy]``; ``z`` is ``nan`` when no
    level of the sweep keeps that accuracy.
    """
    out = []
    for label, log in logs.items():
        kept = [row for row in table if row.accuracy >= log.final() - tolerance]
        best = min(kept, key=lambda row: row.sample_level.epsilon["rdp"]) if kept else None
        out.append(
            [
                label,
                log.final(),
                best.multiplier if best else math.nan,
                best.sample_level.epsilon["rdp"] if best else math.nan,
                best.accuracy if best else math.nan,
            ]
        )
    return out


def floor_gains(
    sweep: evaluation.Evaluation,
    floors: Mapping[str, Sequence[float]],
    multipliers: Sequence[float],
) -> dict:
    """``{attack: [median gain over the floor per z, dB]}``, the best scenario's; ``nan`` where none
    ran.

    For attacks that answer with a plausible image whatever the gradient says (the GAN-prior
    attacks), "stopped" is not "no better than gray" but "no better than the floor"
    (``floors``: per scenario, each case's MSE of the mean public image of its class,
    :func:`gradcore.experiments.generative.class_mean_mse`): the label and the public data,
    nothing more. The median over the cases keeps one image from deciding it.
    """
    out: dict = {attack: [] for attack in sweep.attacks}
    for z in multipliers:
        for attack, series in out.items():
            ran = [
                float(
                    np.median(generative.gain_over(floors[s], sweep.case_mse(s, attack, column(z))))
                )
                for s in sweep.scenarios
                if sweep.ran(s, attack, column(z))
            ]
            series.append(max(ran) if ran else math.nan)
    return out
