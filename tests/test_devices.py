"""GPU readiness without a GPU: every tensor an attack, defense or metric creates follows its inputs.

No CUDA device is on the CI machine, so placement is checked by inspection: each call to a torch
factory (``torch.zeros``, ``torch.full``, ...) in the modules that run on the model's device must say
where its tensor lives (``device=``), derive it from another tensor (``*_like``), or be moved with
``.to(...)`` at once. A factory call without any of these makes a CPU tensor that breaks on a GPU.
"""

import ast
from pathlib import Path

import pytest
import torch

import gradcore
from gradcore import models

PACKAGE = Path(gradcore.__file__).parent
#: Modules whose tensors meet the model's (possibly CUDA) tensors.
ON_DEVICE = sorted([*PACKAGE.glob("attacks/*.py"), PACKAGE / "defenses.py", PACKAGE / "metrics.py",
                    PACKAGE / "gradients.py", PACKAGE / "client.py", PACKAGE / "training.py", PACKAGE / "generative.py"])
FACTORIES = {"zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "eye", "linspace", "randint",
             "rand", "randn", "normal", "randperm"}
#: Factory calls that make a CPU tensor on purpose, with the reason.
ALLOWED = {
    # Dummy images are drawn on a CPU generator (the same numbers on every device), then moved with
    # .to(device, dtype) by each caller (matching.py, inverting.py, regularised.py).
    ("attacks/base.py", "<lambda>"),
    # The shuffling order indexes the dataset, which stays on the CPU; each batch is moved to the model.
    ("training.py", "train"),
    # The same for the GAN's training batches (generative.py).
    ("generative.py", "train_gan"),
}


def _placement_problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        if any(keyword.arg == "device" for keyword in node.keywords):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr == "to":  # torch.x(...).to(device)
            continue
        function = parent
        while function is not None and not isinstance(function, (ast.FunctionDef, ast.Lambda)):
            function = parents.get(function)
        name = "<lambda>" if isinstance(function, ast.Lambda) else getattr(function, "name", "<module>")
        where = str(path.relative_to(PACKAGE))
        if (where, name) not in ALLOWED:
            problems.append(f"{where}:{node.lineno} torch.{node.func.attr}(...) in {name}() names no device")
    return problems


@pytest.mark.parametrize("path", ON_DEVICE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_tensors_created_on_the_model_side_name_their_device(path):
    assert _placement_problems(path) == []


def test_the_inspection_catches_a_cpu_only_tensor(tmp_path):
    bad = PACKAGE / "attacks" / "_placement_probe.py"
    try:
        bad.write_text("import torch\n\ndef guess(shape):\n    return torch.full(shape, 0.5)\n")
        assert _placement_problems(bad) == ["attacks/_placement_probe.py:4 torch.full(...) in guess() names no device"]
    finally:
        bad.unlink()


@pytest.mark.parametrize("name, options", [
    ("dlg", {"iterations": 2}), ("inverting_gradients", {"iterations": 2}), ("regularised_matching", {"iterations": 2}),
    ("walk_back", {}), ("closed_form", {}), ("minimal_mlp", {}), ("exclusivity", {})])
def test_attacks_follow_the_models_precision(name, options):
    # The same rule in the precision the model runs in (what a CPU can check): a float64 model gives a
    # float64 reconstruction, nothing cast to float32 on the way (a tensor made without reference to the
    # model's tensors would be float32, as it would be on the CPU next to a CUDA model).
    model = models.build("mlp", (1, 4, 4), 3, seed=0, widths=(32,)).double()
    images = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = torch.tensor([1])
    gradient = gradcore.batch_gradient(model, images, labels)
    result = gradcore.attack(name, model, gradient, shape=(1, 4, 4), labels=labels, progress=False, **options)
    assert result.reconstruction.dtype == torch.float64
    assert result.reconstruction.device == gradient[0].device
