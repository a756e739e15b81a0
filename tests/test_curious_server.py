"""gradcore.experiments.curious_server: verdicts and claims of the what-protects-flower page.

Reference: the verdict levels of what-protects (``papers.WHAT_PROTECTS``), applied by hand
to a hand-built evaluation; and the rule that a defense gets credit only once the undefended
attack recovers the data.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from gradcore import claims, evaluation, papers
from gradcore.experiments import curious_server as cs

SETTINGS = papers.WHAT_PROTECTS.settings("ci")
DEFENSES = ["none", "censor T=20", "DP-SGD (Opacus)"]
ATTACKS = ["closed form", "cosine + TV"]
REFERENCE_MSE = 0.06


def grid(mse: dict) -> evaluation.Evaluation:
    """Both scenarios alike; ``mse[(attack, defense)]`` in units of the reference guess's MSE."""
    result = evaluation.Evaluation([cs.CAPTURED, cs.REPLAYED], ATTACKS, DEFENSES, ["mse", "psnr"])
    for scenario in result.scenarios:
        result.reference[scenario] = {"mse": REFERENCE_MSE, "psnr": -10 * math.log10(REFERENCE_MSE)}
        for (attack, defense), ratio in mse.items():
            value = ratio * REFERENCE_MSE
            result.add(evaluation.Cell(scenario, attack, defense, {"mse": value, "psnr": -10 * math.log10(value)},
                                       cases=1))
    return result


def test_verdicts_follow_the_levels():
    g = grid({(a, d): r for a in ATTACKS for d, r in zip(DEFENSES, (0.005, 0.05, 0.95))})
    assert cs.verdict(g, cs.CAPTURED, "closed form", "none", SETTINGS) == "exact"  # <= 1% of the guess's MSE
    assert cs.verdict(g, cs.CAPTURED, "closed form", "censor T=20", SETTINGS) == "leaks"  # 13 dB above it
    assert cs.verdict(g, cs.CAPTURED, "closed form", "DP-SGD (Opacus)", SETTINGS) == "stopped"
    partial = grid({(a, d): 0.5 for a in ATTACKS for d in DEFENSES})
    assert cs.verdict(partial, cs.CAPTURED, "cosine + TV", "none", SETTINGS) == "partial"


LAUNCH = SimpleNamespace(foreign_addresses=[], left_running=[])
GAPS = {d: 1e-7 for d in DEFENSES}


def test_defenses_get_credit_when_the_undefended_attacks_recover():
    g = grid({(a, d): r for a in ATTACKS for d, r in zip(DEFENSES, (1e-6, 1.3, 1.7))})
    table = cs.claims_table(g, GAPS, LAUNCH, SETTINGS)
    assert all(row.holds for row in table.rows)


def test_without_the_control_no_defense_gets_credit(monkeypatch):
    monkeypatch.setenv(claims.REPORT_VARIABLE, "1")  # report, do not raise: the table is what is tested
    g = grid({(a, d): r for a in ATTACKS for d, r in zip(DEFENSES, (1.0, 1.3, 1.7))})
    table = cs.claims_table(g, GAPS, LAUNCH, SETTINGS)
    by_claim = {row.claim.split(" (")[0]: row.holds for row in table.rows}
    assert by_claim["undefended, closed form recovers the clients' digits from Flower's update"] is False
    assert by_claim["censor T=20 stops both attacks on Flower's updates"] is None  # not reproduced, not "holds"


def test_a_socket_off_loopback_fails_the_page(monkeypatch):
    g = grid({(a, d): r for a in ATTACKS for d, r in zip(DEFENSES, (1e-6, 1.3, 1.7))})
    with pytest.raises(AssertionError, match="loopback"):
        cs.claims_table(g, GAPS, SimpleNamespace(foreign_addresses=["10.0.0.2"], left_running=[]), SETTINGS)


FEDAVG = SETTINGS.flower["fedavg"]["label"]


def test_the_schedule_ends_with_a_fedavg_round_the_unrolling_attack_is_told_about():
    rounds = cs.schedule(SETTINGS)
    assert [r["label"] for r in rounds][-2:] == ["DP-SGD (Opacus)", FEDAVG]
    fedavg = rounds[-1]
    assert fedavg["defense"] is None and fedavg["local"] == SETTINGS.flower["fedavg"]["local"]
    unrolled = cs.round_config("inverting_gradients", {"iterations": 3}, fedavg)
    assert unrolled == {"iterations": 3, "local": {"lr": SETTINGS.flower["lr"], **fedavg["local"]}}
    # The closed form takes no local training: it reads the update as it is; one-step rounds change nothing.
    assert cs.round_config("closed_form", {}, fedavg) == {}
    assert cs.round_config("inverting_gradients", {"iterations": 3}, rounds[0]) == {"iterations": 3}


def test_the_fedavg_rows_hold_only_when_each_attack_recovers_the_digits(monkeypatch):
    monkeypatch.setenv(claims.REPORT_VARIABLE, "1")
    defenses = DEFENSES + [FEDAVG]
    for closed, cosine, expected in ((1e-6, 0.05, (True, True)), (0.5, 0.005, (False, True)), (1e-6, 0.95, (True, False))):
        g = grid({})
        g.defenses = defenses
        for scenario in g.scenarios:
            for (attack, defense), ratio in {**{(a, d): r for a in ATTACKS for d, r in zip(DEFENSES, (1e-6, 1.3, 1.7))},
                                             ("closed form", FEDAVG): closed, ("cosine + TV", FEDAVG): cosine}.items():
                value = ratio * REFERENCE_MSE
                g.add(evaluation.Cell(scenario, attack, defense, {"mse": value, "psnr": -10 * math.log10(value)}, cases=1))
        table = cs.claims_table(g, {d: 1e-7 for d in defenses}, LAUNCH, SETTINGS)
        rows = [row for row in table.rows if row.claim.startswith("undefended FedAvg")]
        assert [row.claim.split("): ")[1].split(" ")[0] for row in rows] == ["closed", "cosine"]
        assert tuple(row.holds for row in rows) == expected
