"""gradcore.scenarios and gradcore.experiments: seeded, independent cases, and the chapters' experiments."""

import numpy as np
import pytest
import torch

from gradcore import data, experiments, models
from gradcore.analysis import dense


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=200)


def test_scenarios_match_single_scenarios_seed_by_seed(digits):
    cases = experiments.scenarios(digits, "mlp", 2, count=3, seed=5, widths=(16,))
    assert len(cases) == 3
    for offset, case in enumerate(cases):
        alone = experiments.scenario(digits, "mlp", 2, seed=5 + offset, widths=(16,))
        assert torch.equal(case.inputs, alone.inputs) and torch.equal(case.labels, alone.labels)
        assert all(torch.equal(a, b) for a, b in zip(case.model.parameters(), alone.model.parameters()))
    assert not torch.equal(cases[0].inputs, cases[1].inputs)


def test_scenarios_build_a_fresh_model_per_case_from_a_function(digits):
    def build(seed):
        return models.fcn(digits.shape, digits.num_classes, (16, 8), seed=seed)

    cases = experiments.scenarios(digits, build, 1, count=2, seed=0)
    assert cases[0].model is not cases[1].model
    assert all(torch.equal(a, b) for a, b in zip(cases[1].model.parameters(), build(1).parameters()))


def test_scenarios_reject_a_shared_model_and_an_empty_count(digits):
    with pytest.raises(TypeError, match="shared"):
        experiments.scenarios(digits, torch.nn.Linear(64, 10), 1, count=2)
    with pytest.raises(ValueError, match="count"):
        experiments.scenarios(digits, "mlp", 1, count=0)


def test_distinct_scenarios_never_attack_an_image_twice(digits):
    small = digits.subset(np.arange(12))
    cases = experiments.scenarios(small, "mlp", 2, count=6, seed=3, distinct=True, widths=(16,))
    drawn = torch.cat([case.inputs for case in cases]).flatten(1)
    assert len(torch.unique(drawn, dim=0)) == len(torch.unique(small.images.flatten(1), dim=0))  # all 12, once each
    with pytest.raises(ValueError, match="need 14 images"):
        experiments.scenarios(small, "mlp", 2, count=7, distinct=True, widths=(16,))


def test_final_table_prints_a_diverged_run_as_diverged():
    class Run:
        def __init__(self, value, diverged):
            self.value, self.diverged = value, diverged

        def final(self, key):
            return self.value

    table = experiments.final_table({"step": {"small": Run(2e-7, False), "large": Run(2.28e156, True)}}, "mse")
    assert table.rows == [["step", "small", "2e-07", ""], ["step", "large", "diverged (> 1000)", "diverged"]]


def test_alone_is_one_sample_of_the_batch_with_the_same_model(digits):
    case = experiments.scenario(digits, "mlp", 3, seed=0)
    single = case.alone(1)
    assert single.model is case.model and single.batch_size == 1
    assert torch.equal(single.inputs, case.inputs[1:2]) and torch.equal(single.labels, case.labels[1:2])


def test_label_outcomes_agree_with_label_accuracy_and_rerun_given_seeds(digits):
    outcomes = experiments.label_outcomes(digits, "idlg", 4, seed=3, progress=False)
    assert list(outcomes) == [3, 4, 5, 6] and all(outcomes.values())  # iDLG is exact for one sample
    assert experiments.label_accuracy(digits, "idlg", 4, seed=3, progress=False) == 1.0
    assert list(experiments.label_outcomes(digits, "idlg", 2, seeds=[9, 4], progress=False)) == [9, 4]
    with pytest.raises(ValueError, match="unknown label method"):
        experiments.label_outcomes(digits, "guess", 1, progress=False)


def test_binomial_spread_is_the_standard_error_of_a_share():
    assert experiments.binomial_spread(0.9, 100) == pytest.approx(0.03)
    assert experiments.binomial_spread(1.0, 10) == 0.0
    with pytest.raises(ValueError):
        experiments.binomial_spread(1.5, 10)


def _result_with(snapshots):
    from gradcore.attacks import AttackResult

    return AttackResult(snapshots[-1][1], None, {}, snapshots)


def test_steps_to_psnr_clips_to_the_pixel_range_and_finds_the_first_step():
    truth = torch.full((2, 1, 4, 4), 0.5, dtype=torch.float64)
    # MSE 0.01 is 20 dB; an image far above 1 clips to 1 (MSE 0.25, about 6 dB) instead of scoring below 0 dB.
    far, near, exact = truth + 100.0, truth + 0.1, truth.clone()
    result = _result_with([(0, far), (1, near), (2, exact)])
    assert experiments.steps_to_psnr(result, truth, 6.0) == 0
    assert experiments.steps_to_psnr(result, truth, 19.9) == 1
    assert experiments.steps_to_psnr(result, truth, 40.0) == 2
    assert experiments.steps_to_psnr(_result_with([(0, far)]), truth, 20.0) is None
    kept = experiments.keep_snapshots(result, [0, 2])
    assert [step for step, _ in kept.snapshots] == [0, 2] and len(result.snapshots) == 3


def test_batch_slowdown_counts_the_batch_and_each_sample_alone(digits):
    case = experiments.scenario(digits, "linear_unit", 1, seed=0, dtype=torch.float64, distinct_labels=True)
    batch_steps, alone, result = experiments.batch_slowdown(case, 30.0, 60, 60, optimiser="gd", init="rand", lr=0.01)
    assert len(alone) == 1 and alone[0] == batch_steps  # a batch of one is its own sample alone
    assert batch_steps is not None and 0 < batch_steps <= 60 and len(result.snapshots) == 61
    # The budgets are the attack's: the batch runs 60 steps (not the attack's default 300), each sample alone 5.
    assert result.history["iteration"][-1] == 60
    _, alone, _ = experiments.batch_slowdown(case, 300.0, 60, 5, optimiser="gd", init="rand", lr=0.01)
    assert alone == [None]


def test_perturbation_sweep_averages_batches_and_figure5_artifact_keeps_the_gradient():
    digits = data.load("digits")
    rows = experiments.exclusivity.perturbation_sweep(digits, (2, 10), 64, 12, 0, seed=0, batches=2)
    assert [row.width for row in rows] == [2, 10]
    assert all(0 <= row.moved_share <= 1 and row.gradient_difference < 1e-10 for row in rows)
    assert rows[0].moved_share > rows[1].moved_share  # 10 free sample directions against 2
    with pytest.raises(ValueError):
        experiments.exclusivity.perturbation_sweep(digits, (2,), 64, 12, 0, batches=0)
    index, artifact = experiments.exclusivity.figure5_artifact(digits, (7, 64), 8, np.random.default_rng(0), seed=0)
    assert len(index) == 8 and artifact.gradient_difference < 1e-10
    truth, rows = experiments.exclusivity.artifact_rows(digits, index, artifact)
    assert truth.shape == rows[0][1].shape == (8, 1, 8, 8) and [label for label, _ in rows] == ["artifact", "|difference|"]



def test_survey_widths_surveys_each_width_before_and_after_training(digits):
    points, accuracy = experiments.exclusivity.survey_widths(digits, (8, 16), (2, 3), trials=2, seed=0)
    assert set(points) == set(accuracy) == {8, 16}
    assert [point.batch_size for point in points[8]] == [2, 3]
    _, trained = experiments.exclusivity.survey_widths(digits, (8,), (2,), trials=1, seed=0, epochs=2, lr=1e-2)
    assert trained[8] > accuracy[8]  # training on the surveyed set raises its accuracy


def test_gan_prior_matrix_runs_each_attack_with_its_generator_and_the_untrained_control(digits):
    from gradcore.experiments import generative as gan

    small = digits.subset(range(200))
    prior = gan.train_prior(small, 1, steps=2, training={"batch_size": 8, "latent_dim": 4, "width": 8}, seed=0, progress=False)
    assert set(prior.private.labels.tolist()) == set(range(10)) and len(prior.private) == 10
    assert not any(torch.equal(a, b) for a in prior.private.images for b in prior.public.images)  # held out
    cases = {"digits": experiments.scenarios(prior.private, "lenet", 1, 1, seed=0)}
    specs = {"GGL": {"attack": "ggl", "population": 4}, "GIAS": {"attack": "gias", "candidates": 2}}
    budgets = {"GGL": {"generations": 2}, "GIAS": {"latent_iterations": 2, "parameter_iterations": 1}}
    defenses = {"none": {"defense": None}, "clip 4": {"defense": "clip", "bound": 4.0}}
    grid = gan.attack_matrix({"digits": prior}, cases, specs, budgets, defenses, ("mse",), seed=0)
    assert grid.ran("digits", "GGL", "clip 4") and grid.ran("digits", "GIAS (untrained prior)", "none")
    assert not grid.ran("digits", "GIAS (untrained prior)", "clip 4")  # the control runs undefended only
    spec = gan.gan_attacks(specs, budgets, prior.generator, scenarios=["digits"])["GIAS"]
    assert spec["generator"] is prior.generator and spec["labels"] == "hidden" and spec["latent_iterations"] == 2
    quality = gan.prior_quality({"digits": prior}, samples=4, private_classes={"digits": ["3"]})
    assert quality.rows[0][:2] == ["digits", "190"]  # scored on the threes only, but the training set is all 190
    from gradcore import generative
    threes = generative.nearest_training_images(prior.private.images, prior.public.of_classes(["3"]))[1]
    assert quality.rows[0][4] == f"{threes.mean():.4f}"  # held-out images against the public threes alone
    # A reconstruction that is its private image identifies it; one copy of the class mean cannot.
    grid.cell("digits", "GGL", "none").reconstructions = [case.inputs.clone() for case in cases["digits"]]
    assert gan.identified(grid, "digits", "GGL").tolist() == [True]


def test_identification_finds_the_own_image_and_a_mean_image_only_by_chance(digits):
    from gradcore import evaluation
    from gradcore.experiments import generative as gan

    cases = experiments.scenarios(digits.of_classes(["3"]), "mlp", 1, 6, seed=1, distinct=True, widths=(8,))
    truths = [case.inputs for case in cases]
    grid = evaluation.Evaluation(["s"], ["own", "mean"], ["none"], ["mse"], truths={"s": truths})
    noisy = [t + 0.02 * torch.randn(t.shape, generator=torch.Generator().manual_seed(i)) for i, t in enumerate(truths)]
    grid.add(evaluation.Cell("s", "own", "none", {"mse": 0.0}, noisy, 0.0, [], 6))
    mean = torch.cat(truths).mean(dim=0, keepdim=True)
    grid.add(evaluation.Cell("s", "mean", "none", {"mse": 0.0}, [mean] * 6, 0.0, [], 6))
    assert gan.identified(grid, "s", "own").all()
    assert gan.identified(grid, "s", "mean").sum() == 1  # the one image nearest the mean, and no other
    repeated = evaluation.Evaluation(["s"], ["own"], ["none"], ["mse"], truths={"s": [truths[0], truths[0]]})
    repeated.add(evaluation.Cell("s", "own", "none", {"mse": 0.0}, [truths[0], truths[0]], 0.0, [], 2))
    with pytest.raises(ValueError, match="distinct"):
        gan.identified(repeated, "s", "own")


def test_public_data_floors_and_the_raw_baseline_comparison(digits):
    from gradcore import evaluation
    from gradcore.experiments import generative as gan

    cases = experiments.scenarios(digits, "lenet", 1, 2, seed=0)
    # The attacker's public data never holds the attacked images: with them, both floors refuse.
    for floor in (gan.public_mean_mse, gan.class_mean_mse):
        with pytest.raises(ValueError, match="holds 2 of the 2 private images"):
            floor(digits, cases)
    public = digits.without(torch.cat([c.inputs for c in cases]))
    mean = public.images.mean(dim=0, keepdim=True)
    expected = float(torch.cat([(c.inputs - mean).pow(2).flatten(1).mean(1) for c in cases]).mean())
    assert gan.public_mean_mse(public, cases) == pytest.approx(expected, rel=1e-6)
    threes = public.subset((public.labels == 3).nonzero().flatten().numpy())
    mean3 = threes.images.mean(dim=0, keepdim=True)
    expected3 = float(torch.cat([(c.inputs - mean3).pow(2).flatten(1).mean(1) for c in cases]).mean())
    assert gan.public_mean_mse(public, cases, classes=["3"]) == pytest.approx(expected3, rel=1e-6)
    # The class-conditional floor: each image against its own class's mean, never above the pooled mean's MSE.
    by_class = gan.class_mean_mse(public, cases)
    for case, value in zip(cases, by_class):
        own = public.images[public.labels == case.labels[0]].mean(dim=0)
        assert value == pytest.approx(float((case.inputs[0] - own).pow(2).mean()), rel=1e-6)
    assert by_class.mean() < expected
    with pytest.raises(ValueError, match="no public image"):
        gan.class_mean_mse(public.of_classes(["3"]), [c for c in cases if int(c.labels[0]) != 3])
    assert gan.gain_over(np.array([0.1]), np.array([0.01]))[0] == pytest.approx(10.0)

    grid = evaluation.Evaluation(["s"], ["a"], ["x", "y", "d"], ["mse"])
    for defense, value in (("x", 0.05), ("y", 0.30), ("d", 0.20)):
        grid.add(evaluation.Cell("s", "a", defense, {"mse": value}, [], 0.0, [], 1))
    behind = gan.ahead_of_baselines(grid, "s", "a", "d", ["x", "y"])
    assert behind["strongest"] == "y" and not behind["holds"] and behind["margin"] == pytest.approx(-0.1)
    assert behind["shown"] == "strongest baseline 0.3000, d 0.2000"
    ahead = gan.ahead_of_baselines(grid, "s", "a", "y", ["x", "d"])
    assert ahead["holds"] and ahead["margin"] == pytest.approx(0.1)


def test_saturation_sweep_measures_each_draw_on_the_attacks_own_start(digits):
    adam = {"optimiser": "adam", "lr": 0.1, "init": "randn", "record_every": 100, "iterations": 500}
    sweep = experiments.minimal.saturation_sweep(digits, (1.0, 30.0), 2, {"widths": (32,), "activation": "sigmoid"}, adam,
                                                 seed=3, progress=False)
    assert [len(sweep.final_mse[scale]) for scale in (1.0, 30.0)] == [2, 2]
    # A standard-normal start leaves the sigmoids in their working range; thirty times it saturates most of them.
    assert max(sweep.shares[1.0]) < 0.2 < 0.5 < min(sweep.shares[30.0])
    assert sweep.count(1.0, below=(1 / 255) ** 2 / 12) == 2 and sweep.count(30.0, above=1.0) == 2
    assert [row[0] for row in sweep.rows()] == [1.0, 30.0] and sweep.rows()[1][3] == max(sweep.final_mse[30.0])
    with pytest.raises(ValueError):
        experiments.minimal.saturation_sweep(digits, (1.0,), 0, {"widths": (32,)}, adam)


def test_dlg_on_insecure_batches_attacks_distinct_insecure_batches():
    digits = data.load("digits")
    model = models.build("mlp", digits.shape, digits.num_classes, seed=0, widths=(256, 256)).double()
    config = {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "iterations": 20}
    values = experiments.exclusivity.dlg_on_insecure_batches(digits, model, 2, 1, config, np.random.default_rng(0), seed=0)
    # One sample is always insecure, and DLG with its label recovers it on this wide network.
    assert len(values) == 2 and min(values) > 40
    with pytest.raises(ValueError):
        experiments.exclusivity.dlg_on_insecure_batches(digits, model, 0, 1, config, np.random.default_rng(0))


def test_visible_artifacts_counts_batches_whose_artifact_moves_a_pixel():
    digits = data.load("digits")
    model = models.build("mlp", digits.shape, digits.num_classes, seed=0, widths=(4, 64)).double()
    network = dense.from_torch(model)
    found = experiments.exclusivity.visible_artifacts(digits, network, 12, 3, np.random.default_rng(0), 0.25, 1e-8)
    # A batch of 12 on 4 first-layer units leaves a large subspace of batches with the same gradient.
    assert found == 3
    assert experiments.exclusivity.visible_artifacts(digits, network, 12, 2, np.random.default_rng(0), 1.01, 1e-8) == 0
    with pytest.raises(ValueError):
        experiments.exclusivity.visible_artifacts(digits, network, 12, 0, np.random.default_rng(0), 0.25, 1e-8)


def test_attack_rows_pairs_each_networks_truth_with_its_own_reconstructions(digits):
    from types import SimpleNamespace

    build = lambda k: experiments.scenario(digits, "mlp", 1, seed=k)  # noqa: E731
    runs = {("mlp", "Euclidean + L-BFGS"): [SimpleNamespace(reconstruction=torch.zeros(1, 1, 8, 8))] * 2,
            ("mlp", "cosine + TV"): [SimpleNamespace(reconstruction=torch.ones(1, 1, 8, 8))] * 2,
            ("other", "cosine + TV"): [SimpleNamespace(reconstruction=torch.full((1, 1, 8, 8), 0.5))] * 2}
    truth, rows = experiments.attack_rows(build, runs, "mlp", 2)
    assert torch.equal(truth, torch.cat([build(0).inputs, build(1).inputs]))
    assert [label for label, _ in rows] == ["Euclidean", "cosine"]
    assert rows[1][1].shape == (2, 1, 8, 8) and float(rows[1][1].min()) == 1.0
    with pytest.raises(ValueError, match="no runs on 'missing'"):
        experiments.attack_rows(build, runs, "missing", 2)


class _Grid:
    """A stand-in for an Evaluation: MSE and LPIPS per (attack, defense), one data set."""

    def __init__(self, mse: dict, lpips: dict | None = None):
        self.mse, self.lpips = mse, lpips or {}

    def value(self, scenario, attack, defense, metric):
        return (self.mse if metric == "mse" else self.lpips)[attack, defense]

    def case_mse(self, scenario, attack, defense):
        return np.asarray(self.mse[attack, defense])


def _evidence(undefended_mse: float, soteria_mse: float = 0.2, censor_mse: float = 0.5):
    from gradcore.experiments import generative

    mse = {("GGL", "none"): undefended_mse, ("GGL (untrained prior)", "none"): 0.4, ("GGL", "soteria 10%"): soteria_mse,
           ("GGL", "censor T=20"): censor_mse, ("GGL", "noise 0.1"): 0.3}
    lpips = {("GGL", "soteria 10%"): 0.5, ("GGL", "censor T=20"): 0.7}
    return generative.GanEvidence(_Grid(mse, lpips), {"digits": np.array([0.1, 0.1])}, _Grid({}), {})


def test_gan_claims_give_a_defense_credit_only_after_the_undefended_attack_recovers():
    from gradcore import claims
    from gradcore.experiments import generative

    strong, weak = _evidence(0.01), _evidence(0.09)  # 10 dB and 0.46 dB over the class mean of 0.1
    for evidence, recovers in ((strong, True), (weak, False)):
        table = claims.Claims("t")
        recovered = generative.claim_recovery(table, evidence, "digits", "GGL", 1.0, 0.5, {"recovery": {}, "control": {}})
        assert recovered is recovers
        generative.claim_defenses(table, evidence, "digits", "GGL", recovered, 1.0, ["noise 0.1"], ("mse", "lpips_vgg"), 1.0)
        verdicts = [row.holds for row in table.rows]
        # recovery, its control (trained 0.01 or 0.09 below untrained 0.4), then four defense rows
        assert verdicts[:2] == [recovers, True] and len(verdicts) == 6
        if recovers:
            assert verdicts[2:] == [True, True, True, True]  # Soteria < CENSOR twice, CENSOR at 5x the floor, ahead
        else:
            assert verdicts[2:] == [None] * 4  # not reproduced: attack too weak
            assert all("not reproduced (above)" in row.test for row in table.rows[2:])
    table = claims.Claims("t")
    generative.claim_defenses(table, _evidence(0.01, soteria_mse=0.6), "digits", "GGL", True, 1.0, ["noise 0.1"],
                              ("mse", "lpips_vgg"), 1.0)
    assert [row.holds for row in table.rows][0] is False  # Soteria ahead of CENSOR fails the ordering
