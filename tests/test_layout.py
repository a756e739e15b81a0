"""The package's layering: no import cycle, no private name imported across modules, few lazy imports.

Read from the source (``ast``), imports inside functions included: a cycle hidden in a
function is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gradcore"

#: Imports made inside a function on purpose, and why.
LAZY: dict = {}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict) -> list[tuple[str, str | None, bool]]:
    """``(module imported, name taken from it or None, at module level?)`` for every sibling import."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                out.append((target, None if target != base else alias.name, id(node) in top))
        elif isinstance(node, ast.Import):
            out.extend((alias.name, None, id(node) in top) for alias in node.names)
    return [(target, taken, level) for target, taken, level in out if target in known and target != name]


def graph() -> tuple[dict, list, list]:
    known = modules()
    edges, lazy, private = {}, [], []
    for name, path in known.items():
        for target, taken, top_level in imports(name, path, known):
            if name == "gradcore" or target == "gradcore" or name.startswith(target + "."):
                continue  # the package gathering its modules, or a module reading its own package
            edges.setdefault(name, set()).add(target)
            if not top_level:
                lazy.append((name, target))
            if taken and taken.startswith("_") and not taken.startswith("__"):
                private.append((name, target, taken))
    return edges, lazy, private


def cycles(edges: dict) -> list[list[str]]:
    state, stack, found = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_no_import_cycle():
    assert cycles(graph()[0]) == []


def test_the_cycle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_private_name_is_imported_across_modules():
    assert graph()[2] == []


def test_imports_inside_functions_are_the_listed_ones():
    assert sorted(set(graph()[1])) == sorted(LAZY)


def test_the_graph_sees_the_layers():
    edges = graph()[0]
    assert "gradcore.gradients" in edges["gradcore.client"] and "gradcore.defenses" in edges["gradcore.client"]
    assert "gradcore.evaluation" in edges["gradcore.experiments.privacy"]
    assert "gradcore.experiments" not in edges["gradcore.evaluation"]


def test_the_readme_and_the_package_docstring_name_every_attack_family():
    """Each module of gradcore/attacks/ but the contract and the shared pieces is a family the newcomer is told about."""
    import re

    families = {path.stem for path in (PACKAGE / "attacks").glob("*.py")} - {"__init__", "base", "shared"}
    assert "`shared.py`" in (PACKAGE.parent / "README.md").read_text(), "README's layout table omits attacks/shared.py"
    readme = (PACKAGE.parent / "README.md").read_text()
    docstring = (PACKAGE / "__init__.py").read_text()
    listed_readme = set(re.findall(r"`([a-z_]+)`", readme[readme.index("one module per family"):][:200]))
    recipe = readme[readme.index("## Adding an attack"):][:300]
    assert families <= listed_readme, f"README's layout table omits {sorted(families - listed_readme)}"
    assert families <= set(re.findall(r"`([a-z_]+)`", recipe)), "README's attack recipe omits a family"
    listed_doc = docstring[docstring.index("one module per family"):][:200]
    assert all(family in listed_doc for family in families), "gradcore/__init__.py's docstring omits a family"


def test_the_science_never_imports_the_book_wing():
    """gradcore.book (the command, execution, checks, pages) sits on top: no other module may import it."""
    edges = graph()[0]
    wing = {name for name in modules() if name == "gradcore.book" or name.startswith("gradcore.book.")}
    assert "gradcore.book.cli" in wing and "gradcore.book.layout" in wing
    assert edges["gradcore.book.cli"] & wing  # the graph sees the wing's own imports
    upward = sorted((name, target) for name, targets in edges.items() if name not in wing for target in targets & wing)
    assert upward == []


def test_the_analyses_sit_low():
    """gradcore.analysis (exact numpy) builds on the argument checks and, for torch readers, on gradients:
    never on attacks, scenarios, experiments or the book."""
    edges = graph()[0]
    wing = {name for name in modules() if name.startswith("gradcore.analysis.")}
    assert {"gradcore.analysis.dense", "gradcore.analysis.walkback", "gradcore.analysis.exclusivity"} <= wing
    allowed = wing | {"gradcore.analysis", "gradcore.registry", "gradcore.validation", "gradcore.errors",
                      "gradcore.gradients"}
    reached = {target for name in wing for target in edges.get(name, ())}
    assert "gradcore.analysis.dense" in reached  # the graph sees the wing's own imports
    assert reached <= allowed, sorted(reached - allowed)
