"""Inverting Gradients: cost against the double-backward floor, and quality on images never tuned on.

Two questions the ``ig_vs_breaching.py`` bench leaves open, answered in one process:

* **How far above the floor is an iteration?** One iteration of the cosine + TV attack must
  do at least one double backward: the model's forward pass, its parameter gradient with
  ``create_graph=True``, the cosine and TV, and their gradient with respect to the image.
  The floor is that, written by hand in plain torch (no vmap, no history, no scheduler),
  followed by an Adam step (on the sign, as the paper's; the sign of a 32x32 image costs
  nothing next to a double backward); gradcore's iteration is
  ``gradcore.attack("inverting_gradients", ...)``. Both are timed by differencing a long
  and a short run (``(T(12) - T(2)) / 10``, set-up costs cancel), alternating, the median
  over ``--repeats``; reported as gradcore / floor, and each over one plain gradient of
  the same model and image (the unit of ``ig_vs_breaching.py``).
* **Does the attack's quality hold on images nobody tuned it on?** The real test images
  that foolbox's wheel ships: CIFAR-10's and CIFAR-100's (32x32) and ImageNet's
  (centre-cropped to 32x32); the book's settings were chosen on scikit-image crops. Each
  is attacked for ``--iterations`` (500) with the attack's defaults (gradcore's: plain Adam,
  cosine annealing) and with the paper's settings (``papers.COSINE``: signed Adam, step
  decay), paired on the same images, labels given, on the untrained ConvNet of width 64
  (with the convolution biases of the paper's model) in eval mode, behind the paper's input
  scaling (CIFAR-10's per-channel mean and standard deviation, as breaching's cases do);
  scored as dB of PSNR above a flat image of the private image's mean colour (per channel).
  ``--raw`` drops the input scaling, ``--no-bias`` the biases: the two ways an earlier
  version of this bench under-reported.

Run from the repository root on an otherwise idle machine:

    .venv/bin/python bench/ig_floor.py            # writes bench/results/ig_floor.json
    .venv/bin/python bench/ig_floor.py --quick    # one image, 40 iterations: a smoke test
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from _results import write_json

from gradcore import attacks, data, gradients, metrics, models, papers
from gradcore.attacks import inverting

SHORT, LONG = 2, 12  # iterations of the differenced runs
TV_WEIGHT, LR = 1e-4, 0.1  # the attack's defaults (Geiping et al., Sec. 4)


class Normalise(torch.nn.Module):
    """CIFAR-10's per-channel mean and standard deviation (breaching's), as a layer without parameters."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean) / self.std


def floor_run(model, target, image_shape, label, iterations: int, seed: int = 0) -> torch.Tensor:
    """The least an iteration can do: forward, parameter gradient with a graph, cosine + TV, its image gradient,
    one signed Adam step and the clamp to [0, 1]."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    dummy = torch.rand(image_shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(True)
    optimizer = torch.optim.Adam([dummy], lr=LR)
    for _ in range(iterations):
        loss = torch.nn.functional.cross_entropy(model(dummy), label)
        candidate = torch.autograd.grad(loss, parameters, create_graph=True)
        objective = inverting.cosine_distance(candidate, target) + TV_WEIGHT * inverting.total_variation(dummy)
        (direction,) = torch.autograd.grad(objective, dummy)
        dummy.grad = direction.sign()
        optimizer.step()
        with torch.no_grad():
            dummy.clamp_(0, 1)
    return dummy.detach()


def gradcore_run(model, target, image_shape, label, iterations: int, seed: int = 0, **settings) -> torch.Tensor:
    return attacks.attack("inverting_gradients", model, target, shape=tuple(image_shape[1:]), labels=label, seed=seed,
                          progress=False, iterations=iterations, record_every=max(iterations, 1),
                          **settings).reconstruction


def seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def per_iteration(run, *arguments) -> float:
    return (seconds(lambda: run(*arguments, LONG)) - seconds(lambda: run(*arguments, SHORT))) / (LONG - SHORT)


#: The photos the quality half attacks: foolbox's real test images, none of them used to choose the defaults.
SETS = {"cifar10_samples": {}, "cifar100_samples": {}, "imagenet_samples": {"size": 32}}


def attacked_model(dataset, args) -> torch.nn.Module:
    """The untrained ConvNet-64 (seed 0) for ``dataset``'s classes, in eval mode, behind the input scaling."""
    model = models.build("convnet", dataset.shape, dataset.num_classes, seed=0, bias=not args.no_bias)
    return (model if args.raw else torch.nn.Sequential(Normalise(), model)).eval()


#: The attack settings the quality half compares on the same images: the attack's defaults
#: (gradcore's) and the paper's (``papers.COSINE``, which every chapter passes explicitly).
CONFIGS = {"defaults": {}, "paper": dict(papers.COSINE)}


def attack_image(task: tuple) -> dict:
    """dB above a flat image of the mean colour after ``iterations`` for one photo and one setting
    (run in a worker process, one thread, so the photos of both settings share the cores)."""
    config, name, index, iterations, raw, no_bias = task
    torch.set_num_threads(1)
    dataset = data.load(name, **SETS[name])
    model = attacked_model(dataset, argparse.Namespace(raw=raw, no_bias=no_bias))
    image, label = dataset.images[index:index + 1], dataset.labels[index:index + 1]
    target = tuple(g.detach() for g in gradients.batch_gradient(model, image, label))
    flat = image.mean(dim=(2, 3), keepdim=True).expand_as(image)
    reconstruction = gradcore_run(model, target, image.shape, label, iterations, **CONFIGS[config]).clamp(0, 1)
    gain = metrics.psnr(reconstruction, image).item() - metrics.psnr(flat, image).item()
    print(f"  {config}: {name} {index}: {gain:+.2f} dB above flat", file=sys.stderr, flush=True)
    return {"set": name, "image": index, "label": int(label.item()), "db_above_flat": gain}


def quality(args) -> dict:
    """Each setting of ``args.configs`` on ``args.images`` photos of every set from index ``args.start``,
    ``args.jobs`` photos at once (single-threaded processes; the quality does not depend on the timing)."""
    tasks = [(config, name, index, args.iterations, args.raw, args.no_bias)
             for config in args.configs for name in args.sets
             for index in range(args.start, min(args.start + args.images, len(data.load(name, **SETS[name]))))]
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        rows = list(pool.map(attack_image, tasks))
    result = {}
    for config in args.configs:
        mine = [row for row, task in zip(rows, tasks) if task[0] == config]
        gains = [row["db_above_flat"] for row in mine]
        result[config] = {
            "settings": CONFIGS[config] or "the attack's defaults",
            "images": mine, "median_db_above_flat": statistics.median(gains), "least_db_above_flat": min(gains),
            "median_per_set": {name: statistics.median(r["db_above_flat"] for r in mine if r["set"] == name)
                               for name in args.sets}}
    if {"defaults", "paper"} <= set(args.configs):
        paired = [d["db_above_flat"] - p["db_above_flat"]
                  for d, p in zip(result["defaults"]["images"], result["paper"]["images"])]
        result["defaults_minus_paper_db"] = {"each": paired, "median": statistics.median(paired),
                                             "better_on": sum(g > 0 for g in paired), "of": len(paired)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4, help="real test images attacked per set, for quality")
    parser.add_argument("--start", type=int, default=0,
                        help="first photo of each set (4: the 16 per set the defaults were never checked on)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS), help="which photos")
    parser.add_argument("--iterations", type=int, default=500, help="attack budget per image")
    parser.add_argument("--repeats", type=int, default=7, help="alternating repeats of the per-iteration timing")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--raw", action="store_true",
                        help="attack the ConvNet on [0, 1] pixels, without the paper's (and breaching's) input scaling")
    parser.add_argument("--no-bias", action="store_true", help="the ConvNet without convolution biases (bias=False)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                        help="attack settings of the quality half: the attack's defaults, the paper's")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="photos attacked at once, one thread each")
    parser.add_argument("--skip-cost", action="store_true", help="only the quality half")
    parser.add_argument("--quick", action="store_true", help="one image of one set, 40 iterations, 2 repeats: a smoke test")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ig_floor.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.iterations, args.repeats, args.sets = 1, 40, 2, args.sets[:1]
    torch.set_num_threads(args.threads)
    cost = None if args.skip_cost else measure_cost(args)  # alone on the machine, before the quality half
    result = {
        "benchmark": "ig_floor",
        "environment": {"torch": torch.__version__, "threads": args.threads, "quality_jobs": args.jobs},
        "protocol": {"model": ("" if args.raw else "Normalise(CIFAR-10 mean, std) -> ") +
                     f"gradcore convnet (width 64, bias={not args.no_bias}), untrained, seed 0, eval mode",
                     "labels": "given", "images": {name: f"data.load({name!r}, **{SETS[name]})" for name in args.sets},
                     "iterations": args.iterations, "first_image": args.start, "per_iteration": f"(T({LONG}) - T({SHORT})) / {LONG - SHORT}, "
                     f"median of {args.repeats} alternating repeats", "quick": args.quick},
        "cost": cost,
        "quality": quality(args),
    }
    write_json(args.out, result)
    return 0


def measure_cost(args) -> dict:
    """gradcore's iteration over the hand-written floor, and the floor in plain gradients, on CIFAR-10 image 0."""
    cifar = data.load("cifar10_samples")
    model = attacked_model(cifar, args)
    image, label = cifar.images[:1], cifar.labels[:1]
    target = tuple(g.detach() for g in gradients.batch_gradient(model, image, label))
    for _ in range(2):  # warm-up
        floor_run(model, target, image.shape, label, SHORT)
        gradcore_run(model, target, image.shape, label, SHORT)
    ratios, floors, units = [], [], []
    for _ in range(args.repeats):
        unit = statistics.median(seconds(lambda: gradients.batch_gradient(model, image, label)) for _ in range(5))
        floor = per_iteration(floor_run, model, target, image.shape, label)
        ours = per_iteration(gradcore_run, model, target, image.shape, label)
        ratios.append(ours / floor)
        floors.append(floor / unit)
        units.append(unit)
    cost = {"gradcore_over_floor": statistics.median(ratios), "gradcore_over_floor_each": ratios,
            "floor_in_plain_gradients": statistics.median(floors),
            "gradcore_in_plain_gradients": statistics.median(r * f for r, f in zip(ratios, floors)),
            "plain_gradient_ms": 1e3 * statistics.median(units)}
    print(f"cost: gradcore / floor {cost['gradcore_over_floor']:.3f}; floor {cost['floor_in_plain_gradients']:.2f} "
          f"plain gradients per iteration", file=sys.stderr, flush=True)
    return cost


if __name__ == "__main__":
    raise SystemExit(main())
