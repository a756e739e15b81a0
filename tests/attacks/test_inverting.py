"""gradcore.attacks.inverting: the Inverting Gradients attack (cosine matching, TV prior, signed Adam).

Outside references: a direct NumPy total variation, the definition of the cosine
distance, the single-restart objective evaluated restart by restart (against the
``vmap``-batched one), and the private label itself. Models are tiny (a width-4
ConvNet with batch norm, an MLP) so the whole file runs in a few seconds.
Also the FedAvg form (local training unrolled).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import gradcore
from gradcore import attacks, client, data, experiments, gradients, models
from gradcore.attacks import AttackResult, inverting

SHAPE = (3, 32, 32)


def tiny_convnet(classes=4, dtype=torch.float64, train=False, seed=0):
    model = models.build("convnet", SHAPE, classes, seed=seed, width=4).to(dtype)
    return model.train(train)


def private_batch(batch=1, classes=4, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand((batch, *SHAPE), generator=generator, dtype=dtype)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    return images, labels


def test_total_variation_matches_a_direct_numpy_computation():
    images = torch.rand((2, 3, 5, 7), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = images.numpy()
    horizontal = np.abs(x[..., :, 1:] - x[..., :, :-1]).mean()
    vertical = np.abs(x[..., 1:, :] - x[..., :-1, :]).mean()
    assert abs(inverting.total_variation(images).item() - (horizontal + vertical)) < 1e-12
    assert inverting.total_variation(torch.full((1, 3, 4, 4), 0.3, dtype=torch.float64)).item() == 0.0


def test_cosine_distance_is_zero_scale_invariant_and_two_for_opposites():
    generator = torch.Generator().manual_seed(2)
    target = [torch.randn(4, 3, generator=generator, dtype=torch.float64), torch.randn(5, generator=generator, dtype=torch.float64)]
    candidate = [torch.randn(4, 3, generator=generator, dtype=torch.float64), torch.randn(5, generator=generator, dtype=torch.float64)]
    assert abs(inverting.cosine_distance(target, target).item()) < 1e-12
    distance = inverting.cosine_distance(candidate, target).item()
    assert 0 < distance < 2
    assert abs(inverting.cosine_distance([3.7 * c for c in candidate], target).item() - distance) < 1e-12
    assert abs(inverting.cosine_distance([-t for t in target], target).item() - 2) < 1e-12
    # All layers form one vector: the distance is that of the concatenation.
    flat_c, flat_t = torch.cat([c.reshape(-1) for c in candidate]), torch.cat([t.reshape(-1) for t in target])
    assert abs(distance - (1 - torch.nn.functional.cosine_similarity(flat_c, flat_t, dim=0).item())) < 1e-12


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_batched_objective_equals_separate_single_restarts(train):
    model = tiny_convnet(train=train)
    images, labels = private_batch(batch=2)
    target = client.shared_gradient(model, images, labels)
    restarts = 3
    stack = torch.rand((restarts, 2, *SHAPE), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    batched = inverting.batched_objective(model, target, labels, "cross_entropy", tv_weight=0.05, restarts=restarts)
    single = inverting.batched_objective(model, target, labels, "cross_entropy", tv_weight=0.05, restarts=1)
    directions, values = batched(stack)
    assert directions.shape == stack.shape and values.shape == (restarts,)
    for r in range(restarts):
        direction, value = single(stack[r : r + 1])
        assert abs(values[r].item() - value.item()) < 1e-10
        assert (directions[r] - direction[0]).abs().max().item() < 1e-10
    # The single restart is plain autograd of cosine distance + TV.
    x = stack[0].clone().requires_grad_(True)
    reference_model = model if not train else gradients.stateless(model)
    objective = (inverting.cosine_distance(gradients.batch_gradient(reference_model, x, labels, create_graph=True), target)
                 + 0.05 * inverting.total_variation(x))
    (reference,) = torch.autograd.grad(objective, x)
    assert abs(objective.item() - values[0].item()) < 1e-10
    assert (reference - directions[0]).abs().max().item() < 1e-10


def run(model, images, labels=None, **config):
    shared = client.shared_gradient(model, images, labels if labels is not None else torch.zeros(len(images), dtype=torch.long))
    return attacks.attack("inverting_gradients", model, shared, shape=SHAPE, batch_size=len(images), labels=labels,
                          truth=images, progress=False, **config)


def test_attack_returns_a_boxed_reconstruction_history_and_inferred_label():
    model = tiny_convnet(dtype=torch.float32)
    images, labels = private_batch(dtype=torch.float32, seed=4)
    shared = client.shared_gradient(model, images, labels)
    result = attacks.attack("inverting_gradients", model, shared, shape=SHAPE, truth=images, progress=False,
                            iterations=12, record_every=4, snapshots=(0, 8))
    assert isinstance(result, AttackResult) and result.attack == "inverting_gradients"
    assert result.reconstruction.shape == (1, *SHAPE) and result.reconstruction.dtype == torch.float32
    assert 0 <= result.reconstruction.min().item() and result.reconstruction.max().item() <= 1
    assert not result.reconstruction.requires_grad
    assert torch.equal(result.labels, labels)  # inferred from the last layer at B = 1
    assert set(result.history) == {"iteration", "objective", "mse", "psnr"}
    assert result.history["iteration"] == [0, 4, 8, 12]
    assert all(len(values) == 4 for values in result.history.values())
    assert [iteration for iteration, _ in result.snapshots] == [0, 8]
    assert all(np.isfinite(result.history["objective"]))


def test_attack_leaves_a_batch_norm_model_in_train_mode_untouched():
    model = tiny_convnet(dtype=torch.float32, train=True)
    images, labels = private_batch(dtype=torch.float32, seed=5)
    shared = client.shared_gradient(model, images, labels)  # this forward pass updates the running statistics once
    state = {name: value.clone() for name, value in model.state_dict().items()}
    for restarts in (1, 2):
        attacks.attack("inverting_gradients", model, shared, shape=SHAPE, labels=labels, progress=False,
                       iterations=3, restarts=restarts)
        assert model.training
        for name, value in model.state_dict().items():
            assert torch.equal(value, state[name]), name


@pytest.mark.parametrize("restarts", [1, 2])
def test_attack_is_reproducible_with_its_seed(restarts):
    model = tiny_convnet(dtype=torch.float32)
    images, labels = private_batch(dtype=torch.float32, seed=6)
    config = dict(iterations=5, restarts=restarts, init="rand")
    first, second = run(model, images, labels, seed=3, **config), run(model, images, labels, seed=3, **config)
    assert torch.equal(first.reconstruction, second.reconstruction)
    assert first.history["objective"] == second.history["objective"]
    other = run(model, images, labels, seed=4, **config)
    assert not torch.equal(first.reconstruction, other.reconstruction)


def test_restarts_report_the_objective_of_the_kept_reconstruction():
    model = models.build("mlp", SHAPE, 4, widths=(16,), activation="sigmoid").double()
    images, labels = private_batch(seed=7)
    shared = client.shared_gradient(model, images, labels)
    result = attacks.attack("inverting_gradients", model, shared, shape=SHAPE, labels=labels, progress=False,
                            restarts=3, iterations=6, record_every=6, tv_weight=0.01, init="rand")
    single = inverting.batched_objective(model, shared, labels, "cross_entropy", tv_weight=0.01, restarts=1)
    _, value = single(result.reconstruction.unsqueeze(0))
    assert abs(value.item() - result.history["objective"][-1]) < 1e-10


def step_sizes(decay, iterations=16, lr=0.1):
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = inverting._scheduler(optimizer, decay, iterations)
    sizes = []
    for _ in range(iterations):
        sizes.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return sizes


def test_step_size_schedules():
    paper = step_sizes(True)  # tenfold at 3/8, 5/8, 7/8 of 16 steps: steps 6, 10, 14
    assert paper == pytest.approx([0.1] * 6 + [0.01] * 4 + [1e-3] * 4 + [1e-4] * 2)
    assert step_sizes("step") == paper
    assert step_sizes(False) == pytest.approx([0.1] * 16)
    cosine = step_sizes("cosine")
    assert cosine[0] == pytest.approx(0.1) and all(a > b > 0 for a, b in zip(cosine, cosine[1:]))
    assert cosine[8] == pytest.approx(0.05)
    assert step_sizes("linear") == pytest.approx([0.1 * (1 - k / 16) for k in range(16)])
    with pytest.raises(ValueError, match="decay"):
        step_sizes("exponential")


@pytest.mark.parametrize("restarts", [0, -1])
def test_fewer_than_one_restart_is_refused(restarts):
    model = tiny_convnet(dtype=torch.float32)
    images, labels = private_batch(dtype=torch.float32)
    with pytest.raises(ValueError, match="restarts"):
        run(model, images, labels, iterations=1, restarts=restarts)


def _case():
    photos = data.load("photos", size=16, per_photo=2)
    case = experiments.scenario(photos, "mlp", 1, seed=0, dtype=torch.float64, widths=(16,))
    return case


def test_unrolled_objective_is_zero_at_the_truth_and_batched_equals_single():
    case = _case()
    local = {"lr": 0.1, "epochs": 3}
    update = case.update(**local)
    single = inverting.batched_objective(case.model, update, case.labels, "cross_entropy", 0.0, 1, local)
    batched = inverting.batched_objective(case.model, update, case.labels, "cross_entropy", 0.0, 2, local)
    stack = torch.stack([case.inputs, torch.rand_like(case.inputs)])
    direction_single, value_single = single(stack[:1])
    direction_batched, value_batched = batched(stack)
    assert abs(value_single.item()) < 1e-10  # one minus a cosine: round-off of the norms
    assert abs(value_batched[0].item() - value_single.item()) < 1e-12
    assert (direction_batched[0] - direction_single[0]).abs().max() < 1e-10
    assert value_batched[1] > 1e-3


def test_attack_on_update_returns_the_contract():
    case = _case()
    result = case.attack("inverting_gradients", local={"lr": 0.01, "epochs": 2}, iterations=12, record_every=4)
    assert result.reconstruction.shape == case.inputs.shape
    assert result.reconstruction.min() >= 0 and result.reconstruction.max() <= 1
    assert result.history["iteration"] == [0, 4, 8, 12]
    assert result.labels.tolist() == case.labels.tolist()


def test_local_update_of_a_training_mode_batchnorm_model_leaves_its_statistics_alone(photos):
    """A client in training mode: batch norm uses batch statistics and the server's running averages stay put."""
    model = gradcore.models.build("convnet", (3, 16, 16), 8, seed=0, width=4).train()
    before = {name: b.clone() for name, b in model.named_buffers()}
    inputs, labels = photos.images[:2], torch.tensor([0, 1])
    update = gradcore.gradients.local_update(model, inputs, labels, lr=0.1, epochs=1)
    single = gradcore.gradients.batch_gradient(copy.deepcopy(model), inputs, labels)  # a copy may move its own statistics
    assert all(torch.allclose(u, 0.1 * g, atol=1e-6) for u, g in zip(update, single))
    assert all(torch.equal(before[name], b) for name, b in model.named_buffers())


def test_a_defended_update_gives_context_aware_defenses_the_client():
    """Soteria needs the client's model and data; a defended FedAvg update must pass them like a gradient does."""
    case = _case()
    result = case.attack("inverting_gradients", defense="soteria", defense_options={"prune": 0.5}, local={"lr": 0.01, "epochs": 1},
                         iterations=2, record_every=1)
    assert result.reconstruction.shape == case.inputs.shape



@pytest.mark.parametrize("decay", [True, False, "step", "cosine", "linear"])
def test_every_documented_schedule_is_accepted_and_runs(decay):
    model = tiny_convnet(dtype=torch.float32)
    inputs = torch.rand((1, *SHAPE), generator=torch.Generator().manual_seed(0))
    target = [g.detach() for g in gradients.batch_gradient(model, inputs, torch.tensor([1]))]
    result = gradcore.attack("inverting_gradients", model, target, shape=SHAPE, labels=torch.tensor([1]),
                             progress=False, iterations=3, decay=decay)
    assert torch.isfinite(result.reconstruction).all()
