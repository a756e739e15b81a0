"""gradcore.privacy: Opacus's accountants behind the book's protocols, and DP-SGD clients.

Outside references: Opacus's own accountants and noise search, the published value of
the issue's measurement (RDP 2.10, PRV 1.84 at z = 1, q = 0.01, 1000 steps, delta 1e-5),
the exact epsilon of one Gaussian mechanism (Balle and Wang, ICML 2018, Theorem 8),
Opacus's per-sample gradients, and the sample statistics of many noise draws.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import optimize, stats

from gradcore import federated, gradients, models, plots, privacy
from gradcore.data import Dataset
from gradcore.experiments import privacy as experiment
from gradcore.validation import GradcoreTypeError, GradcoreValueError


def exact_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Balle and Wang (2018), Theorem 8: the least epsilon of one Gaussian release of sensitivity 1."""
    def excess(eps):
        a, b = 1 / (2 * noise_multiplier), eps * noise_multiplier
        return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b) - delta
    return optimize.brentq(excess, 0.0, 100.0)


def test_epsilon_is_opacus_own_value_and_the_measured_reference():
    from opacus.accountants import PRVAccountant, RDPAccountant

    for name, accountant, reference in (("rdp", RDPAccountant(), 2.10), ("prv", PRVAccountant(), 1.84)):
        accountant.history = [(1.0, 0.01, 1000)]
        ours = privacy.epsilon(1.0, 0.01, 1000, 1e-5, name)
        assert ours == accountant.get_epsilon(delta=1e-5)
        assert ours == pytest.approx(reference, abs=0.005)


@pytest.mark.parametrize("noise_multiplier", [0.5, 1.0, 2.0])
def test_one_release_matches_the_exact_gaussian_mechanism(noise_multiplier):
    exact = exact_gaussian_epsilon(noise_multiplier, 1e-5)
    assert privacy.epsilon(noise_multiplier, 1.0, 1, 1e-5, "prv") == pytest.approx(exact, abs=0.02)
    # RDP is an upper bound, looser than the exact value but not by much for one release.
    assert exact <= privacy.epsilon(noise_multiplier, 1.0, 1, 1e-5, "rdp") <= 1.5 * exact + 0.5


@pytest.mark.parametrize("noise_multiplier", [0.3, 1.0, 3.0])
def test_exact_epsilon_is_balle_and_wang_and_composes_as_one_gaussian(noise_multiplier):
    assert privacy.exact_epsilon(noise_multiplier, 1, 1e-5) == pytest.approx(exact_gaussian_epsilon(noise_multiplier, 1e-5), rel=1e-9)
    # 25 releases of noise z are one release of noise z / 5; RDP (an upper bound) stays above, PRV close.
    composed = privacy.exact_epsilon(noise_multiplier, 25, 1e-5)
    assert composed == pytest.approx(privacy.exact_epsilon(noise_multiplier / 5, 1, 1e-5), rel=1e-9)
    assert composed <= privacy.epsilon(noise_multiplier, 1.0, 25, 1e-5, "rdp")
    assert privacy.exact_epsilon(0.0) == math.inf and privacy.exact_epsilon(1.0, 0) == 0.0
    assert privacy.exact_epsilon(1e-3) == pytest.approx(504263.89, rel=1e-6)  # far beyond e^epsilon's float range


def test_no_noise_is_no_guarantee_and_no_release_costs_nothing():
    assert privacy.epsilon(0.0, 0.5, 10) == math.inf
    assert privacy.epsilon(1.0, 0.5, 0) == 0.0
    stated = privacy.guarantee({"defense": "dp", "bound": 2.0, "sigma": 0.0}, privacy.Protocol("sample", 0.1, 100))
    assert stated.epsilon == {"rdp": math.inf, "prv": math.inf}
    assert "no noise" in stated.note
    assert privacy.guarantee({"defense": "clip", "bound": 4.0}, privacy.Protocol("client", 0.1, 5)).epsilon["rdp"] == math.inf


def test_dp_defense_noise_multiplier_is_sigma_over_bound():
    stated = privacy.guarantee({"defense": "dp", "bound": 2.0, "sigma": 2.0}, privacy.Protocol("client", 0.01, 1000))
    assert stated.noise_multiplier == 1.0
    assert stated.epsilon["rdp"] == privacy.epsilon(1.0, 0.01, 1000)


def test_plain_noise_has_no_guarantee_and_says_why():
    with pytest.raises(GradcoreValueError, match="unbounded"):
        privacy.guarantee({"defense": "noise", "sigma": 0.1}, privacy.Protocol("client", 0.1, 10))
    row = privacy.describe({"defense": "noise", "sigma": 0.1}, privacy.Protocol("client", 0.1, 10))
    assert math.isnan(row["rdp"]) and "no differential-privacy guarantee" in row["note"]
    assert "not a Gaussian mechanism" in privacy.describe({"defense": "censor"}, privacy.Protocol("client", 0.1, 10))["note"]


def test_sample_level_needs_per_sample_clipping():
    spec = {"defense": "dp", "bound": 1.0, "sigma": 1.0}
    with pytest.raises(GradcoreValueError, match="per-sample clipping"):
        privacy.guarantee(spec, privacy.Protocol("sample", 0.1, 10, batch_size=32))
    assert privacy.guarantee(spec, privacy.Protocol("sample", 0.1, 10)).epsilon["rdp"] > 0
    with pytest.raises(GradcoreValueError, match="samples, not clients"):
        privacy.guarantee({"dp_sgd": {"noise_multiplier": 1.0, "max_grad_norm": 1.0}}, privacy.Protocol("client", 0.1, 10))


@pytest.mark.parametrize("arguments, message", [
    ((-1.0, 0.1, 10, 1e-5), "noise multiplier"), ((1.0, 0.0, 10, 1e-5), "sample rate"),
    ((1.0, 1.5, 10, 1e-5), "sample rate"), ((1.0, 0.1, 2.5, 1e-5), "steps"), ((1.0, 0.1, 10, 0.0), "delta"),
    ((math.nan, 0.1, 10, 1e-5), "noise multiplier")])
def test_bad_accounting_arguments_are_named(arguments, message):
    # A value out of range is a GradcoreValueError, 2.5 steps a GradcoreTypeError: both the library's, both named.
    with pytest.raises((GradcoreValueError, GradcoreTypeError), match=message):
        privacy.epsilon(*arguments)


def test_unknown_accountant_and_unit_are_named():
    with pytest.raises(GradcoreValueError, match="rdp, prv"):
        privacy.epsilon(1.0, 0.1, 10, accountant="gdp")
    with pytest.raises(GradcoreValueError, match="'sample' or 'client'"):
        privacy.Protocol("user", 0.1, 10)


def test_prv_beyond_its_range_is_nan_not_a_false_infinity():
    # Measured: PRV returns inf here although the true epsilon is finite (RDP bounds it).
    assert privacy.epsilon(0.1, 0.48, 38, accountant="rdp") > privacy.PRV_LIMIT
    assert math.isnan(privacy.epsilon(0.1, 0.48, 38, accountant="prv"))
    stated = privacy.guarantee({"defense": "dp", "bound": 1.0, "sigma": 0.1}, privacy.Protocol("client", 0.48, 38))
    assert "PRV not computed" in stated.note


def test_opacus_noise_search_returns_the_noise_multiplier():
    protocol = privacy.Protocol("sample", 0.05, 200)
    target = privacy.epsilon(1.3, 0.05, 200)
    assert privacy.opacus_noise_multiplier(target, protocol) == pytest.approx(1.3, abs=0.01)


def small_model(seed: int = 0) -> torch.nn.Module:
    return models.build("mlp", (1, 4, 4), 3, seed=seed, widths=(8,))


def client_data(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand((count, 1, 4, 4), generator=generator), torch.randint(0, 3, (count,), generator=generator)


def test_opacus_per_sample_gradients_match_gradcore():
    from opacus import GradSampleModule

    model = small_model()
    images, labels = client_data(6)
    # loss_reduction="mean": Opacus rescales to each sample's own loss, as gradcore computes it.
    wrapped = GradSampleModule(small_model(), loss_reduction="mean")
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        torch.nn.functional.cross_entropy(wrapped(images), labels).backward()
    ours = gradients.per_sample_gradients(model, images, labels)
    assert len(ours) == len(gradients.trainable(wrapped))
    for parameter, mine in zip(gradients.trainable(wrapped), ours):
        torch.testing.assert_close(parameter.grad_sample, mine, rtol=1e-5, atol=1e-6)


def test_dp_sgd_without_noise_or_clipping_is_the_batch_gradient():
    model = small_model()
    images, labels = client_data(5)
    shared, rate = privacy.dp_sgd_gradient(model, images, labels, 5, 0.0, 1e9)
    assert rate == 1.0  # a client with no more samples than a batch is sampled whole
    for mine, reference in zip(shared, gradients.batch_gradient(model, images, labels)):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-7)


def test_dp_sgd_clips_every_sample_on_its_own():
    model = small_model()
    images, labels = client_data(4)
    bound = 1e-3
    shared, _ = privacy.dp_sgd_gradient(model, images, labels, 4, 0.0, bound)
    per_sample = gradients.per_sample_gradients(model, images, labels)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample))
    factor = torch.clamp(bound / norms, max=1.0)
    for mine, samples in zip(shared, per_sample):
        expected = (samples * factor.view(-1, *[1] * (samples.dim() - 1))).sum(0) / 4
        torch.testing.assert_close(mine, expected, rtol=1e-4, atol=1e-9)


def test_dp_sgd_noise_has_the_stated_standard_deviation_and_is_seeded():
    model = models.build("mlp", (1, 8, 8), 10, seed=0, widths=(64,))
    images, labels = client_data(1)
    images = torch.nn.functional.interpolate(images, size=(8, 8))
    shared, _ = privacy.dp_sgd_gradient(model, images, labels % 3, 1, 2.0, 1e-6, seed=3)
    entries = torch.cat([g.flatten() for g in shared])
    # 4,810 draws of N(0, (2 * 1e-6)^2) (the clipped signal is at most 1e-6 in norm): within 5%.
    assert entries.std().item() == pytest.approx(2e-6, rel=0.05)
    again, _ = privacy.dp_sgd_gradient(model, images, labels % 3, 1, 2.0, 1e-6, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(shared, again))
    other, _ = privacy.dp_sgd_gradient(model, images, labels % 3, 1, 2.0, 1e-6, seed=4)
    assert not torch.equal(shared[0], other[0])


def test_dp_sgd_refuses_an_empty_client():
    with pytest.raises(GradcoreValueError, match="at least one"):
        privacy.dp_sgd_gradient(small_model(), torch.zeros((0, 1, 4, 4)), torch.zeros(0, dtype=torch.long), 4, 1.0, 1.0)


def test_deployment_guarantee_is_the_worst_off_clients():
    participation = {0: privacy.Participation(0.5, 10), 1: privacy.Participation(1.0, 5),
                     2: privacy.Participation(0.25, 40), 3: privacy.Participation(0.5, 0)}
    stated = privacy.deployment_guarantee(participation, 1.0)
    for name in privacy.ACCOUNTANTS:
        each = [privacy.epsilon(1.0, p.sample_rate, p.steps, accountant=name) for p in participation.values() if p.steps]
        assert stated.epsilon[name] == max(each)
    with pytest.raises(GradcoreValueError, match="no client"):
        privacy.deployment_guarantee({0: privacy.Participation(0.5, 0)}, 1.0)


def toy_dataset(count: int = 120) -> Dataset:
    images, labels = client_data(count, seed=1)
    return Dataset(images, labels, ["a", "b", "c"], "toy")


def test_federated_dp_sgd_clients_are_accounted_and_reproducible():
    data = toy_dataset()
    options = dict(rounds=6, clients=4, per_round=2, batch_size=8, lr=0.1, evaluate_every=3, seed=0, progress=False,
                   dp_sgd={"noise_multiplier": 1.0, "max_grad_norm": 1.0})
    log = federated.fedsgd(small_model(), data, data, **options)
    assert sum(p.steps for p in log.participation.values()) == 6 * 2
    assert all(0 < p.sample_rate <= 1 for p in log.participation.values())
    again = federated.fedsgd(small_model(), data, data, **options)
    assert again.accuracy == log.accuracy
    with pytest.raises(ValueError, match="not both"):
        federated.fedsgd(small_model(), data, data, defense="noise", defense_options={"sigma": 0.1}, **options)


def test_plain_runs_are_unchanged_by_the_dp_option():
    data = toy_dataset()
    options = dict(rounds=4, clients=4, per_round=2, batch_size=8, lr=0.1, evaluate_every=2, seed=0, progress=False)
    first = federated.fedsgd(small_model(), data, data, **options)
    second = federated.fedsgd(small_model(), data, data, dp_sgd=None, **options)
    assert first.accuracy == second.accuracy and not first.participation


def test_matched_picks_the_least_epsilon_that_keeps_accuracy():
    class Log:
        def __init__(self, value):
            self.value = value

        def final(self):
            return self.value

    def row(z, eps, accuracy):
        stated = privacy.Guarantee(z, {"rdp": eps, "prv": eps}, 1e-5, privacy.Protocol("sample", 0.1, 1))
        return experiment.PrivacyRow(z, stated, stated, accuracy, accuracy, 0.0, "", 0.0)

    table = [row(0.5, 50.0, 0.9), row(1.0, 20.0, 0.85), row(3.0, 5.0, 0.5)]
    out = experiment.matched({"a": Log(0.86), "b": Log(0.99), "c": Log(0.4)}, table, 0.02)
    assert [r[2] for r in out[:1]] == [1.0] and math.isnan(out[1][2]) and out[2][2] == 3.0


def test_attack_sweep_refuses_a_batch():
    class Case:
        labels = torch.zeros(4)

    with pytest.raises(ValueError, match="one image"):
        experiment.attack_sweep({}, {"batch": [Case()]}, (1.0,), {"batch": 1.0})


def test_privacy_tradeoff_marks_no_noise_at_infinity():
    figure = plots.privacy_tradeoff([math.inf, 100.0, 10.0], {"a": [30.0, 5.0, -1.0]}, [0.9, 0.8, 0.5])
    labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert labels[-1].startswith("∞")
    with pytest.raises(ValueError, match="finite epsilon"):
        plots.privacy_tradeoff([math.inf], {"a": [1.0]}, [0.9])


def test_floor_gains_score_the_median_case_against_its_floor():
    from gradcore.evaluation import Cell, Evaluation

    truths = [torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2)]
    grid = Evaluation(["s"], ["GGL"], [experiment.column(0.0), experiment.column(1.0)], ["mse"])
    grid.truths["s"] = truths
    # Reconstructions at MSE 0.01, 0.04, 0.09 (z = 0) and all at 0.1 (z = 1).
    for z, values in ((0.0, (0.1, 0.2, 0.3)), (1.0, (0.1 ** 0.5,) * 3)):
        grid.add(Cell("s", "GGL", experiment.column(z), {"mse": 0.0},
                      [torch.full((1, 1, 2, 2), v) for v in values], cases=3))
    floors = {"s": [0.1, 0.1, 0.1]}
    gains = experiment.floor_gains(grid, floors, (0.0, 1.0, 3.0))
    # Median case: 10 log10(0.1 / 0.04) dB; at z = 1 exactly the floor; z = 3 did not run.
    assert gains["GGL"][0] == pytest.approx(10 * math.log10(0.1 / 0.04), rel=1e-5)
    assert gains["GGL"][1] == pytest.approx(0.0, abs=1e-5) and math.isnan(gains["GGL"][2])


def test_the_noise_multiplier_is_the_registered_defenses_own_property(monkeypatch):
    """privacy branches on no defense name: a new Gaussian mechanism declares its z and is accounted as it is."""
    from gradcore import defenses

    assert privacy.noise_multiplier({"defense": "dp", "bound": 2.0, "sigma": 1.0}) == 0.5
    assert privacy.noise_multiplier({"defense": "clip", "bound": 2.0}) == 0.0
    assert defenses.privacy_of("censor").noise_multiplier is None

    @defenses.declares(defenses.Privacy(lambda options: float(options["scale"]), needs=("scale",), clips="sample"))
    def per_sample_mechanism(gradient, generator, scale: float):
        return gradient

    monkeypatch.setitem(defenses.DEFENSES._entries, "my_mechanism", per_sample_mechanism)
    assert privacy.noise_multiplier({"defense": "my_mechanism", "scale": 0.7}) == 0.7
    with pytest.raises(GradcoreValueError, match="needs scale"):
        privacy.noise_multiplier({"defense": "my_mechanism"})
    # It clips samples, so a sample-level statement does not need a batch of one.
    found = privacy.guarantee({"defense": "my_mechanism", "scale": 1.0}, privacy.Protocol("sample", 0.01, 10, batch_size=4))
    assert found.noise_multiplier == 1.0 and all(math.isfinite(value) for value in found.epsilon.values())
    with pytest.raises(GradcoreValueError, match="whole batch"):
        privacy.guarantee({"defense": "dp", "bound": 1.0, "sigma": 1.0}, privacy.Protocol("sample", 0.01, 10, batch_size=4))


def _tiny_digits(count: int = 12) -> Dataset:
    images = torch.arange(count * 4, dtype=torch.float32).reshape(count, 1, 2, 2) / (count * 4)
    return Dataset(images, torch.arange(count) % 2, ["a", "b"], "tiny")


def test_public_samples_exclude_every_protected_image_and_keep_order():
    digits = _tiny_digits()
    clients, attacked = digits.images[:5], digits.images[[7, 9]].clone()
    other_shape = torch.zeros(3, 1, 4, 4)  # another data set's images: cannot be among these
    public = experiment.public_samples(digits, [clients, attacked, other_shape], 3)
    # The first three images that are neither a client's nor attacked: 5, 6, 8.
    assert torch.equal(public.images, digits.images[[5, 6, 8]])
    assert torch.equal(public.labels, digits.labels[[5, 6, 8]])
    # Fewer left than asked for: all that is left, none private.
    assert len(experiment.public_samples(digits, [clients, attacked], 100)) == 12 - 5 - 2


def test_clipping_bounds_are_medians_on_public_samples_only():
    digits = _tiny_digits()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))

    class Case:
        inputs = digits.images[[7]]

    Case.model = model
    clients = digits.images[:5]
    bounds, public = experiment.clipping_bounds({"one": [Case()]}, {"one": digits},
                                                Dataset(clients, digits.labels[:5], ["a", "b"], "c"), 4)
    kept = digits.images[[5, 6, 8, 9]]
    assert torch.equal(public["one"].images, kept)
    # The median per-sample gradient norm of those four, computed here by hand.
    norms = []
    for image, label in zip(kept, digits.labels[[5, 6, 8, 9]]):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(image[None]), label[None]).backward()
        norms.append(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in model.parameters())))
    assert bounds["one"] == pytest.approx(float(torch.stack(norms).median()), rel=1e-6)


def test_public_samples_refuse_a_data_set_that_is_all_private():
    digits = _tiny_digits(4)
    with pytest.raises(GradcoreValueError, match="every image of tiny is private"):
        experiment.public_samples(digits, [digits.images], 2)
