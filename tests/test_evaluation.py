"""gradcore.evaluation: the attack x defense matrix and the attacks it adds.

Outside references: the exact walk-back (MSE ~ 0 undefended), numpy for the gray-guess
reference, and the orthogonality of CENSOR's averaged transformation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradcore import attacks, data, evaluation, experiments, metrics, models, papers
from gradcore.attacks import inverting


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=200)


def test_matrix_scores_skips_and_references(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=s, widths=(32,)) for s in range(2)],
             "B=2": [experiments.scenario(digits, "mlp", 2, seed=0, widths=(32,))]}
    defenses = {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.1}, "censor": {"defense": "censor", "trials": 2}}
    result = evaluation.matrix({"walk": {"attack": "walk_back"}, "only none": {"attack": "walk_back", "defenses": ["none"],
                                                                               "scenarios": ["B=1"]}},
                               defenses, cases, metrics=("mse", "psnr", "lpips"), progress=False)
    assert result.value("B=1", "walk", "none", "mse") < 1e-10
    assert result.value("B=1", "walk", "noise", "mse") > 1e-3
    assert result.value("B=1", "walk", "censor", "mse") > 1e-3
    assert ("B=2", "walk") in result.skipped and "one sample" in result.skipped[("B=2", "walk")]
    assert math.isnan(result.value("B=2", "walk", "none", "mse"))
    assert math.isnan(result.value("B=1", "only none", "noise", "mse"))
    assert result.unmeasured == {}  # LPIPS too, on 8x8 digits (upsampled to 32x32)
    assert result.value("B=1", "walk", "none", "lpips") < 1e-6 < result.value("B=1", "walk", "noise", "lpips")
    truth = np.concatenate([c.inputs.numpy() for c in cases["B=1"]])
    assert result.reference["B=1"]["mse"] == pytest.approx(float(((truth - 0.5) ** 2).reshape(2, -1).mean(1).mean()), rel=1e-9)
    values, rows, columns = result.grid("mse")
    assert values.shape == (len(rows), 3) and columns == ["none", "noise", "censor"]
    assert "n/a" in repr(result.table("mse"))
    assert result.best_defense("mse", "B=1", "walk") in ("noise", "censor")


def test_an_attack_refused_by_a_defense_scores_the_gray_guess(digits):
    if "exclusivity" not in attacks.ATTACKS:
        pytest.skip("the exclusivity attack is not registered")
    case = experiments.scenario(digits, "mlp", 1, seed=0, widths=(32, 16), dtype=torch.float64)
    # Noise destroys the parallel loss columns the exclusivity attack groups: it refuses the gradient.
    result = evaluation.matrix({"excl": {"attack": "exclusivity"}}, {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.1}},
                               {"c": [case]}, metrics=("mse",), progress=False)
    gray = float(metrics.mse(torch.full_like(case.inputs, 0.5), case.inputs))
    assert result.cell("c", "excl", "noise").error and len(result.cell("c", "excl", "noise").errors) == 1
    assert result.value("c", "excl", "noise", "mse") == pytest.approx(gray, rel=1e-12)
    assert result.cell("c", "excl", "none").error is None and result.value("c", "excl", "none", "mse") < 1e-12
    assert ("c", "excl") not in result.skipped


def test_imitated_censor_average_stays_orthogonal_and_differentiable():
    generator = torch.Generator().manual_seed(0)
    g = [torch.randn(5, 4, dtype=torch.float64, requires_grad=True), torch.randn(7, dtype=torch.float64, requires_grad=True)]
    average = inverting.imitate_censor(g, generator, samples=3)
    for a, t in zip(average, g):
        assert abs(float((a * t).sum().detach())) < 1e-10 * float((a.norm() * t.norm()).detach())
    sum(a.sum() for a in average).backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in g)


def test_censor_eot_runs_and_reports(digits):
    photos = data.load("photos", size=16, per_photo=2)
    case = experiments.scenario(photos, "lenet", 1, seed=0)
    result = attacks.attack("censor_eot", case.model, case.gradient(), shape=case.shape, labels=case.labels, truth=case.inputs,
                            progress=False, iterations=3, samples=2)
    assert result.reconstruction.shape == case.inputs.shape and result.history["iteration"] == [0, 3]
    assert float(result.reconstruction.min()) >= 0 and float(result.reconstruction.max()) <= 1


def test_grid_keeps_skipped_rows_and_over_gray_subtracts_the_reference(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))],
             "B=2": [experiments.scenario(digits, "mlp", 2, seed=0, widths=(16,))]}
    result = evaluation.matrix({"walk": {"attack": "walk_back"}}, {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.5}},
                               cases, metrics=("mse", "psnr"), progress=False)
    values, rows, _ = result.grid("mse")
    assert rows == ["walk | B=1"]
    values, rows, _ = result.grid("mse", include_skipped=True)
    assert rows == ["walk | B=1", "walk | B=2"] and np.isnan(values[1]).all()
    assert repr(result.table("mse", include_skipped=True)).count("n/a") == 2
    gains, rows, _ = result.over_gray("psnr", include_skipped=True)
    noisy = result.value("B=1", "walk", "noise", "psnr")
    assert gains[0, 1] == pytest.approx(noisy - result.reference["B=1"]["psnr"]) and np.isnan(gains[1]).all()
    truth = cases["B=1"][0].inputs.double()
    assert result.reference["B=1"]["psnr"] == pytest.approx(float(-10 * torch.log10(((truth - 0.5) ** 2).mean())), rel=1e-5)


def test_imitated_noise_averages_towards_the_gradient():
    """EOT over Gaussian noise: the average of n draws is the gradient plus noise of std sigma / sqrt(n)."""
    g = [torch.randn(200, 50, dtype=torch.float64)]
    for samples in (1, 16):
        average = inverting.imitate_noise(g, torch.Generator().manual_seed(0), samples=samples, sigma=0.5)
        spread = float((average[0] - g[0]).std())
        assert spread == pytest.approx(0.5 / samples ** 0.5, rel=0.05)


def test_imitated_censor_average_shrinks_with_samples():
    """CENSOR's expected transformation is zero: the average of n candidates shrinks like 1 / sqrt(n)."""
    g = [torch.randn(300, 40, dtype=torch.float64)]
    norms = [float(inverting.imitate_censor(g, torch.Generator().manual_seed(1), samples=n)[0].norm() / g[0].norm()) for n in (1, 16)]
    assert norms[0] == pytest.approx(1.0, rel=1e-9)  # one candidate keeps the layer's norm
    assert norms[1] == pytest.approx(0.25, rel=0.1)


def test_eot_imitating_nothing_is_the_papers_cosine_attack_and_per_defense_config(digits):
    photos = data.load("photos", size=16, per_photo=2)
    case = experiments.scenario(photos, "lenet", 1, seed=0)
    common = dict(shape=case.shape, labels=case.labels, progress=False, iterations=4)
    # The adaptive attacker keeps the paper's optimiser (signed Adam, step decay), not the
    # attack's defaults.
    plain = attacks.attack("inverting_gradients", case.model, case.gradient(), **common,
                           **papers.COSINE)
    defaults = attacks.attack("inverting_gradients", case.model, case.gradient(), **common)
    assert not torch.equal(defaults.reconstruction, plain.reconstruction)
    eot = attacks.attack("censor_eot", case.model, case.gradient(), imitate="none", **common)
    assert torch.equal(plain.reconstruction, eot.reconstruction)
    with pytest.raises(ValueError, match="imitates one of"):
        attacks.attack("censor_eot", case.model, case.gradient(), imitate="clip", **common)
    spec = {"eot": {"attack": "censor_eot", "iterations": 2, "samples": 1, "per_defense": {"none": {"imitate": "none"}}}}
    result = evaluation.matrix(spec, {"none": {"defense": None}}, {"c": [case]}, metrics=("mse",), progress=False)
    reference = evaluation.matrix({"ig": {"attack": "inverting_gradients", "iterations": 2, **papers.COSINE}}, {"none": {"defense": None}},
                                  {"c": [case]}, metrics=("mse",), progress=False)
    assert result.value("c", "eot", "none", "mse") == reference.value("c", "ig", "none", "mse")


def test_refusals_are_reported_apart_from_failed_runs(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))]}
    result = evaluation.matrix({"walk": {"attack": "walk_back"}, "closed": {"attack": "closed_form"}},
                               {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.5}},
                               cases, metrics=("mse", "psnr"), progress=False)
    # as if the walk-back had found no row to divide by
    result.cell("B=1", "walk", "noise").errors.append("no row to divide by")
    assert result.refused("B=1", "walk", "noise") and not result.refused("B=1", "closed", "noise")
    assert not result.refused("B=1", "walk", "none")
    stopped, refused, attacked = result.tally("noise", 0.9)
    assert (refused, attacked) == (1, 2) and stopped == int(result.to_gray("B=1", "closed", "noise") >= 0.9)
    assert "refused" in repr(result.table("mse"))
    figure = result.heatmap("psnr")
    assert [t.get_text() for t in figure.axes[0].texts].count("refused") == 1
    # The refused cell is hatched apart from the colour scale (not coloured as a score) and the legend says so.
    assert any(patch.get_hatch() == "///" for patch in figure.axes[0].patches)
    assert [t.get_text() for t in figure.legends[0].get_texts()][0].startswith("refused")
    assert result.weakest("none")[2] < 1e-6


def test_keep_refusals_keeps_an_attack_that_refuses_everything(digits):
    cases = {"B=2": [experiments.scenario(digits, "mlp", 2, seed=0, widths=(16,))]}
    skipped = evaluation.matrix({"walk": {"attack": "walk_back"}}, {"none": {"defense": None}}, cases, metrics=("mse",), progress=False)
    kept = evaluation.matrix({"walk": {"attack": "walk_back"}}, {"none": {"defense": None}}, cases, metrics=("mse",), progress=False,
                             keep_refusals=True)
    assert ("B=2", "walk") in skipped.skipped and not skipped.ran("B=2", "walk", "none")
    assert kept.refused("B=2", "walk", "none") and kept.to_gray("B=2", "walk", "none") == pytest.approx(1.0)


def test_train_snapshots_matches_train_and_keeps_the_sent_models(digits):
    from gradcore import federated

    train_set, test_set = data.split(digits, 0.25, 0)
    options = dict(clients=4, per_round=2, batch_size=8, lr=0.5, evaluate_every=2, seed=0, progress=False)
    build = lambda: models.build("mlp", digits.shape, 10, seed=0, widths=(8,))  # noqa: E731
    reference = build()
    log = federated.fedsgd(reference, train_set, test_set, 5, defense="noise", defense_options={"sigma": 0.1}, defended_rounds=2,
                          **options)
    model = build()
    initial = [p.detach().clone() for p in model.parameters()]
    same, snapshots = federated.fedsgd_snapshots(model, train_set, test_set, 5, at=(0, 2, 4), defense="noise",
                                                defense_options={"sigma": 0.1}, defended_rounds=2, **options)
    assert same.rounds == log.rounds and same.accuracy == log.accuracy
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
    assert sorted(snapshots) == [0, 2, 4]
    assert all(torch.equal(a, b) for a, b in zip(snapshots[0].parameters(), initial))
    # The copy at round 4 is the model before the last step: one more step reaches the final model.
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[4].parameters(), model.parameters()))
    with pytest.raises(ValueError, match="snapshot rounds"):
        federated.fedsgd_snapshots(build(), train_set, test_set, 5, at=(5,), **options)


def test_cells_are_flat_records_with_a_query_api(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))]}
    result = evaluation.matrix({"walk": {"attack": "walk_back"}, "closed": {"attack": "closed_form"}},
                               {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.5}},
                               cases, metrics=("mse",), progress=False)
    assert [cell.key for cell in result.cells] == [("B=1", a, d) for a in ("walk", "closed") for d in ("none", "noise")]
    assert [cell.defense for cell in result.select(attack="closed")] == ["none", "noise"]
    assert [cell.attack for cell in result.select(defense="noise")] == ["walk", "closed"]
    cell = result.cell("B=1", "closed", "none")
    assert cell.cases == 1 and len(cell.reconstructions) == 1 and cell.seconds >= 0 and not cell.refused
    assert result.cell("B=1", "closed", "clip") is None and not result.ran("B=1", "closed", "clip")
    replaced = evaluation.Cell("B=1", "closed", "none", {"mse": 0.5}, cases=1)
    result.add(replaced)
    assert result.cell("B=1", "closed", "none") is replaced and len(result.cells) == 4
    assert result.cells[2] is replaced  # replaced where it stood: tables keep their order
    result.remove("B=1", "walk", "none")
    assert not result.ran("B=1", "walk", "none") and result.cell("B=1", "closed", "none") is replaced


def _buggy_attack(observation, iterations: int = 1):
    """An attack with a bug: numpy's broadcasting error is a plain ValueError, not a refusal."""
    np.zeros(3) + np.zeros(4)


def test_a_bug_inside_an_attack_propagates_instead_of_scoring_a_refusal(digits, monkeypatch):
    monkeypatch.setitem(attacks.ATTACKS._entries, "buggy", _buggy_attack)
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(32,))]}
    with pytest.raises(ValueError, match="broadcast"):
        evaluation.matrix({"bug": {"attack": "buggy"}}, {"none": {"defense": None}, "noise": {"defense": "noise", "sigma": 0.1}},
                          cases, metrics=("mse",), progress=False)
    # The refusals that remain are the attacks' own declarations, all AttackRefused.
    refused = evaluation.matrix({"walk": {"attack": "walk_back"}}, {"none": {"defense": None}},
                                {"B=2": [experiments.scenario(digits, "mlp", 2, seed=0, widths=(32,))]}, metrics=("mse",),
                                progress=False)
    assert "one sample" in refused.skipped[("B=2", "walk")]
    with pytest.raises(attacks.base.check.AttackRefused):
        attacks.attack("walk_back", cases["B=1"][0].model, cases["B=1"][0].gradient(), shape=(8, 8), batch_size=2)


def test_the_matrix_and_a_scenario_give_an_attack_the_same_labels(digits):
    """One label rule: hidden class labels are withheld, regression targets always given (Scenario.attacker_labels)."""
    regression = experiments.scenario(digits, "linear_unit", 1, seed=0)
    classification = experiments.scenario(digits, "mlp", 1, seed=0, widths=(8,))
    assert torch.equal(regression.attacker_labels(known=False), regression.labels)
    assert classification.attacker_labels(known=False) is None
    assert torch.equal(classification.attacker_labels(), classification.labels)
    spec = {"dlg": {"attack": "dlg", "labels": "hidden", "iterations": 2}}
    grid = evaluation.matrix(spec, {"none": {"defense": None}}, {"regression": [regression]}, metrics=("mse",),
                             progress=False)
    direct = regression.attack("dlg", known_labels=False, iterations=2)
    assert torch.equal(grid.cell("regression", "dlg", "none").reconstructions[0], direct.aligned(regression.inputs).clamp(0, 1))
