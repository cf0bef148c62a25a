"""The package's import graph (issue 20): no import cycle among `repro` modules, and the
subpackages stacked in layers.

Edges: every `import` statement of a module, at any depth. A lazy import inside a function
counts: it closes a cycle as surely as a top-level one once both functions run, only hidden
from a reader (the issue's `training/loop.py` lazily calling `engines/trl.train_trl`, which
imported the loop back). `from P import a` points at module `P.a` when `a` is a submodule, else
at `P` (`repro.pipeline.sources.resolve`: the longest prefix that is a module). The packages
above a module, which Python runs first, are not edges of their own: every package
`__init__` would otherwise close a cycle with each submodule it re-exports.

Rules enforced:
1. the module graph has no cycle;
2. the subpackage graph (repro.X -> repro.Y when a module under repro/X/ imports one under
   repro/Y/, X != Y) has no cycle either: the subpackages stack in layers, and none imports a
   subpackage that imports it back, directly or through others. Top-level modules
   (repro.cli, repro.atomic, ...) are no subpackage; rule 1 covers them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from repro.pipeline.sources import PACKAGE, references, resolve
from repro.training.trainers import ENGINES, TRAINERS

ROOT = Path(__file__).resolve().parents[1]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(root: Path, path: Path) -> set[str]:
    """The `repro` modules that the import statements of `path` name (see the docstring)."""
    package = ".".join(path.parent.relative_to(root).parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names, _ = references([node], package)
        for name in names:
            if any(other.startswith(name + ".") for other in names):
                continue  # `from P import a`: P.a says which module it is
            files = resolve(root, name)
            if files:
                found.add(module_name(root, files[-1]))
    return found


def module_graph(root: Path) -> dict[str, set[str]]:
    graph = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = module_name(root, path)
        graph[name] = imported(root, path) - {name}
    return graph


def subpackage(module: str) -> str | None:
    """repro.X for a module under repro/X/ (or the package itself); None at the top level."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or module in SUBPACKAGES else None


SUBPACKAGES = {f"{PACKAGE}.{p.parent.name}" for p in (ROOT / PACKAGE).glob("*/__init__.py")}


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    layers: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = subpackage(module)
        if source is None:
            continue
        layers.setdefault(source, set())
        layers[source] |= {t for t in map(subpackage, targets) if t and t != source}
    return layers


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_among_repro_modules():
    graph = module_graph(ROOT)
    assert "repro.training.export" in graph["repro.engines.registry"]  # a lazy import is an edge
    assert "repro.tasks.synth_aime" in graph["repro.tasks.synth_rule"]  # from P import module
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_subpackages_stack_in_layers():
    layers = subpackage_graph(module_graph(ROOT))
    assert "repro.training" in layers["repro.engines"]  # engines run on training's parts
    assert "repro.engines" not in layers["repro.training"]
    cycle = find_cycle(layers)
    assert cycle is None, "subpackages import each other: " + " -> ".join(cycle)


def test_no_subpackage_imports_the_cli():
    """The CLI sits on top of every subpackage (issue 39: the twin's worker ran `repro train`
    through `repro.cli`, an upward import, lazy included); it now calls the engine registry."""
    upward = {m for m, targets in module_graph(ROOT).items()
              if subpackage(m) and f"{PACKAGE}.cli" in targets}
    assert not upward, f"modules under a subpackage import {PACKAGE}.cli: {sorted(upward)}"


def test_a_lazy_import_that_closes_a_cycle_is_found(tmp_path):
    pkg = tmp_path / PACKAGE / "low"
    pkg.mkdir(parents=True)
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from repro.low.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    assert find_cycle(module_graph(tmp_path)) == ["repro.low.a", "repro.low.b", "repro.low.a"]


def test_every_engine_the_config_accepts_has_a_trainer():
    """TrainConfig names the engines it accepts without importing them (it sits below): each
    import path of the one list names a function of a module under repro/engines/."""
    from repro.pipeline.sources import module_file

    assert tuple(TRAINERS) == ENGINES
    for engine, path in TRAINERS.items():
        module, _, func = path.partition(":")
        file = module_file(ROOT, module)
        assert file is not None and module.startswith(f"{PACKAGE}.engines."), (engine, path)
        defined = {n.name for n in ast.parse(file.read_bytes()).body
                   if isinstance(n, ast.FunctionDef)}
        assert func in defined, (engine, path)
