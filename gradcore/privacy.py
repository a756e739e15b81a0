"""Differential privacy: the (epsilon, delta) a clipped and noised update gives, and DP-SGD clients.

Two mechanisms of the book add Gaussian noise to a clipped gradient:

* the ``dp`` defense (:func:`gradcore.defenses.clip_then_noise`): a client clips its whole
  update to norm ``bound`` and adds noise of standard deviation ``sigma``;
* DP-SGD clients (Abadi et al., CCS 2016, Algorithm 1), run with Opacus's
  ``PrivacyEngine`` (Yousefpour et al., 2021): every *sample's* gradient is clipped to
  ``max_grad_norm``, noise of standard deviation ``noise_multiplier * max_grad_norm`` is
  added to their sum, and the batch is drawn by Poisson sampling (:func:`dp_sgd_gradient`).

Both are Gaussian mechanisms with noise multiplier ``z = sigma / bound``; what they
guarantee depends on who is protected from whom, which a :class:`Protocol` states:

* ``unit="sample"``: sample-level DP-SGD inside a client. The noise is added by the
  client, so the guarantee holds against the server that reads the client's update, the
  attacker of every chapter. It needs the clipping to bound one sample: per-sample
  clipping (DP-SGD clients), or the ``dp`` defense on a batch of one sample.
* ``unit="client"``: client-level DP-FedSGD (McMahan et al., ICLR 2018): ``sample_rate``
  is the share of clients sampled per round, ``steps`` the rounds. It bounds what anyone
  who sees only the aggregate or the trained model learns about a client; it says nothing
  about a server that reads individual updates (that server knows which clients it
  sampled). Counting one client's noise in the aggregate (the other clients' only add to
  it) makes the figure conservative.

The accountants are Opacus's: Renyi DP (Mironov, CSF 2017; Mironov et al., 2019, with the
conversion of Balle et al., AISTATS 2020) and the privacy random variable accountant
(Gopi et al., NeurIPS 2021). The plain ``noise`` defense has no guarantee at all: without
clipping the sensitivity of a gradient is unbounded, so no noise level bounds epsilon.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from . import defenses, gradients
from . import validation as check

#: The accountants :func:`epsilon` knows.
ACCOUNTANTS = ("rdp", "prv")

#: The PRV accountant is tried only where the RDP bound is at most this. Measured here
#: (Opacus 1.6.0, sample rate 0.48, 38 steps): at RDP epsilon 420 PRV returned 398 in 1 s;
#: at 1,900 it returned infinity (its grid does not reach, although the true value is finite);
#: at 8,200 it took 69 s, and at noise multiplier 0.01 it exhausted 24 GiB of memory.
PRV_LIMIT = 1000.0

#: The failure probability the book states every epsilon at.
DEFAULT_DELTA = 1e-5


@dataclass(frozen=True)
class Protocol:
    """What is protected, from whom and for how long (see the module's text).

    Attributes
    ----------
    unit : {"sample", "client"}
        Sample-level DP-SGD inside a client, or client-level DP-FedSGD.
    sample_rate : float
        Poisson sampling rate: of a client's samples per step, or of clients per round.
    steps : int
        Noisy releases composed: the client's local steps over training, or the rounds.
    delta : float
        The failure probability of the (epsilon, delta) guarantee.
    batch_size : int
        Samples in the gradient the ``dp`` defense clips (sample unit only): its clipping
        bounds one sample only when the batch is one sample.
    """

    unit: str
    sample_rate: float
    steps: int
    delta: float = DEFAULT_DELTA
    batch_size: int = 1

    def __post_init__(self):
        if self.unit not in ("sample", "client"):
            raise check.GradcoreValueError(
                f"a protocol's unit is 'sample' or 'client', got {self.unit!r}"
            )
        _check_accounting(1.0, self.sample_rate, self.steps, self.delta)
        check.positive_int("batch_size", self.batch_size)


@dataclass(frozen=True)
class Guarantee:
    """An (epsilon, delta) statement: ``epsilon`` maps each accountant to its value.

    ``math.inf``: no guarantee (no noise); ``math.nan``: the accountant cannot compute it
    here (``note`` says why).
    """

    noise_multiplier: float
    epsilon: dict
    delta: float
    protocol: Protocol
    note: str = ""


def _check_accounting(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float
) -> None:
    check.number("the noise multiplier", noise_multiplier, low=0)
    check.number("the sample rate", sample_rate, low=0, high=1, low_open=True)
    check.integer("steps", steps, low=0)
    check.number("delta", delta, low=0, high=1, low_open=True, high_open=True)


def epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float = DEFAULT_DELTA,
    accountant: str = "rdp",
) -> float:
    """Epsilon of ``steps`` Poisson-subsampled Gaussian releases, from Opacus's accountant.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping bound (``z``); 0 gives ``inf``.
    sample_rate : float
        Poisson sampling rate ``q`` in (0, 1].
    steps : int
        Releases composed (0 gives 0: nothing was released).
    delta : float
        Failure probability.
    accountant : {"rdp", "prv"}
        Renyi DP with Opacus's default orders, or the PRV accountant. PRV returns ``nan``
        where the RDP bound exceeds :data:`PRV_LIMIT` (beyond its numerical range).
    """
    if accountant not in ACCOUNTANTS:
        raise check.GradcoreValueError(
            f"unknown accountant {accountant!r}; known: {', '.join(ACCOUNTANTS)}"
        )
    _check_accounting(noise_multiplier, sample_rate, steps, delta)
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return _accounted(
        float(noise_multiplier), float(sample_rate), int(steps), float(delta), accountant
    )


@functools.lru_cache(maxsize=4096)
def _accounted(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str
) -> float:
    # Cached: a federated run's clients share few (rate, steps) pairs, and PRV costs up to a second
    # each.
    from opacus.accountants import PRVAccountant, RDPAccountant

    if (
        accountant == "prv"
        and _accounted(noise_multiplier, sample_rate, steps, delta, "rdp") > PRV_LIMIT
    ):
        return math.nan
    chosen = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    chosen.history = [(noise_multiplier, sample_rate, steps)]
    with warnings.catch_warnings():
        # RDP warns when its best order is the smallest tried: the bound is then loose, still valid.
        warnings.simplefilter("ignore")
        return float(chosen.get_epsilon(delta=delta))


def exact_epsilon(
    noise_multiplier: float, releases: int = 1, delta: float = DEFAULT_DELTA
) -> float:
    """The exact epsilon of ``releases`` unsampled Gaussian releases (q = 1), no accountant
    involved.

    One Gaussian release of sensitivity 1 with noise ``z`` is (epsilon, delta)-DP exactly when
    ``Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z) <= delta`` (Balle and
    Wang, ICML 2018, Theorem 8); ``k`` such releases compose to one release with noise
    ``z / sqrt(k)`` (the Gaussian mechanism's composition is Gaussian, Dong, Roth and Su,
    2022). This is what an attacker who sees every release of one sample faces, and it checks
    the accountants independently: at q = 1 RDP must bound it from above and PRV approach it.
    """
    from scipy import optimize, stats

    _check_accounting(noise_multiplier, 1.0, releases, delta)
    if releases == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    sigma = noise_multiplier / math.sqrt(releases)
    half = 1 / (2 * sigma)

    def excess(eps: float) -> float:  # the second term in log space: e^epsilon overflows first
        return (
            stats.norm.cdf(half - eps * sigma)
            - math.exp(eps + stats.norm.logcdf(-half - eps * sigma))
            - delta
        )

    if excess(0.0) <= 0:
        return 0.0
    return float(
        optimize.brentq(excess, 0.0, 1 / (2 * sigma**2) + 10 / sigma + 100, xtol=1e-12, rtol=1e-12)
    )


def noise_multiplier(spec: Mapping) -> float:
    """``z`` of a deployment spec: the defense's own (:class:`gradcore.defenses.Privacy`: ``sigma /
    bound`` of ``dp``, 0 for ``none`` and ``clip``), Opacus's of ``dp_sgd``, 0 without a defense.

    A defense that declares no Gaussian mechanism is refused with its own reason (the plain
    ``noise`` defense: without clipping a gradient's sensitivity is unbounded and no noise
    level bounds epsilon).
    """
    if not isinstance(spec, Mapping):
        raise check.GradcoreTypeError(
            "a deployment spec must be a dict such as {'defense': 'dp', 'bound': 1.0, 'sigma': "
            f"0.5}}; got {check.describe(spec)}"
        )
    if spec.get("dp_sgd") is not None:
        options = spec["dp_sgd"]
        if not isinstance(options, Mapping) or "noise_multiplier" not in options:
            raise check.GradcoreValueError(
                "a dp_sgd deployment needs {'noise_multiplier': z, 'max_grad_norm': C}; got "
                f"{options!r}"
            )
        check.number("the dp_sgd noise_multiplier", options["noise_multiplier"], low=0)
        return float(options["noise_multiplier"])
    defense = spec.get("defense")
    if defense is None:
        return 0.0
    mechanism = defenses.privacy_of(
        defense
    )  # the defense's own declaration (gradcore.defenses.Privacy)
    if mechanism.noise_multiplier is None:
        raise check.GradcoreValueError(mechanism.why)
    missing = [key for key in mechanism.needs if key not in spec]
    if missing:
        raise check.GradcoreValueError(
            f"the {defense} defense's spec needs {' and '.join(missing)}; got {dict(spec)!r}"
        )
    for key in mechanism.needs:
        check.number(f"the {defense} defense's {key}", spec[key], low=0, low_open=key == "bound")
    return mechanism.noise_multiplier(spec)


def guarantee(spec: Mapping, protocol: Protocol) -> Guarantee:
    """The (epsilon, delta) a deployment ``spec`` gives under ``protocol``, by both accountants.

    ``spec`` is a deployment as the chapters write it: ``{"defense": "dp", "bound": C,
    "sigma": s}``, ``{"defense": None}``, or ``{"dp_sgd": {"noise_multiplier": z,
    "max_grad_norm": C}}``. A sample-level statement for the ``dp`` defense needs a batch of
    one sample (it clips the batch's gradient, which bounds the batch, not a sample);
    DP-SGD clients bound samples, not clients.
    """
    if not isinstance(protocol, Protocol):
        raise check.GradcoreTypeError(
            "protocol must be a gradcore.privacy.Protocol, e.g. Protocol('client', 0.25, 100); got "
            f"{check.describe(protocol)}"
        )
    z = noise_multiplier(spec)
    clips_batch = (
        spec.get("defense") is not None and defenses.privacy_of(spec["defense"]).clips == "batch"
    )
    if protocol.unit == "sample" and clips_batch and protocol.batch_size != 1:
        raise check.GradcoreValueError(
            f"the {spec['defense']} defense clips the gradient of the whole batch "
            f"({protocol.batch_size} samples), which bounds the batch, not one sample: a "
            "sample-level epsilon needs per-sample clipping (DP-SGD clients) or a batch of 1"
        )
    if protocol.unit == "client" and spec.get("dp_sgd") is not None:
        raise check.GradcoreValueError(
            "DP-SGD clients clip samples, not clients: state a sample-level protocol"
        )
    values = {
        name: epsilon(z, protocol.sample_rate, protocol.steps, protocol.delta, name)
        for name in ACCOUNTANTS
    }
    note = ""
    if z == 0:
        note = "no noise: no guarantee"
    elif math.isnan(values["prv"]):
        note = (
            f"PRV not computed: the RDP bound exceeds {PRV_LIMIT:g}, "
            "beyond the PRV accountant's range"
        )
    return Guarantee(z, values, protocol.delta, protocol, note)


# ----------------------------------------------------------------------------------
# DP-SGD clients (Opacus)
# ----------------------------------------------------------------------------------


@dataclass
class Participation:
    """What the accountant needs of one DP-SGD client: its sampling rate and its steps."""

    sample_rate: float
    steps: int = 0


def dp_sgd_gradient(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    noise_multiplier: float,
    max_grad_norm: float,
    seed: int = 0,
    loss: str = "cross_entropy",
) -> tuple[tuple, float]:
    """One DP-SGD step's noisy gradient of a client's data, computed by Opacus (Abadi et al.,
    Algorithm 1).

    The client's samples (``images``, ``labels``) are Poisson-sampled at rate ``1 / ceil(n /
    batch_size)`` (Opacus's rate for a loader of that batch size), each sample's gradient is
    clipped to ``max_grad_norm``, noise ``N(0, (noise_multiplier * max_grad_norm)^2)`` is added
    to their sum and the result divided by the expected batch size. ``model`` is not
    changed. Returns the gradient (one tensor per trainable parameter, like
    :func:`gradcore.gradients.batch_gradient`) and the sampling rate.
    """
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    check.tensor("images", images, floating=True)
    check.tensor("labels", labels)
    if len(images) == 0 or len(images) != len(labels):
        raise check.GradcoreValueError(
            f"a DP-SGD client needs as many labels as images, at least one; got {len(images)} "
            f"images and {len(labels)} labels"
        )
    outputs = check.inputs_for(model, images, "images")
    check.targets_for("labels", labels, len(images), outputs, loss)
    check.positive_int("batch_size", batch_size)
    check.number("max_grad_norm", max_grad_norm, low=0, low_open=True)
    check.integer("seed", seed)
    _check_accounting(noise_multiplier, 1.0, 1, DEFAULT_DELTA)
    client = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(gradients.trainable(client), lr=0.0)
    loader = DataLoader(
        TensorDataset(images, labels),
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )
    device = next(model.parameters()).device
    with warnings.catch_warnings():
        # Opacus says its noise is not from a cryptographic source (secure_mode off: seeded, as the
        # book needs), and torch that the input needs no gradient (per-sample gradients are of
        # parameters).
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        private, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
            module=client,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=float(noise_multiplier),
            max_grad_norm=float(max_grad_norm),
            poisson_sampling=True,
            noise_generator=torch.Generator(device=device).manual_seed(seed + 1),
        )
        batch_images, batch_labels = next(iter(loader))
        optimizer.zero_grad()
        if len(batch_labels):
            gradients.loss_function(loss)(
                private(batch_images.to(device)), batch_labels.to(device)
            ).backward()
        else:  # an empty Poisson draw: the step is noise alone
            for parameter in gradients.trainable(private):
                parameter.grad_sample = torch.zeros(
                    (0, *parameter.shape), dtype=parameter.dtype, device=device
                )
        optimizer.step()
    shared = tuple(p.grad.detach().clone() for p in gradients.trainable(private))
    return shared, float(loader.sample_rate)


def deployment_guarantee(
    participation: Mapping[int, Participation],
    noise_multiplier: float,
    delta: float = DEFAULT_DELTA,
) -> Guarantee:
    """Sample-level (epsilon, delta) of a federated run with DP-SGD clients: its worst-off client's.

    Every sample belongs to one client, so it is protected by that client's accounting
    (its own sampling rate, the steps it took); the run guarantees the largest epsilon over
    the clients that took a step, per accountant.
    """
    active = {c: p for c, p in participation.items() if p.steps > 0}
    if not active:
        raise check.GradcoreValueError("no client took a DP-SGD step: nothing to account for")
    # Epsilon grows with the sampling rate and with the steps, so the worst-off client is among
    # those no other client matches or exceeds in both: only they are accounted (PRV costs up to a
    # second each).
    front = {
        c: p
        for c, p in active.items()
        if not any(
            o.sample_rate >= p.sample_rate
            and o.steps >= p.steps
            and (o.sample_rate, o.steps) != (p.sample_rate, p.steps)
            for o in active.values()
        )
    }
    values = {
        name: {
            c: epsilon(noise_multiplier, p.sample_rate, p.steps, delta, name)
            for c, p in front.items()
        }
        for name in ACCOUNTANTS
    }
    worst = {
        name: math.nan if any(math.isnan(v) for v in each.values()) else max(each.values())
        for name, each in values.items()
    }
    client = max(front, key=values["rdp"].get)
    most = front[client]
    protocol = Protocol("sample", most.sample_rate, most.steps, delta)
    note = (
        f"worst-off client {client}: sampling rate {most.sample_rate:.3g}, {most.steps} steps"
        + (
            ""
            if not math.isnan(worst["prv"])
            else f"; PRV beyond its range (RDP above {PRV_LIMIT:g})"
        )
    )
    return Guarantee(noise_multiplier, worst, delta, protocol, note)


def describe(spec: Mapping, protocol: Protocol) -> dict:
    """What a deployment ``spec`` guarantees under ``protocol``, as a table row: z, epsilons, delta,
    or why none.

    Never raises for a defense without a guarantee: the reason is the row (the plain
    ``noise`` defense: unbounded sensitivity; top-k, Soteria, CENSOR: not Gaussian mechanisms).
    """
    try:
        stated = guarantee(spec, protocol)
    except check.GradcoreValueError as error:
        return {
            "noise multiplier": math.nan,
            "rdp": math.nan,
            "prv": math.nan,
            "delta": protocol.delta,
            "note": str(error).split(":")[0],
        }
    return {
        "noise multiplier": stated.noise_multiplier,
        **stated.epsilon,
        "delta": stated.delta,
        "note": stated.note,
    }


def opacus_noise_multiplier(
    target_epsilon: float, protocol: Protocol, accountant: str = "rdp"
) -> float:
    """Opacus's own answer to the inverse question: the noise multiplier that gives
    ``target_epsilon``.

    Opacus searches ``z`` by bisection with its accountant (``get_noise_multiplier``, to
    within 0.01 in epsilon); feeding it an epsilon from :func:`epsilon` must give the ``z``
    back. A check of this module's plumbing (rate, steps, delta) against Opacus's.
    """
    from opacus.accountants.utils import get_noise_multiplier

    if accountant not in ACCOUNTANTS:
        raise check.GradcoreValueError(
            f"unknown accountant {accountant!r}; known: {', '.join(ACCOUNTANTS)}"
        )
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise check.GradcoreValueError(
            f"the target epsilon must be finite and positive, got {target_epsilon!r}"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(
            get_noise_multiplier(
                target_epsilon=target_epsilon,
                target_delta=protocol.delta,
                sample_rate=protocol.sample_rate,
                steps=protocol.steps,
                accountant=accountant,
                epsilon_tolerance=0.01,
            )
        )
