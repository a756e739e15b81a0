"""gradcore's Inverting Gradients attack against breaching's, in one process.

The peer is ``breaching`` 0.1.2 (Geiping et al.'s own framework; ``pip install
breaching==0.1.2``, or the ``bench`` extra), its ``invertinggradients`` attack with its
defaults on its single-image case (``1_single_image_small``): the untrained CIFAR-10
ConvNet of width 64, one 32x32 image, labels given by the user, batch norm in eval mode
(the honest server sends its public buffers). Both attacks here work on the same
things:

* **the same model object**: breaching's ``ConvNet`` (width 64, 10 classes, PyTorch's
  default initialisation under ``torch.manual_seed(model_seed)``, never trained). It
  expects inputs normalised with the CIFAR-10 mean and standard deviation, which is
  where breaching optimises its dummy. gradcore optimises [0, 1] pixels, so it attacks
  ``Normalise -> ConvNet``: the same function of [0, 1] pixels, whose trainable
  parameters are exactly the ConvNet's (the normalisation has none). The script checks
  that this composition reproduces the shared gradient bit for bit;
* **the same shared gradient**: the one breaching's ``UserSingleStep`` computes on the
  photo (``compute_local_updates`` with the photo as custom data), one tuple for both;
* **the same label handling**: the label is given to both (breaching's case config
  has ``provide_labels: True``); the script also checks that gradcore's label inference
  from the last layer would have found the same label;
* **the same mode**: eval (running statistics of the untrained model);
* **the same budget**: ``--iterations`` (500) optimiser steps each, one restart each;
* **the same optimiser**: the paper's (Adam on the gradient's sign at 0.1, tenfold decays
  at 3/8, 5/8 and 7/8), which is breaching's config and ``papers.COSINE``; gradcore's
  own defaults (plain Adam, cosine annealing) are compared with it by ``ig_floor.py``.

Images are crops from ``gradcore.data.load("photos")`` (scikit-image's bundled
photographs, offline), drawn with ``Dataset.batch(1, seed=s)``. Breaching's
reconstruction is mapped back to [0, 1] (``x * std + mean``, clamped) before scoring;
both are scored by PSNR against the private image and against a flat image of its
mean colour (per channel), and reported as dB above that flat image.

Cost is a ratio, never a time: the unit is one plain gradient computation (forward and
backward of the loss with respect to the parameters) of the same model on the same
image, timed in the same process. Two numbers per attack:

* ``end-to-end``: wall time of the whole ``--iterations`` run divided by its
  iterations, over the median unit measured right before and right after it;
* ``per iteration``: differencing a long and a short run (which cancels set-up costs
  such as breaching's deep copy of the model and its final scoring pass), paired with a
  unit measured right before, the median over ``--repeats`` alternating repeats.

It also measures the cost of R batched restarts of gradcore's attack (``restarts=R``,
vectorised with ``torch.func.vmap``) against R times one restart, by the same
differencing.

Run from the repository root on an otherwise idle machine:

    .venv/bin/python bench/ig_vs_breaching.py            # writes bench/results/ig_vs_breaching.json
    .venv/bin/python bench/ig_vs_breaching.py --quick    # one image, 40 iterations: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import io
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from _results import write_json

import gradcore
from gradcore import attacks, data, gradients, metrics, papers
from gradcore.attacks import inverting

IMAGE_SEEDS = (1, 3, 6)  # photos crops: tissue, coffee, cat
MODEL_SEED = 0
ATTACK_SEED = 0
SHAPE = (3, 32, 32)


class Normalise(torch.nn.Module):
    """``(x - mean) / std`` per channel: the CIFAR-10 preprocessing breaching's models expect."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x):
        return (x - self.mean) / self.std


def quiet(function, *args, **kwargs):
    """Call into breaching without its prints and log lines (hydra's banner, per-run info)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def breaching_setup(iterations: int):
    """Breaching's config, its untrained ConvNet-64, honest server and user (no dataset is built or fetched)."""
    import breaching
    from breaching.cases.models import construct_model
    from breaching.cases.servers import HonestServer
    from breaching.cases.users import UserSingleStep

    logging.getLogger("breaching").setLevel(logging.WARNING)
    cfg = quiet(breaching.get_config, overrides=["case=1_single_image_small", "attack=invertinggradients"])
    cfg.case.server.pretrained = False  # untrained: nothing downloaded
    cfg.attack.optim.max_iterations = iterations
    cfg.attack.optim.callback = 10 ** 9  # no progress logging inside the timed loop
    setup = dict(dtype=torch.float, device=torch.device("cpu"))
    torch.manual_seed(MODEL_SEED)
    model, loss_fn = quiet(construct_model, cfg.case.model, cfg.case.data, pretrained=False)
    server = HonestServer(model, loss_fn, cfg.case, setup)
    # The user is built directly: construct_case would build (and download) CIFAR-10 for it.
    user = UserSingleStep(server.model, loss_fn, None, setup, idx=0, cfg_user=cfg.case.user)
    user.data_key = "inputs"  # needed when the user is fed custom data
    return breaching, cfg, server, user, loss_fn, setup


def plain_gradient_seconds(model, image, label, count: int = 5) -> float:
    """Median wall time of ``count`` plain gradient computations (the unit)."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        gradients.batch_gradient(model, image, label)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, nargs="+", default=list(IMAGE_SEEDS), help="photos crop seeds")
    parser.add_argument("--iterations", type=int, default=500, help="attack budget, the same for both")
    parser.add_argument("--repeats", type=int, default=5, help="paired repeats of the per-iteration timing")
    parser.add_argument("--restarts", type=int, default=4, help="R for the batched-restart cost")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--breaching-tv", type=float, default=None, metavar="SCALE",
                        help="also run breaching with this total-variation scale (its default is 0.2)")
    parser.add_argument("--quick", action="store_true", help="one image, 40 iterations, 2 repeats: a smoke test")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ig_vs_breaching.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.iterations, args.repeats = args.images[:1], 40, 2
    torch.set_num_threads(args.threads)
    short, long = 2, 12  # iterations of the differenced runs

    breaching, cfg, server, user, loss_fn, setup = breaching_setup(args.iterations)
    mean, std = cfg.case.data.mean, cfg.case.data.std
    normalise = Normalise(mean, std)
    payload = server.distribute_payload()
    # gradcore's attacker works on its own copy of the server's model, behind the normalisation.
    network = torch.nn.Sequential(normalise, copy.deepcopy(server.model)).eval()
    gradcore_config = {name: p.default for name, p in inspect.signature(inverting.inverting_gradients).parameters.items()
                       if p.default is not inspect.Parameter.empty and name not in ("snapshots", "record_every")}
    # The paper's optimiser (signed Adam, step decay), as breaching's `invertinggradients` config
    # has it, not gradcore's defaults: the same attack on both sides (ig_floor.py compares the two).
    gradcore_config.update(papers.COSINE)
    gradcore_config["iterations"] = args.iterations
    photos = data.load("photos")

    default_tv = cfg.attack.regularization.total_variation.scale

    def run_breaching(shared, iterations, tv_scale=None):
        cfg.attack.optim.max_iterations = iterations
        cfg.attack.regularization.total_variation.scale = default_tv if tv_scale is None else tv_scale
        attacker = breaching.attacks.prepare_attack(server.model, loss_fn, cfg.attack, setup)
        cfg.attack.regularization.total_variation.scale = default_tv
        torch.manual_seed(ATTACK_SEED)
        reconstruction, _ = quiet(attacker.reconstruct, [payload], [shared], {}, dryrun=False)
        return (reconstruction["data"] * normalise.std + normalise.mean).clamp(0, 1)

    def run_gradcore(shared, label, iterations, restarts=1):
        config = {**gradcore_config, "iterations": iterations, "restarts": restarts}
        return attacks.attack("inverting_gradients", network, shared["gradients"], shape=SHAPE, labels=label,
                              seed=ATTACK_SEED, progress=False, record_every=max(iterations, 1), **config).reconstruction

    rows, restart_row = [], None
    for image_seed in args.images:
        image, label = photos.batch(1, seed=image_seed)
        shared, _ = quiet(user.compute_local_updates, payload, custom_data=dict(inputs=normalise(image), labels=label))
        own = gradients.batch_gradient(network, image, label)
        gradient_gap = max((a - b).abs().max().item() for a, b in zip(own, shared["gradients"]))
        inferred = attacks.infer_labels(network, shared["gradients"], 1)
        flat = image.mean(dim=(2, 3), keepdim=True).expand_as(image)
        flat_psnr = metrics.psnr(flat, image).item()
        for _ in range(3):  # warm-up
            plain_gradient_seconds(network, image, label)
        run_gradcore(shared, label, short)
        run_breaching(shared, short)

        row = {"image_seed": image_seed, "photo": photos.classes[label.item()], "label": label.item(),
               "label_inferred_by_gradcore": inferred.item(), "shared_gradient_max_abs_gap": gradient_gap,
               "flat_psnr": flat_psnr, "attacks": {}}
        runners = [("breaching", lambda: run_breaching(shared, args.iterations)),
                   ("gradcore", lambda: run_gradcore(shared, label, args.iterations))]
        if args.breaching_tv is not None:
            runners.insert(1, (f"breaching_tv{args.breaching_tv:g}",
                               lambda: run_breaching(shared, args.iterations, args.breaching_tv)))
        for name, runner in runners:
            before = plain_gradient_seconds(network, image, label)
            reconstruction, seconds = timed(runner)
            after = plain_gradient_seconds(network, image, label)
            psnr = metrics.psnr(reconstruction, image).item()
            row["attacks"][name] = {"psnr": psnr, "db_above_flat": psnr - flat_psnr,
                                    "end_to_end_ratio": seconds / args.iterations / statistics.mean([before, after]),
                                    "run_seconds": seconds}
            print(f"  image {image_seed} {name}: {psnr - flat_psnr:+.2f} dB above flat", file=sys.stderr, flush=True)

        ratios = {"breaching": [], "gradcore": []}
        units = []
        for _ in range(args.repeats):
            for name in ("gradcore", "breaching"):
                unit = plain_gradient_seconds(network, image, label)
                units.append(unit)
                if name == "gradcore":
                    _, t_long = timed(lambda: run_gradcore(shared, label, long))
                    _, t_short = timed(lambda: run_gradcore(shared, label, short))
                else:
                    _, t_long = timed(lambda: run_breaching(shared, long))
                    _, t_short = timed(lambda: run_breaching(shared, short))
                ratios[name].append((t_long - t_short) / (long - short) / unit)
        for name in row["attacks"]:
            timing = ratios["breaching" if name.startswith("breaching") else name]  # TV's scale does not change the cost
            row["attacks"][name]["per_iteration_ratio"] = statistics.median(timing)
            row["attacks"][name]["per_iteration_ratios"] = timing
        row["gradient_ms"] = 1e3 * statistics.median(units)
        rows.append(row)

        if restart_row is None:  # batched restarts, on the first image only
            r = args.restarts
            batched, singles = [], []
            for _ in range(min(args.repeats, 3)):
                _, t_long = timed(lambda: run_gradcore(shared, label, long, restarts=r))
                _, t_short = timed(lambda: run_gradcore(shared, label, short, restarts=r))
                batched.append((t_long - t_short) / (long - short))
                _, t_long = timed(lambda: run_gradcore(shared, label, long))
                _, t_short = timed(lambda: run_gradcore(shared, label, short))
                singles.append((t_long - t_short) / (long - short))
            restart_row = {"image_seed": image_seed, "restarts": r,
                           "batched_over_sequential": statistics.median(b / (r * s) for b, s in zip(batched, singles)),
                           "batched_over_sequential_each": [b / (r * s) for b, s in zip(batched, singles)]}

    print(f"Inverting Gradients on breaching's untrained ConvNet-64, one 32x32 photo crop, "
          f"{args.iterations} iterations, labels given, eval mode (torch {torch.__version__}, {args.threads} threads)")
    header = (f"{'image':<14} {'attack':<16} {'per iter':>8} {'end-to-end':>10} {'PSNR':>6} {'flat':>6} {'above flat':>10}")
    print(header)
    print("-" * len(header))
    for row in rows:
        for name, a in row["attacks"].items():
            print(f"{row['image_seed']:>2} {row['photo']:<11} {name:<16} {a['per_iteration_ratio']:>7.2f}x "
                  f"{a['end_to_end_ratio']:>9.2f}x {a['psnr']:>6.2f} {row['flat_psnr']:>6.2f} {a['db_above_flat']:>+8.2f} dB")
    print("cost unit: one plain gradient (forward + backward wrt parameters) of the same model on the same image; "
          + ", ".join(f"image {r['image_seed']}: {r['gradient_ms']:.0f} ms" for r in rows))
    if restart_row:
        print(f"{restart_row['restarts']} batched restarts (vmap) cost {restart_row['batched_over_sequential']:.2f}x "
              f"{restart_row['restarts']} sequential single restarts")

    def summary(name, key):
        return statistics.median(row["attacks"][name][key] for row in rows)

    result = {
        "benchmark": "ig_vs_breaching",
        "unit": "one plain gradient computation (forward + backward of the loss wrt parameters), same model and image",
        "environment": {
            "gradcore": gradcore.__version__, "breaching": _version("breaching"), "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "threads": args.threads, "device": "cpu",
        },
        "protocol": {
            "model": "breaching ConvNet (width 64, 10 classes), untrained, torch.manual_seed(%d)" % MODEL_SEED,
            "mode": "eval (breaching's honest server sends public buffers)",
            "labels": "given to both (breaching case 1_single_image_small: provide_labels); gradcore's inference agrees",
            "pixels": "breaching optimises CIFAR-normalised pixels, gradcore [0,1] pixels of Normalise->ConvNet; "
                      "breaching's result is mapped back with x*std+mean and clamped to [0,1]",
            "flat": "per-channel mean colour of the private image, PSNR against it",
            "iterations": args.iterations, "restarts": 1, "attack_seed": ATTACK_SEED, "images": args.images,
            "per_iteration": f"(T({long}) - T({short})) / {long - short} over a unit measured right before, "
                             f"median of {args.repeats} alternating repeats",
            "end_to_end": "T(iterations) / iterations over the mean of the units right before and after",
            "quick": args.quick,
        },
        "breaching_attack_config": _plain(cfg.attack),
        "gradcore_config": gradcore_config,
        "results": rows,
        "summary": {name: {"mean_db_above_flat": statistics.mean(row["attacks"][name]["db_above_flat"] for row in rows),
                           "median_db_above_flat": summary(name, "db_above_flat"),
                           "median_per_iteration_ratio": summary(name, "per_iteration_ratio"),
                           "median_end_to_end_ratio": summary(name, "end_to_end_ratio")}
                    for name in rows[0]["attacks"]},
        "batched_restarts": restart_row,
    }
    write_json(args.out, result)
    return 0


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def _plain(config):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(config, resolve=True)


if __name__ == "__main__":
    sys.exit(main())
