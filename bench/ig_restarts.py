"""Batched vs sequential restarts of the Inverting Gradients attack, as multiples of one plain gradient.

Geiping et al. (2020, Sec. 4) run several restarts and keep the best; gradcore optimises
them together (``restarts=R`` stacks them and ``torch.func.vmap`` vectorises one double
backward over the stack) instead of looping over them in Python. This script measures
what that buys.

The unit is one plain gradient computation (forward + backward of the loss with respect
to the parameters, ``gradcore.gradients.batch_gradient``) on the same model and image,
timed in the same process right before each measurement. For each R it reports:

* ``batched``: one evaluation of the attack's step direction for R stacked restarts
  (``gradcore.attacks.inverting.batched_objective(..., restarts=R)``), in units;
* ``sequential``: R evaluations of the single-restart step direction, in units;
* ``batched / sequential``: below 1 means batching saves time;
* ``hardware floor``: one plain gradient of a batch of R images over R plain gradients of
  one image. This is what batching buys the model's own forward and backward on this
  machine, and so about the best any batching of restarts can do here: where it is near
  1, the device is already busy with one image and stacking R only lines up R times
  the arithmetic.

The step direction is an iteration's cost: the signed Adam update and the box
projection after it are elementwise and negligible. Every number is a median over
repeats after a warm-up. Run from the repository root on an idle machine:

    .venv/bin/python bench/ig_restarts.py          # writes bench/results/ig_restarts.json
    .venv/bin/python bench/ig_restarts.py --quick  # smoke test
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
from gradcore import client, gradients, models
from gradcore.attacks import inverting

SHAPE = (3, 32, 32)
NUM_CLASSES = 10
TV_WEIGHT = 1e-4


def seconds(function, repeats: int, device: str = "cpu") -> float:
    """Median wall time of ``function()`` over ``repeats`` calls after one warm-up call (GPU work waited for)."""
    wait = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    function()
    wait()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(width: int, restarts: int, repeats: int, device: str = "cpu") -> dict:
    """Paired ratios for one model width and one restart count."""
    model = models.build("convnet", SHAPE, NUM_CLASSES, seed=0, width=width).eval().to(device)
    generator = torch.Generator().manual_seed(0)
    image = torch.rand((1, *SHAPE), generator=generator).to(device)
    label = torch.tensor([3], device=device)
    target = client.shared_gradient(model, image, label)
    single = inverting.batched_objective(model, target, label, "cross_entropy", TV_WEIGHT, restarts=1)
    batched = inverting.batched_objective(model, target, label, "cross_entropy", TV_WEIGHT, restarts=restarts)
    stack = torch.rand((restarts, 1, *SHAPE), generator=generator).to(device)

    def plain():
        gradients.batch_gradient(model, image, label)

    def sequential():
        for r in range(restarts):
            single(stack[r : r + 1])

    many_images = stack.reshape(restarts, *SHAPE)
    many_labels = label.repeat(restarts)

    def plain_batch():
        gradients.batch_gradient(model, many_images, many_labels)

    unit_before = seconds(plain, repeats, device)
    batched_seconds = seconds(lambda: batched(stack), repeats, device)
    sequential_seconds = seconds(sequential, repeats, device)
    plain_batch_seconds = seconds(plain_batch, repeats, device)
    unit_after = seconds(plain, repeats, device)
    unit = (unit_before + unit_after) / 2
    return {"width": width, "restarts": restarts, "gradient_ms": 1e3 * unit,
            "batched": batched_seconds / unit, "sequential": sequential_seconds / unit,
            "batched_over_sequential": batched_seconds / sequential_seconds,
            "hardware_floor": plain_batch_seconds / (restarts * unit),
            "unit_drift": unit_after / unit_before}


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--restarts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run (default: the GPU if there is one)")
    parser.add_argument("--quick", action="store_true", help="width 16, R in (1, 4), 2 repeats: a smoke test")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default: results/ig_restarts.json on the CPU, results/ig_restarts_cuda.json on a GPU)")
    args = parser.parse_args(argv)
    if args.quick:
        args.widths, args.restarts, args.repeats = [16], [1, 4], 2
    gradcore.setup(0, threads=args.threads)

    rows = [measure(width, r, args.repeats, args.device) for width in args.widths for r in args.restarts]
    print(f"Inverting Gradients step direction, ConvNet (Geiping et al.) on one 3x32x32 image, "
          f"torch {torch.__version__}, {args.device}, {args.threads} threads; unit: one plain gradient")
    header = (f"{'width':>5} {'R':>3} {'batched':>9} {'sequential':>11} {'batched/sequential':>19} {'hardware floor':>15} "
              f"{'unit drift':>10}")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['width']:>5} {row['restarts']:>3} {row['batched']:>8.2f}x {row['sequential']:>10.2f}x "
              f"{row['batched_over_sequential']:>19.2f} {row['hardware_floor']:>15.2f} {row['unit_drift']:>10.2f}")
    if args.quick:
        return 0
    result = {"benchmark": "ig_restarts", "torch": torch.__version__, "python": platform.python_version(),
              "cpus": os.cpu_count(), "threads": args.threads, "device": _device_name(args.device),
              "repeats": args.repeats, "statistic": "median after one warm-up",
              "unit": "one plain gradient (forward + backward wrt parameters) of the same model and image", "rows": rows}
    default = "ig_restarts.json" if args.device == "cpu" else "ig_restarts_cuda.json"
    write_json(args.out or Path(__file__).parent / "results" / default, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
