"""How long each chapter's paper profile runs: measured cost per iteration x the paper's budget.

No GPU has run the paper profiles yet. This script gives the next best thing: it builds
each chapter's heaviest workloads at the paper's shapes (models, image sizes, batch sizes
from ``gradcore.papers``), times a few iterations of each on this machine, and multiplies
the cost of one iteration by the number of iterations the paper profile asks for. Run it
on the GPU you intend to use (``--device cuda``) and the estimate is for that GPU.

What is counted: the attack iterations (``gradcore.attack`` on the chapter's scenario) and
the client updates of federated training (one shared, defended gradient each). What is
not: closed-form analyses, model training, metrics and plotting, which cost seconds to
minutes at the paper's settings; so each total is a lower bound, close where the attacks
dominate. Per-iteration costs are differences of two runs (``--short`` and ``--long``
iterations), so the set-up of an attack (the shared gradient, the dummy) cancels.
Unrolled local training (Inverting Gradients, Sec. 5) is timed at the paper's local steps
where they are at most 5 and scaled linearly from 5 steps beyond that.

    .venv/bin/python bench/paper_time.py                    # every chapter, writes bench/results/paper_time_cpu.json
    .venv/bin/python bench/paper_time.py --chapter censor   # one chapter
    .venv/bin/python bench/paper_time.py --device cuda      # on a GPU: bench/results/paper_time_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from _results import write_json

import gradcore
from gradcore import client, data, experiments, papers


@dataclass
class Attacks:
    """``runs`` attacks of ``iterations`` each, on the scenario ``build()`` returns."""

    label: str
    build: Callable[[], experiments.Scenario]
    attack: str
    config: dict
    runs: int
    iterations: int
    scale: float = 1.0  # cost multiplier for what the timed run leaves out (unrolled local steps beyond 5)
    options: dict = field(default_factory=dict)  # defense or local training of the timed run

    def count(self) -> int:
        return self.runs * self.iterations

    def per_unit(self, short: int, long: int, synchronise: Callable) -> float:
        case = self.build()
        times = {}
        for iterations in (short, long, short, long):
            start = time.perf_counter()
            case.attack(self.attack, **{**self.config, "iterations": iterations}, **self.options, progress=False)
            synchronise()
            times.setdefault(iterations, []).append(time.perf_counter() - start)
        cost = (min(times[long]) - min(times[short])) / (long - short)
        return max(cost, 0.0) * self.scale


@dataclass
class Updates:
    """``count`` client updates (one defended gradient of a batch each), as federated training shares them."""

    label: str
    build: Callable[[], experiments.Scenario]
    defense: str | None
    options: dict
    updates: int

    def count(self) -> int:
        return self.updates

    def per_unit(self, short: int, long: int, synchronise: Callable) -> float:
        case = self.build()
        times = []
        for repeat in range(2):
            start = time.perf_counter()
            client.share(case.model, case.inputs, case.labels, case.loss, self.defense, repeat, **self.options)
            synchronise()
            times.append(time.perf_counter() - start)
            if times[0] > 10.0:  # Soteria on ResNet-18 on a CPU: minutes per update, warm-up negligible
                break
        return min(times)


def inverting_gradients(device: str) -> list:
    s = papers.IG.settings("paper")
    photos = data.load("photos", size=s.image_size)
    resnet = lambda batch, **options: (lambda: experiments.scenario(  # noqa: E731
        photos, "resnet", batch, device=device, evaluation_mode=True, **options))
    cosine = dict(s.cosine, tv_weight=s.architecture_tv_weight)
    networks = {"LeNet": lambda: experiments.scenario(photos, "lenet", 1, device=device),
                "trained ResNet": lambda: experiments.scenario(photos, s.trained_model, 1, device=device,
                                                               evaluation_mode=True)}
    work = []
    for name, build in networks.items():
        work.append(Attacks(f"Sec. 4 L-BFGS, {name}", build, "dlg", s.euclidean, s.attack_images, s.euclidean_steps))
        work.append(Attacks(f"Sec. 4 cosine, {name}", build, "inverting_gradients", s.cosine, s.attack_images,
                            s.cosine_iterations))
    for label, (steps, lr) in s.local_settings.items():
        timed = min(steps, 5)
        work.append(Attacks(f"Sec. 5 local training, {label}", resnet(1, width=s.table2_width), "inverting_gradients",
                            cosine, 1, s.local_iterations, steps / timed, {"local": {"lr": lr, "epochs": timed}}))
    for epochs, images, batch in s.table2_settings:
        work.append(Attacks(f"Table 2, {epochs} epochs, {images} images, batch {batch}", resnet(images, width=s.table2_width),
                            "inverting_gradients", cosine, 1, s.table2_iterations,
                            options={"local": {"lr": s.table2_lr, "epochs": epochs, "batch_size": batch}}))
    shapes = dict.fromkeys([(18, width) for width in s.widths] + [(depth, s.depth_width) for depth in s.depths])
    for depth, width in shapes:
        work.append(Attacks(f"Sec. 6 ResNet-{depth}, width {width}", resnet(1, depth=depth, width=width),
                            "inverting_gradients", cosine, s.architecture_images, s.architecture_iterations))
    for mode in s.padding_modes:
        work.append(Attacks(f"padding {mode}", resnet(1, width=s.padding_width, padding_mode=mode),
                            "inverting_gradients", cosine, 1, s.padding_iterations))
    work.append(Attacks(f"batch of {s.large_batch}", resnet(s.large_batch, width=s.large_batch_width),
                        "inverting_gradients", cosine, 1, s.large_batch_iterations))
    return work


def censor(device: str) -> list:
    s = papers.CENSOR.settings("paper")
    photos = data.load("photos", size=s.image_size)
    build = lambda batch: (lambda: experiments.scenario(photos, s.attack_model, batch, device=device))  # noqa: E731
    cases = {1: s.attack_images, 4: 1}  # Table I (B = 1) and Table II (B = 4, one batch)
    defenses = len(s.defenses)
    work = []
    for batch, count in cases.items():
        work += [Attacks(f"Table I/II DLG and iDLG, B={batch}", build(batch), "dlg", s.lbfgs, 2 * defenses * count, s.lbfgs_steps),
                 Attacks(f"Table I/II cosine + TV, B={batch}", build(batch), "inverting_gradients", s.cosine,
                         defenses * count, s.cosine_iterations),
                 # EOT imitates CENSOR on every draw (its costliest case), against 3 defenses
                 Attacks(f"Table III EOT ({s.eot_samples} draws), B={batch}", build(batch), "censor_eot",
                         {"samples": s.eot_samples}, 3 * count, s.eot_iterations)]
    work.append(Attacks("Fig. 9/11 trials sweep (cosine + TV)", build(1), "inverting_gradients", s.cosine,
                        2 * len(s.trials_sweep), s.sweep_iterations))
    fed = s.federated
    cifar = (3, 32, 32)
    updates = lambda: experiments.scenario(_random_images(cifar, fed["batch_size"] * 2), fed["model"],  # noqa: E731
                                           fed["batch_size"], device=device, evaluation_mode=False)
    per_run = fed["rounds"] * fed["per_round"]
    defended = fed["defended_rounds"] * fed["per_round"]
    for label in s.federated_defenses:
        if label == "censor T=20":  # deployed in the first rounds only: counted below
            continue
        spec = dict(s.defenses[label])
        name = spec.pop("defense")
        work.append(Updates(f"Fig. 7 federated, {label} (every round)", updates, name, spec, per_run))
    # CENSOR in the first rounds and the withholding control: undefended rounds after those;
    # CENSOR in every round: a second run of the censor row above.
    censor_spec = dict(s.defenses["censor T=20"])
    censor_spec.pop("defense")
    work.append(Updates("Fig. 7 federated, CENSOR first rounds + withhold (undefended rounds)", updates, None, {},
                        2 * (per_run - defended)))
    work.append(Updates("Fig. 7 federated, CENSOR every round + first rounds (defended rounds)", updates, "censor",
                        censor_spec, per_run + defended))
    clients = sum(s.clients_per_round) * fed["rounds"]
    work.append(Updates("Table VI clients per round, undefended", updates, None, {}, 2 * clients - sum(s.clients_per_round) * fed["defended_rounds"]))
    work.append(Updates("Table VI clients per round, CENSOR rounds", updates, "censor", censor_spec,
                        sum(s.clients_per_round) * fed["defended_rounds"]))
    return work


def _random_images(shape, count: int) -> data.Dataset:
    """CIFAR-shaped stand-in pixels: only their shape matters to a timing."""
    generator = torch.Generator().manual_seed(0)
    images = torch.rand((count, *shape), generator=generator)
    labels = torch.arange(count) % 10
    return data.Dataset(images, labels, [str(k) for k in range(10)], "random CIFAR-shaped")


def dlg(device: str) -> list:
    s = papers.DLG.settings("paper")
    mnist, cifar100 = data.load("mnist"), data.load("cifar100_samples")
    lenet = lambda dataset, batch=1, classes=None: (lambda: experiments.scenario(  # noqa: E731
        dataset, "lenet", batch, device=device, num_classes=classes))
    return [Attacks("iDLG Table 1 label trials, MNIST", lenet(mnist, 1, s.mnist_classes), "dlg", s.label_lbfgs,
                    s.dlg_label_trials["MNIST"], s.dlg_label_iterations["MNIST"]),
            Attacks("iDLG Table 1 label trials, CIFAR-100", lenet(cifar100, 1, s.cifar100_classes), "dlg", s.label_lbfgs,
                    s.dlg_label_trials["CIFAR-100"], s.dlg_label_iterations["CIFAR-100"]),
            Attacks("Fig. 3 LeNet, CIFAR-100 images", lenet(cifar100), "dlg", s.lbfgs, s.lenet_images, s.photo_iterations),
            Attacks("Fig. 3 LeNet, MNIST digits", lenet(mnist), "dlg", s.lbfgs, s.lenet_images, s.photo_iterations),
            Attacks(f"batch of {s.lenet_batch}", lenet(data.load("photos", size=s.convergence_size), s.lenet_batch), "dlg",
                    s.lbfgs, 1, s.batch_iterations)]


def what_protects(device: str) -> list:
    from gradcore.experiments import protection

    s = papers.WHAT_PROTECTS.settings("paper")
    digits, photos = data.load(s.digit_data), data.load(s.photo_data, size=s.photo_size)
    build_mlp, build_cnn = protection.mlp_builder(digits, s.mlp_widths), protection.hybrid_cnn_builder(photos, s.hybrid)
    mlp, cnn = (lambda: build_mlp(0)), (lambda: build_cnn(0))  # noqa: E731
    scenarios = {"digits MLP, 1 image": (lambda: experiments.scenario(digits, mlp(), 1, device=device), s.images),
                 "digits MLP, batch": (lambda: experiments.scenario(digits, mlp(), s.batch, device=device), 1),
                 "photos LeNet, 1 image": (lambda: experiments.scenario(photos, "lenet", 1, device=device), s.images),
                 "photos CNN, batch": (lambda: experiments.scenario(photos, cnn(), s.batch, device=device), 1)}
    defenses = len(s.defenses) + 1  # and exclusivity reduction
    attacks = [("DLG and iDLG", "dlg", s.lbfgs, s.lbfgs_steps, s.optimisation_scenarios, 2 * defenses),
               ("cosine + TV", "inverting_gradients", s.cosine, s.cosine_iterations, s.optimisation_scenarios, defenses),
               ("regularised", "regularised_matching", s.regularised, s.regularised_iterations, s.regularised_scenarios,
                defenses),
               ("EOT", "censor_eot", {"samples": s.eot_samples}, s.eot_iterations, s.eot_scenarios, 2)]
    return [Attacks(f"matrix {label}, {name}", scenarios[name][0], attack, config, runs * scenarios[name][1], iterations)
            for label, attack, config, iterations, names, runs in attacks for name in names]


CHAPTERS = {"inverting-gradients": inverting_gradients, "censor": censor, "dlg": dlg, "what-protects": what_protects}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapter", action="append", choices=sorted(CHAPTERS), help="default: every chapter listed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--short", type=int, default=1, help="iterations of the shorter timed run")
    parser.add_argument("--long", type=int, default=3, help="iterations of the longer timed run")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.long <= args.short:
        parser.error("--long must exceed --short")
    gradcore.setup(0, threads=args.threads)
    synchronise = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    result = {"device": args.device, "torch": torch.__version__, "python": platform.python_version(),
              "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "short": args.short, "long": args.long,
              "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None, "chapters": {}}
    for chapter in args.chapter or list(CHAPTERS):
        rows, total = [], 0.0
        print(f"== {chapter}", flush=True)
        for work in CHAPTERS[chapter](args.device):
            seconds = work.per_unit(args.short, args.long, synchronise)
            hours = seconds * work.count() / 3600
            total += hours
            rows.append({"workload": work.label, "count": work.count(), "seconds_each": seconds, "hours": hours})
            print(f"  {work.label:<70} {work.count():>9,} x {seconds:9.4f} s = {hours:8.2f} h", flush=True)
        print(f"  {'total (lower bound)':<70} {total:8.2f} h", flush=True)
        result["chapters"][chapter] = {"rows": rows, "hours": total}
    output = args.output or Path(__file__).parent / "results" / f"paper_time_{args.device.split(':')[0]}.json"
    if output.exists():  # keep the other chapters of an earlier run on the same device
        earlier = json.loads(output.read_text())
        if earlier.get("device") == result["device"]:
            result["chapters"] = {**earlier.get("chapters", {}), **result["chapters"]}
    write_json(output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
