"""Cost of one DLG iteration, as a multiple of one plain gradient computation.

The unit is what a federated client pays anyway: one forward and backward pass of the
loss with respect to the parameters (``gradcore.gradients.batch_gradient``), on the
same model and batch, timed in the same process. A DLG iteration on top of that
differentiates the gradient-matching distance with respect to the dummy inputs
(``create_graph=True`` and a second backward pass), and L-BFGS makes several such
evaluations per step.

For LeNet (the DLG sigmoid variant) on 3x32x32 inputs at batch sizes 1 and 4 it
reports, per optimiser:

* ``step``: one ``optimizer.step(closure)`` with the closure ``gradcore.attacks.dlg``
  uses (gradient descent makes one evaluation per step; L-BFGS up to ``max_iter``,
  counted by wrapping the closure and cross-checked against its ``func_evals``);
* ``per eval``: the step divided by its closure evaluations;
* ``attack``: one iteration of ``gradcore.attack("dlg", ...)`` end to end (history
  recorded every iteration, no truth), by differencing a long and a short run.

Every time is a median over repeats after warm-up; only ratios are meant to be
compared between machines. Run from the repository root:

    .venv/bin/python bench/dlg_iteration.py            # writes bench/results/dlg_iteration.json
    .venv/bin/python bench/dlg_iteration.py --quick    # fewer repeats, for a smoke test
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from _results import write_json

import gradcore
from gradcore import attacks, client, gradients, models

SHAPE = (3, 32, 32)
NUM_CLASSES = 10
BATCH_SIZES = (1, 4)
#: Optimiser settings as the DLG chapter uses them (L-BFGS: lr 1, 20 evaluations per step).
OPTIMISERS = {
    "gd": {"optimiser": "gd", "lr": 0.1},
    "lbfgs": {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20},
    "lbfgs_wolfe": {"optimiser": "lbfgs", "lr": 1.0, "max_iter": 20, "line_search": "strong_wolfe"},
}


def case(batch_size: int, seed: int = 0):
    """LeNet with the DLG initialisation, a private batch, its labels and the shared gradient."""
    model = models.build("lenet", SHAPE, NUM_CLASSES, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.rand((batch_size, *SHAPE), generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), generator=generator)
    return model, inputs, labels, client.shared_gradient(model, inputs, labels)


def time_call(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def plain_gradient_seconds(model, inputs, labels, inner: int) -> float:
    """Mean time of ``inner`` back-to-back plain gradient computations."""
    def block():
        for _ in range(inner):
            gradients.batch_gradient(model, inputs, labels)

    return time_call(block) / inner


def dlg_steps(model, target, labels, batch_size: int, settings: dict, steps: int, seed: int):
    """Run ``steps`` DLG optimiser steps from a fresh dummy; return per-step seconds and evaluations.

    The optimiser and closure are built as in :func:`gradcore.attacks.dlg` (known labels).
    """
    generator = torch.Generator().manual_seed(seed)
    dummy = torch.randn((batch_size, *SHAPE), generator=generator).requires_grad_(True)
    options = {"max_iter": settings["max_iter"], "line_search": settings.get("line_search")} \
        if settings["optimiser"] == "lbfgs" else {}
    optimizer = attacks.OPTIMISERS[settings["optimiser"]]([dummy], settings["lr"], **options)
    calls = [0]

    def closure():
        calls[0] += 1
        optimizer.zero_grad()
        candidate = gradients.batch_gradient(model, dummy, labels, "cross_entropy", create_graph=True)
        distance = attacks.euclidean_distance(candidate, target)
        distance.backward()
        return distance

    seconds, evaluations = [], []
    for _ in range(steps):
        before = calls[0]
        seconds.append(time_call(lambda: optimizer.step(closure)))
        evaluations.append(calls[0] - before)
    if settings["optimiser"] == "lbfgs":  # cross-check the count with L-BFGS's own tally
        assert optimizer.state[optimizer._params[0]]["func_evals"] == calls[0], "closure count disagrees with func_evals"
    return seconds, evaluations, torch.isfinite(dummy).all().item()


def attack_run_seconds(model, target, labels, batch_size: int, settings: dict, iterations: int) -> float:
    """Wall time of a whole ``gradcore.attack("dlg")`` run (history every iteration, no truth)."""
    return time_call(lambda: attacks.attack("dlg", model, target, shape=SHAPE, batch_size=batch_size, labels=labels,
                                            iterations=iterations, progress=False, **settings))


def measure(batch_size: int, name: str, settings: dict, repeats: int, steps: int, inner: int = 10) -> dict:
    """Paired measurements: every repeat times the unit right before what it divides.

    A shared CPU changes absolute times from one second to the next. The reported ratio
    is the median over repeats of ratios taken within each repeat; the ratio of the
    fastest times (``*_min_ratio``, as ``timeit`` would report) is kept next to it,
    since interference only ever adds time. When the two disagree, the machine was busy.
    """
    model, inputs, labels, target = case(batch_size)
    is_lbfgs = settings["optimiser"] == "lbfgs"
    short, long = (1, 3) if is_lbfgs else (5, 25)
    for _ in range(3):  # warm-up: kernels, allocator, the optimiser's first-use imports
        plain_gradient_seconds(model, inputs, labels, inner)
    dlg_steps(model, target, labels, batch_size, settings, 2, seed=1000)
    attack_run_seconds(model, target, labels, batch_size, settings, short)

    units, steps_seconds, step_ratios, eval_ratios, evaluations, finite = [], [], [], [], [], True
    attack_units, shorts, longs, attack_ratios = [], [], [], []
    for repeat in range(repeats):
        unit = plain_gradient_seconds(model, inputs, labels, inner)
        seconds, counts, ok = dlg_steps(model, target, labels, batch_size, settings, steps, seed=repeat)
        units.append(unit)
        steps_seconds += seconds
        step_ratios += [s / unit for s in seconds]
        eval_ratios += [s / c / unit for s, c in zip(seconds, counts)]
        evaluations += counts
        finite &= ok
        if repeat % 2 == 0:  # whole attacks cost more wall time: half of the repeats
            attack_units.append(plain_gradient_seconds(model, inputs, labels, inner))
            longs.append(attack_run_seconds(model, target, labels, batch_size, settings, long))
            shorts.append(attack_run_seconds(model, target, labels, batch_size, settings, short))
            attack_ratios.append((longs[-1] - shorts[-1]) / (long - short) / attack_units[-1])
    fastest = min(units)
    per_eval_fastest = min(s / c for s, c in zip(steps_seconds, evaluations))
    return {
        "model": "lenet", "shape": list(SHAPE), "batch_size": batch_size, "optimiser": name, "settings": settings,
        "evals_per_step": statistics.median(evaluations),
        "evals_per_step_range": [min(evaluations), max(evaluations)],
        "step_ratio": statistics.median(step_ratios),
        "per_eval_ratio": statistics.median(eval_ratios),
        "attack_iteration_ratio": statistics.median(attack_ratios),
        "step_min_ratio": min(steps_seconds) / fastest,
        "per_eval_min_ratio": per_eval_fastest / fastest,
        "attack_iteration_min_ratio": (min(longs) - min(shorts)) / (long - short) / min(attack_units),
        "dummies_stayed_finite": bool(finite),
        # Absolute times for context only; compare ratios, not these.
        "gradient_ms": 1e3 * statistics.median(units),
        "gradient_ms_range": [1e3 * min(units), 1e3 * max(units)],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats per measurement (median reported)")
    parser.add_argument("--steps", type=int, default=3, help="optimiser steps per repeat, from a fresh dummy")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="3 repeats, 2 steps: a smoke test, not a measurement")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "dlg_iteration.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps = 3, 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    rows = []
    for batch_size in BATCH_SIZES:
        for name, settings in OPTIMISERS.items():
            rows.append(measure(batch_size, name, settings, args.repeats, args.steps))
            row = rows[-1]
            print(f"  measured lenet B={batch_size} {name}: step {row['step_ratio']:.2f}x", file=sys.stderr, flush=True)

    header = (f"{'B':>2}  {'optimiser':<12} {'evals/step':>10}  {'step':>7}  {'per eval':>8}  {'attack iter':>11}"
              f"  |  {'step':>7}  {'per eval':>8}  {'attack iter':>11}")
    print(f"DLG iteration cost on LeNet {SHAPE}, in plain gradient computations "
          f"(torch {torch.__version__}, {args.threads} threads, {args.repeats} repeats)")
    print(f"{'':29}{'median of paired ratios':^33}  |  {'ratio of fastest times':^32}")
    print(header)
    print("-" * len(header))
    for row in rows:
        evals = f"{row['evals_per_step']:g}" + ("" if row["evals_per_step_range"][0] == row["evals_per_step_range"][1]
                                                 else " ({}-{})".format(*row["evals_per_step_range"]))
        print(f"{row['batch_size']:>2}  {row['optimiser']:<12} {evals:>10}  {row['step_ratio']:>6.2f}x  "
              f"{row['per_eval_ratio']:>7.2f}x  {row['attack_iteration_ratio']:>10.2f}x  |  "
              f"{row['step_min_ratio']:>6.2f}x  {row['per_eval_min_ratio']:>7.2f}x  {row['attack_iteration_min_ratio']:>10.2f}x")
    print("unit: one plain gradient (forward + backward wrt parameters); median plain gradient "
          + ", ".join(f"B={r['batch_size']} {r['gradient_ms']:.2f} ms" for r in rows if r["optimiser"] == "gd"))

    result = {
        "benchmark": "dlg_iteration",
        "unit": "one plain gradient computation (forward + backward of the loss wrt parameters), same model and batch",
        "environment": {
            "gradcore": gradcore.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or "unknown", "cpu_count": os.cpu_count(),
            "threads": args.threads, "device": "cpu",
        },
        "protocol": {"repeats": args.repeats, "steps_per_repeat": args.steps, "warm_up": True, "statistic": "median",
                     "quick": args.quick},
        "results": rows,
    }
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
