"""Attacks with a generative prior: GGL, GIAS and GIFD search what a pretrained generator can draw.

The attacker holds a class-conditional generator ``G(z, y)`` trained on public data of the
private data's distribution (:mod:`gradcore.generative`), passed as ``generator=``. GIAS and
GIFD match the shared gradient by the negative cosine of Inverting Gradients (the distance
CENSOR's Sec. V-A uses), GGL by the squared L2 distance of its released code; all take the
labels given or read them off the output layer (iDLG), and differ in how far they let the
reconstruction leave the generator's range:

* ``ggl`` (Li et al., CVPR 2022, Eq. 3-5): only the latent ``z``, searched without gradients
  by CMA-ES (Hansen's ``cma``), with a KL regulariser keeping ``z``'s entries standard normal,
  imitating the defense it faces on each trial gradient as its released code does.
  The answer is always an image the generator can draw.
* ``gias`` (Jeon et al., NeurIPS 2021, Sec. 3): the latent first, then, with the latent fixed,
  the weights of each image's own copy of the generator.
* ``gifd`` (Fang et al., ICCV 2023, Sec. 3.2): the latent first, then the feature map after
  each generator stage in turn, each kept in an l1 ball around where the previous stage left
  it; the intermediate result with the lowest gradient distance is the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .. import defenses
from .. import gradients as grads
from .. import validation as check
from ..generative import Generator, copy_of
from ..registry import Registry
from .base import ATTACKS, AttackResult, Observation, Steps, last_linear, optimise
from .shared import cosine_distance, infer_labels


def check_prior(observation: Observation, generator) -> torch.Tensor:
    """The labels the attack conditions on, after checking that ``generator`` can draw this
    observation's inputs."""
    if not isinstance(generator, Generator):
        raise check.GradcoreTypeError(
            "generator must be a gradcore.generative.Generator (train one with "
            f"gradcore.generative.train_gan), got {type(generator).__name__}"
        )
    if tuple(generator.image_shape) != tuple(observation.shape):
        raise check.GradcoreValueError(
            f"the generator draws images shaped {tuple(generator.image_shape)}, the attacked "
            f"inputs are shaped {tuple(observation.shape)}"
        )
    labels = observation.labels
    if labels is None:
        if observation.loss != "cross_entropy":
            raise check.AttackRefused(
                "a generative prior is conditioned on classes; this loss has none"
            )
        labels = infer_labels(observation.model, observation.gradient, observation.batch_size)
    if next(generator.parameters()).device != observation.gradient[0].device:
        raise check.GradcoreValueError(
            f"the generator is on {next(generator.parameters()).device}, the model's gradient on "
            f"{observation.gradient[0].device}; move the generator with .to(device)"
        )
    if next(generator.parameters()).dtype != observation.gradient[0].dtype:
        raise check.GradcoreValueError(
            f"the generator computes in {next(generator.parameters()).dtype}, the gradient is "
            f"{observation.gradient[0].dtype}; convert one to the other"
        )
    if int(labels.max()) >= generator.num_classes:
        raise check.GradcoreValueError(
            f"label {int(labels.max())} is beyond the generator's {generator.num_classes} classes"
        )
    return labels


def gradient_distance(
    observation: Observation, labels: torch.Tensor
) -> Callable[[torch.Tensor, bool], torch.Tensor]:
    """``(images, create_graph) -> 1 - cos(g(images), g*)``, the distance every GAN-prior attack
    matches."""
    model, target, loss = observation.model, observation.gradient, observation.loss

    def distance(images: torch.Tensor, create_graph: bool = True) -> torch.Tensor:
        return cosine_distance(
            grads.batch_gradient(model, images, labels, loss, create_graph=create_graph), target
        )

    return distance


def population_gradients(
    observation: Observation, labels: torch.Tensor
) -> Callable[[torch.Tensor], list]:
    """``stack (P, B, *shape) -> [(P, *tensor shape), ...]``: every member's gradient in one
    vectorised call (``torch.func``)."""
    from torch.func import functional_call, grad, vmap

    network = grads.stateless(observation.model)
    names = [name for name, p in network.named_parameters() if p.requires_grad]
    parameters = {name: p.detach() for name, p in network.named_parameters() if p.requires_grad}
    buffers = {name: b.detach() for name, b in network.named_buffers()}
    loss_function = grads.loss_function(observation.loss)

    def gradient(images: torch.Tensor) -> dict:
        return grad(
            lambda p: loss_function(functional_call(network, (p, buffers), (images,)), labels)
        )(parameters)

    batched = vmap(gradient)

    def gradients(stack: torch.Tensor) -> list:
        found = batched(stack)
        return [found[name] for name in names]

    return gradients


#: Distances between stacked trial gradients ``[(P, *shape), ...]`` and the shared one: ``(P,)``.
POPULATION_DISTANCES: Registry = Registry("gradient distance")


@POPULATION_DISTANCES.register("cosine")
def _stacked_cosine(stacked: list, target: Sequence[torch.Tensor]) -> torch.Tensor:
    """``1 - cos`` of the whole flattened gradients: Inverting Gradients' distance, blind to
    scale."""
    flat = torch.cat([tensor.flatten(1) for tensor in stacked], dim=1)
    goal = torch.cat([tensor.detach().reshape(-1) for tensor in target])
    return 1 - flat.matmul(goal) / (flat.norm(dim=1) * goal.norm() + 1e-12)


@POPULATION_DISTANCES.register("l2")
def _stacked_squared_l2(stacked: list, target: Sequence[torch.Tensor]) -> torch.Tensor:
    """Squared Euclidean distance summed over the tensors, divided by their number (the released
    GGL's ``ng_loss``)."""
    # Squared in place: the population's gradients are the largest tensors of a GGL generation.
    total = sum(
        (tensor - goal.detach()).flatten(1).square_().sum(dim=1)
        for tensor, goal in zip(stacked, target)
    )
    return total / len(target)


#: How the released GGL imitates a defense on the stacked trial gradients ``[(P, *shape), ...]``
#: (``zhuohangli/GGL``, ``reconstructor.py``, ``ng_loss``): ``name -> (observation, noise_sigma) ->
#: imitation``. The attacker knows which defense it faces, not its parameters, and reads them
#: off the shared gradient as the released code does.
EMULATIONS: Registry = Registry("defense emulation")


@EMULATIONS.register("clipping")
def _imitate_clipping(observation: Observation, noise_sigma: float) -> Callable[[list], list]:
    """Clip each trial to the shared gradient's norm, the released code's estimate of the bound."""
    bound = defenses.measured_norm(observation.gradient)

    def clip(stacked: list) -> list:
        norms = torch.sqrt(sum(tensor.flatten(1).pow(2).sum(dim=1) for tensor in stacked))
        factor = (bound / (norms + 1e-6)).clamp(max=1.0)
        return [tensor * factor.view(-1, *[1] * (tensor.dim() - 1)) for tensor in stacked]

    return clip


@EMULATIONS.register("compression")
def _imitate_compression(observation: Observation, noise_sigma: float) -> Callable[[list], list]:
    """Keep, per tensor, the share of largest entries that the shared gradient keeps non-zero."""
    target = observation.gradient
    keep = float(sum(int(t.ne(0).sum()) for t in target)) / sum(t.numel() for t in target)

    def compress(stacked: list) -> list:
        kept = []
        for tensor in stacked:
            flat = tensor.flatten(1)
            # Unsorted: only the set of kept entries matters, and sorting it costs more than finding
            # it.
            index = torch.topk(
                flat.abs(), max(1, defenses.kept_count(flat.shape[1], keep)), dim=1, sorted=False
            ).indices
            kept.append(
                torch.zeros_like(flat).scatter(1, index, flat.gather(1, index)).view_as(tensor)
            )
        return kept

    return compress


@EMULATIONS.register("representation")
def _imitate_representation(observation: Observation, noise_sigma: float) -> Callable[[list], list]:
    """Zero the columns of the last linear weight's gradient that the shared one has at zero
    (Soteria's pruned features)."""
    layer = last_linear(observation.model, "imitating Soteria's pruned representation")
    trained = [p for p in observation.model.parameters() if p.requires_grad]
    index = next(i for i, p in enumerate(trained) if p is layer.weight)
    columns = observation.gradient[index].ne(0).any(dim=0).to(observation.gradient[index].dtype)
    return lambda stacked: [
        tensor * columns if i == index else tensor for i, tensor in enumerate(stacked)
    ]


@EMULATIONS.register("noise")
def _imitate_noise(observation: Observation, noise_sigma: float) -> Callable[[list], list]:
    """Add fresh ``N(0, noise_sigma^2)`` to every entry (the scale given, as in the released
    code)."""
    check.number("noise_sigma", noise_sigma, low=0.0)
    draws = torch.Generator().manual_seed(observation.seed + 2)
    # In place on the fresh draw (the same sums as t + sigma * draw, without two more
    # population-sized tensors).
    return lambda stacked: [
        torch.randn(t.shape, generator=draws, dtype=t.dtype).to(t.device).mul_(noise_sigma).add_(t)
        for t in stacked
    ]


def defense_emulation(
    name: str | None, observation: Observation, noise_sigma: float = 0.0
) -> Callable[[list], list]:
    """The imitation :data:`EMULATIONS` names (``None``: the trials as they are), built for this
    observation."""
    if name is None:
        return lambda stacked: stacked
    return EMULATIONS[name](observation, noise_sigma)


def population_distance(
    observation: Observation,
    labels: torch.Tensor,
    distance: str = "cosine",
    emulate: str | None = None,
    noise_sigma: float = 0.0,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``stack (P, B, *shape) -> (P,)`` distances of the whole population, its gradients in one
    vectorised call.

    ``distance`` names an entry of :data:`POPULATION_DISTANCES`; ``emulate`` a defense the
    attacker imitates on each trial gradient before measuring (:func:`defense_emulation`).
    """
    measure = POPULATION_DISTANCES[distance]
    imitate = defense_emulation(emulate, observation, noise_sigma)
    gradients = population_gradients(observation, labels)
    return lambda stack: measure(imitate(gradients(stack)), observation.gradient)


def kl_to_standard_normal(latent: torch.Tensor) -> torch.Tensor:
    """``KL(N(mu, s^2) || N(0, 1))`` of each latent's entries, summed over the batch (Li et al.,
    2022, Eq. 5).

    ``mu`` and ``s^2`` are the mean and variance of one latent vector's entries: a latent the
    generator was trained on has entries that look standard normal, and this is zero for them
    on average; it grows as the search wanders to latents the generator never saw.
    """
    mean, variance = latent.mean(dim=-1), latent.var(dim=-1, unbiased=False).clamp_min(1e-8)
    return (0.5 * (variance + mean.pow(2) - 1 - variance.log())).sum(dim=-1)


def project_l1_ball(vector: torch.Tensor, centre: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection of ``vector`` onto ``{v : ||v - centre||_1 <= radius}`` (Duchi et al.,
    ICML 2008, Fig. 1).

    Soft-thresholds the offset by the ``theta`` that makes its l1 norm exactly ``radius``;
    an offset already inside the ball is returned unchanged.
    """
    offset = (vector - centre).flatten()
    if radius <= 0:
        return centre.clone()
    if offset.abs().sum() <= radius:
        return vector
    magnitudes = offset.abs().sort(descending=True).values
    cumulative = magnitudes.cumsum(0)
    ranks = torch.arange(1, len(magnitudes) + 1, dtype=magnitudes.dtype, device=magnitudes.device)
    last = torch.nonzero(magnitudes * ranks > cumulative - radius).max()
    theta = (cumulative[last] - radius) / (last + 1)
    shrunk = offset.sign() * (offset.abs() - theta).clamp_min(0)
    return centre + shrunk.reshape(vector.shape)


def initial_latent(
    generator: Generator,
    labels: torch.Tensor,
    distance: Callable,
    candidates: int,
    draws: torch.Generator,
) -> torch.Tensor:
    """The best of ``candidates`` standard-normal latents by gradient distance (one gradient each,
    no search yet)."""
    dtype, device = next(generator.parameters()).dtype, next(generator.parameters()).device
    best, best_value = None, float("inf")
    for _ in range(candidates):
        latent = torch.randn(len(labels), generator.latent_dim, generator=draws).to(device, dtype)
        with torch.no_grad():
            images = generator(latent, labels)
        value = distance(images, False).item()
        if value < best_value:
            best, best_value = latent, value
    return best


# ----------------------------------------------------------------------------------
# Gradient-based searches (GIAS, GIFD): phases of Adam steps, the best iterate kept
# ----------------------------------------------------------------------------------


@dataclass
class Phase:
    """One stage of a search: Adam on ``variables`` for ``iterations`` steps.

    ``render`` maps the variables to images, ``penalty`` adds a regulariser (or 0),
    ``project`` restores a constraint after each step.
    """

    iterations: int
    variables: list
    render: Callable[[], torch.Tensor]
    lr: float
    penalty: Callable[[], torch.Tensor] = lambda: 0.0
    project: Callable[[], None] = lambda: None
    decay: bool = (
        False  # the step divided by 10 at 3/8, 5/8 and 7/8 of the phase (Geiping et al.'s schedule)
    )


class PhasedSteps(Steps):
    """Phases run one after another; the iterate is the best image seen so far by gradient distance.

    ``phases`` is a list of callables, each building its :class:`Phase` when the previous
    one ends (so it can start from where the previous one left its variables). A step
    returns the objective it saw (distance plus the phase's penalty, for the divergence
    check); the history records the best gradient distance so far, the attacker's own
    criterion (it never sees the truth).
    """

    def __init__(
        self, distance: Callable, phases: Sequence[Callable[[], Phase]], start: torch.Tensor
    ):
        self.distance, self.factories = distance, list(phases)
        self.phase, self.optimizer, self.left, self.schedule = None, None, 0, None
        self.best_images, self.best_value = (
            start.detach().clone(),
            distance(start.detach(), False).item(),
        )

    def _next_phase(self) -> None:
        while self.left == 0:
            self.phase = self.factories.pop(0)()
            self.optimizer = torch.optim.Adam(self.phase.variables, lr=self.phase.lr)
            self.left = self.phase.iterations
            steps = self.phase.iterations
            self.schedule = (
                torch.optim.lr_scheduler.MultiStepLR(
                    self.optimizer, [int(steps * f) for f in (3 / 8, 5 / 8, 7 / 8)], 0.1
                )
                if self.phase.decay
                else None
            )

    def step(self) -> torch.Tensor:
        self._next_phase()
        self.optimizer.zero_grad()
        images = self.phase.render()
        distance = self.distance(images, True)
        objective = distance + self.phase.penalty()
        objective.backward()
        self.optimizer.step()
        if self.schedule is not None:
            self.schedule.step()
        with torch.no_grad():
            self.phase.project()
        self.left -= 1
        if distance.item() < self.best_value:
            self.best_images, self.best_value = images.detach().clone(), distance.item()
        return objective.detach()

    def current(self) -> torch.Tensor:
        return self.best_images.clone()

    def objective(self, current: torch.Tensor) -> float:
        return self.best_value


def _latent_phase(
    generator: Generator,
    labels: torch.Tensor,
    latent: torch.Tensor,
    iterations: int,
    lr: float,
    decay: bool = False,
) -> Phase:
    return Phase(iterations, [latent], lambda: generator(latent, labels), lr, decay=decay)


@ATTACKS.register("gias")
def gias(
    observation: Observation,
    generator: Generator,
    latent_iterations: int = 200,
    parameter_iterations: int = 200,
    lr: float = 0.03,
    parameter_lr: float = 1e-3,
    decay: bool = True,
    candidates: int = 16,
    record_every: int = 10,
    snapshots: Sequence[int] = (),
) -> AttackResult:
    """GIAS: search the latent, then each image's own copy of the generator (Jeon et al., NeurIPS
    2021, Sec. 3, Eq. 4-5).

    Stage 1 minimises the gradient distance over the latents ``z``; stage 2 fixes them and
    gives every image of the batch its own copy of the generator, whose weights alone are
    then optimised, with no pull back to the pretrained ones: the released code
    (``ml-postech/gradient-inversion-generative-image-prior``,
    ``inversefed/reconstruction_algorithms.py``), whose total-variation weight of 1e-6 is
    left out here. What keeps the answer near the prior is only where the search starts and
    how far ``parameter_iterations`` steps of ``parameter_lr`` can take it.

    Parameters
    ----------
    generator : gradcore.generative.Generator
        The attacker's prior, trained on public data (it is not modified).
    latent_iterations, parameter_iterations : int
        Adam steps of each stage.
    lr, parameter_lr : float
        Adam's step on the latents, and on the weights.
    decay : bool
        Each stage's step divided by 10 at 3/8, 5/8 and 7/8 of it, as released.
    candidates : int
        Random latents tried first; the search starts from the closest by gradient distance.
    """
    check.positive_int("latent_iterations", latent_iterations)
    check.integer("parameter_iterations", parameter_iterations, low=0)
    check.positive_int("candidates", candidates)
    labels = check_prior(observation, generator)
    distance = gradient_distance(observation, labels)
    draws = torch.Generator().manual_seed(observation.seed)
    latent = initial_latent(generator, labels, distance, candidates, draws).requires_grad_(True)

    def weights_phase() -> Phase:
        fixed = latent.detach()
        copies = [copy_of(generator) for _ in range(len(labels))]
        render = (
            lambda: torch.cat(  # noqa: E731
                [copy(fixed[k : k + 1], labels[k : k + 1]) for k, copy in enumerate(copies)]
            )
        )
        return Phase(
            parameter_iterations,
            [p for copy in copies for p in copy.parameters()],
            render,
            parameter_lr,
            decay=decay,
        )

    with torch.no_grad():
        start = generator(latent, labels)
    steps = PhasedSteps(
        distance,
        [
            lambda: _latent_phase(generator, labels, latent, latent_iterations, lr, decay),
            weights_phase,
        ],
        start,
    )
    result = optimise(
        observation,
        steps,
        latent_iterations + parameter_iterations,
        "gias",
        snapshots,
        record_every,
    )
    result.labels = labels
    return result


@ATTACKS.register("gifd")
def gifd(
    observation: Observation,
    generator: Generator,
    latent_iterations: int = 200,
    layer_iterations: int = 100,
    lr: float = 0.03,
    feature_lr: float = 0.01,
    ball: float = 0.1,
    candidates: int = 16,
    record_every: int = 10,
    snapshots: Sequence[int] = (),
) -> AttackResult:
    """GIFD: the latent, then each intermediate feature domain of the generator in turn (Fang et
    al., ICCV 2023, Sec. 3.2).

    After the latent search, the feature map ``h_k`` after stage ``k`` (starting where the
    previous search left it, pushed through stage ``k``) is optimised directly, with the
    rest of the generator fixed, inside the l1 ball ``||h_k - h_k^0||_1 <= ball * ||h_k^0||_1``
    (:func:`project_l1_ball`); the ball keeps the image near the generator's manifold while
    it moves closer to the private one. Every stage up to the last block's input is visited;
    the best image by gradient distance over all stages is returned.

    Parameters
    ----------
    generator : gradcore.generative.Generator
        The attacker's prior (not modified).
    latent_iterations, layer_iterations : int
        Adam steps on the latent, and in each feature domain.
    lr, feature_lr : float
        Adam's steps there.
    ball : float
        Radius of each l1 ball, relative to the l1 norm of the feature map at its start
        (the paper gives absolute radii per BigGAN layer; a relative one fits any generator).
    candidates : int
        Random latents tried first; the search starts from the closest by gradient distance.
    """
    check.positive_int("latent_iterations", latent_iterations)
    check.integer("layer_iterations", layer_iterations, low=0)
    check.number("ball", ball, low=0.0)
    check.positive_int("candidates", candidates)
    labels = check_prior(observation, generator)
    distance = gradient_distance(observation, labels)
    draws = torch.Generator().manual_seed(observation.seed)
    latent = initial_latent(generator, labels, distance, candidates, draws).requires_grad_(True)
    state = {"features": None, "depth": 0}

    def feature_phase(depth: int) -> Callable[[], Phase]:
        def build() -> Phase:
            with torch.no_grad():
                previous = (
                    generator.features(latent, labels, depth)
                    if state["features"] is None
                    else generator.advance(state["features"], state["depth"], depth)
                )
            centre = previous.detach().clone()
            features = centre.clone().requires_grad_(True)
            state["features"], state["depth"] = features, depth
            radius = ball * float(centre.abs().sum())
            project = lambda: features.copy_(project_l1_ball(features, centre, radius))  # noqa: E731
            return Phase(
                layer_iterations,
                [features],
                lambda: generator.decode(features, depth),
                feature_lr,
                project=project,
            )

        return build

    with torch.no_grad():
        start = generator(latent, labels)
    depths = range(
        1, len(generator.stages)
    )  # the feature maps after each stage but the last (which is the image)
    steps = PhasedSteps(
        distance,
        [lambda: _latent_phase(generator, labels, latent, latent_iterations, lr)]
        + [feature_phase(depth) for depth in depths],
        start,
    )
    result = optimise(
        observation,
        steps,
        latent_iterations + layer_iterations * len(depths),
        "gifd",
        snapshots,
        record_every,
    )
    result.labels = labels
    return result


# ----------------------------------------------------------------------------------
# GGL: gradient-free search of the latent
# ----------------------------------------------------------------------------------


class _CmaSteps(Steps):
    """One CMA-ES generation per step (ask, evaluate the population in one vectorised gradient,
    tell)."""

    def __init__(
        self,
        strategy,
        generator: Generator,
        labels: torch.Tensor,
        evaluate: Callable,
        kl_weight: float,
    ):
        self.strategy, self.generator, self.labels, self.evaluate, self.kl_weight = (
            strategy,
            generator,
            labels,
            evaluate,
            kl_weight,
        )
        self.parameter = next(generator.parameters())
        self.best_latent = torch.zeros(
            len(labels),
            generator.latent_dim,
            dtype=self.parameter.dtype,
            device=self.parameter.device,
        )
        self.best_value = float("inf")

    def _render(self, latents: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            flat = latents.reshape(-1, self.generator.latent_dim)
            return self.generator(flat, self.labels.repeat(len(latents))).reshape(
                len(latents), len(self.labels), *self.generator.image_shape
            )

    def score(self, latents: torch.Tensor) -> torch.Tensor:
        """Distance plus the KL regulariser, one value per member of the population."""
        with torch.no_grad():
            return self.evaluate(self._render(latents)) + self.kl_weight * kl_to_standard_normal(
                latents
            )

    def step(self) -> torch.Tensor:
        population = np.asarray(self.strategy.ask())
        latents = torch.as_tensor(
            population, dtype=self.parameter.dtype, device=self.parameter.device
        )
        latents = latents.reshape(len(population), len(self.labels), self.generator.latent_dim)
        values = self.score(latents)
        self.strategy.tell(list(population), values.double().cpu().tolist())
        best = int(torch.argmin(values))
        if values[best].item() < self.best_value:
            self.best_latent, self.best_value = latents[best].clone(), values[best].item()
        return values.min()

    def current(self) -> torch.Tensor:
        return self._render(self.best_latent.unsqueeze(0))[0]

    def objective(self, current: torch.Tensor) -> float:
        return (
            self.best_value
            if np.isfinite(self.best_value)
            else self.score(self.best_latent.unsqueeze(0)).item()
        )


@ATTACKS.register("ggl")
def ggl(
    observation: Observation,
    generator: Generator,
    generations: int = 60,
    population: int = 24,
    sigma: float = 0.5,
    kl_weight: float = 0.1,
    distance: str = "l2",
    emulate: str | None = None,
    noise_sigma: float = 0.0,
    record_every: int = 5,
    snapshots: Sequence[int] = (),
) -> AttackResult:
    """GGL: a gradient-free search of the generator's latent (Li et al., CVPR 2022, Sec. 3.2-3.3,
    Eq. 3-5).

    Minimises the gradient distance of ``G(z, y)`` plus ``kl_weight`` times
    :func:`kl_to_standard_normal` over ``z`` by CMA-ES (Hansen and Ostermeier, 2001; the
    ``cma`` package), starting at the latent prior's mean. The reconstruction is always an
    image the generator can draw, which is why GGL recovers a plausible member of the class
    rather than the private image when the generator cannot draw it (CENSOR, Observation 2).
    As in the released code (``zhuohangli/GGL``, ``reconstructor.py``) the distance is the
    squared L2 one, and against a known defense each trial gradient first goes through that
    defense's imitation (:func:`defense_emulation`).

    Parameters
    ----------
    generator : gradcore.generative.Generator
        The attacker's prior (not modified).
    generations : int
        CMA-ES iterations; each evaluates ``population`` latents in one vectorised gradient.
    population : int
        CMA-ES's population size (lambda).
    sigma : float
        CMA-ES's initial step size in latent units.
    kl_weight : float
        Weight of the KL regulariser (``lambda`` of Eq. 5). CENSOR gives none; 0.1 is the released
        GGL code's (``zhuohangli/GGL``, ``reconstructor.py``, ``ng_loss``: ``dist += 0.1*KLD``),
        which adds it only when the latent is not squashed by ``tanh``.
    distance : str
        ``"l2"`` (the released code's) or ``"cosine"`` (:data:`POPULATION_DISTANCES`).
    emulate : str or None
        The defense imitated on the trial gradients, one of :data:`EMULATIONS`, with
        ``noise_sigma`` for ``"noise"``.
    """
    import cma

    check.positive_int("generations", generations)
    check.integer("population", population, low=4)
    check.number("sigma", sigma, low=0.0, low_open=True)
    check.number("kl_weight", kl_weight, low=0.0)
    labels = check_prior(observation, generator)
    dimension = len(labels) * generator.latent_dim
    # cma draws from numpy's global generator, seeded by its own option; put the caller's state back
    # afterwards.
    numpy_state = np.random.get_state()
    try:
        strategy = cma.CMAEvolutionStrategy(
            np.zeros(dimension),
            sigma,
            {
                "popsize": population,
                "seed": observation.seed + 1,
                "verbose": -9,
                "maxiter": generations,
            },
        )
        steps = _CmaSteps(
            strategy,
            generator,
            labels,
            population_distance(observation, labels, distance, emulate, noise_sigma),
            kl_weight,
        )
        result = optimise(observation, steps, generations, "ggl (cma-es)", snapshots, record_every)
    finally:
        np.random.set_state(numpy_state)
    result.labels = labels
    return result
