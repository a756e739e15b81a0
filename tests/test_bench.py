"""The benchmark scripts in bench/ still name what gradcore has.

CI never runs the benchmarks (they time things), so a renamed or removed gradcore function
goes unnoticed there until someone runs one: ``bench/paper_time.py`` called a removed
``exclusivity.reduced_mlp`` until its first run on a GPU. This reads each script's syntax tree
and resolves every dotted name that starts at a gradcore module it imports.
"""

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _gradcore_names(tree: ast.Module) -> dict:
    """``{local name: module path}`` for every gradcore module a script imports, at any depth."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gradcore":
                    names[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else "gradcore")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gradcore":
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.Attribute) -> list[str] | None:
    parts = [node.attr]
    while isinstance(node.value, ast.Attribute):
        node = node.value
        parts.append(node.attr)
    if not isinstance(node.value, ast.Name):
        return None
    parts.append(node.value.id)
    return parts[::-1]


def _resolve(path: str):
    """The object a dotted gradcore path names (a module, or an attribute of one)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return target
    raise ImportError(path)


def missing_names(source: str) -> list[str]:
    """Dotted gradcore names in ``source`` that do not resolve."""
    tree = ast.parse(source)
    imported = _gradcore_names(tree)
    missing = []
    for local, path in imported.items():
        try:
            _resolve(path)
        except (ImportError, AttributeError):
            missing.append(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            parts = _dotted(node)
            if parts and parts[0] in imported:
                name = ".".join([imported[parts[0]], *parts[1:]])
                try:
                    _resolve(name)
                except (ImportError, AttributeError):
                    missing.append(name)
    return sorted(set(missing))


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_scripts_name_only_what_gradcore_has(script):
    assert missing_names(script.read_text()) == []


def test_a_removed_function_is_caught():
    source = ("from gradcore.analysis import exclusivity\n"
              "from gradcore import data\n"
              "mlp = lambda: exclusivity.reduced_mlp(1)\n"
              "x = data.load('digits').shape\n")
    assert missing_names(source) == ["gradcore.analysis.exclusivity.reduced_mlp"]
