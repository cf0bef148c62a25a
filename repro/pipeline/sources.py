"""The package files each pipeline job runs, and a digest of their contents that its rule passes
as a param: an edit of any module a job imports reruns exactly the jobs that import it, and a
fresh clone (same contents, new mtimes) reruns nothing. Snakemake's own code trigger sees only
the shell string.

A job's files are the import closure of the modules its `repro COMMAND` dispatches to (cli.py
only parses options, so an edit there reruns nothing), found statically
(ast: parse time must not import torch just to hash files). The closure holds:
- every `repro` module an `import` names, at any depth (the package imports lazily inside
  functions), with each package `__init__` above it (Python runs those too);
- a data file or folder beside a module, named by a string in it (`with_name("specs")`,
  `paper.mplstyle`, the sandbox's `lcb_harness.py`);
- a module named in such a data file (a benchmark spec's `generator: repro.tasks.X:rows`,
  imported by name at runtime), or by a `repro.X:NAME` string in a module;
- every module of a subpackage that a string in a module names whole (`"repro.engines"`:
  repro.training.trainers reads the engines' declarations from their files, and the engine
  registry imports the one a run names);
- every module beside a package `__init__` that imports its folder with
  `pkgutil.iter_modules` (repro.objectives: an algorithm file registers itself).
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

PACKAGE = "repro"
# job -> the modules its rule's `repro COMMAND` dispatches to (tests check them against the CLI).
# SFT: its KEY=VALUE overrides reach the job as params, so training.config's parser is left out,
# and with it the objectives (an edit there reruns training, not the SFT start).
ENTRY_POINTS = {
    "sft": ("repro.training.sft",),
    "init_model": ("repro.models.from_config",),
    "train": ("repro.training.config", "repro.engines.registry"),  # registry exports too
    "eval": ("repro.evaluation.runner",),
    "aggregate": ("repro.reporting.aggregate",),
    "tables": ("repro.reporting.tables",),
    "figures": ("repro.reporting.figures",),
    "expectations": ("repro.reporting.expectations",),
    "paper_reference": ("repro.reporting.paper_numbers",),
    "theory": ("repro.theory.experiment",),
}
_MODULE_NAME = re.compile(rf"\b{PACKAGE}(?:\.\w+)+")
_IMPORT_PATH = re.compile(rf"({PACKAGE}(?:\.\w+)+):\w+")  # "repro.x.y:name", imported by name
_SKIP = {"__pycache__"}


def module_file(root: Path, name: str) -> Path | None:
    """The file of module `name` under `root` (the folder holding the package), if any."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def resolve(root: Path, name: str) -> list[Path]:
    """The files `import name` runs: the longest prefix of `name` that is a package module (the
    rest is an attribute, as in `from repro.x import func`) and every package above it."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return []
    for end in range(len(parts), 0, -1):
        if module_file(root, ".".join(parts[:end])) is not None:
            return [module_file(root, ".".join(parts[:i])) for i in range(1, end + 1)]
    return []


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def references(nodes: list[ast.AST], package: str) -> tuple[set[str], set[str]]:
    """(module names imported, other string constants) anywhere in `nodes`; relative imports
    are resolved against `package`, the dotted package the code lives in."""
    names: set[str] = set()
    strings: set[str] = set()
    for top in nodes:
        docs = _docstrings(top)
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    above = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(above + ([base] if base else []))
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docs):
                strings.add(node.value)
    return names, strings


def _imports_its_folder(tree: ast.Module) -> bool:
    """A package `__init__` that walks `pkgutil.iter_modules(__path__)` imports every module
    beside it by name (how repro.objectives registers a dropped-in algorithm file)."""
    return any((isinstance(node, ast.Attribute) and node.attr == "iter_modules")
               or (isinstance(node, ast.Name) and node.id == "iter_modules")
               for node in ast.walk(tree))


def _package_of(root: Path, path: Path) -> str:
    return ".".join(path.parent.relative_to(root).parts)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _data_beside(path: Path, strings: set[str]) -> list[Path]:
    """Files beside module `path` that a string in it names: a file, or every file of a folder
    that is not a package (packages count only when imported)."""
    found = []
    for name in sorted(strings & {entry.name for entry in path.parent.iterdir()}):
        entry = path.parent / name
        if entry.is_file():
            found.append(entry)
        elif entry.name not in _SKIP and not (entry / "__init__.py").exists():
            found += [f for f in sorted(entry.rglob("*"))
                      if f.is_file() and not _SKIP & set(f.relative_to(entry).parts)]
    return found


Scan = tuple[set[str], set[str], bool]  # a module's imports, strings, imports its folder


def _scan(root: Path, path: Path) -> Scan:
    """What `closure` reads from module `path`: one parse and one walk per file."""
    tree = _parse(path)
    names, strings = references([tree], _package_of(root, path))
    return names, strings, path.name == "__init__.py" and _imports_its_folder(tree)


def closure(root: Path, modules: tuple[str, ...],
            scans: dict[Path, Scan] | None = None) -> list[Path]:
    """Every package file that importing `modules` runs or reads, sorted. `scans` caches each
    module's scan across the jobs of one digest computation (the jobs share most modules)."""
    scans = {} if scans is None else scans
    files: set[Path] = set()
    todo = []
    for name in modules:
        if module_file(root, name) is None:
            raise ValueError(f"entry point {name}: no such module under {root}")
        todo += resolve(root, name)
    while todo:
        path = todo.pop()
        if path in files:
            continue
        files.add(path)
        if path.suffix != ".py":  # data: modules it names are imported by name at runtime
            text = path.read_text(errors="replace")
            todo += [p for name in _MODULE_NAME.findall(text) for p in resolve(root, name)]
            continue
        if path not in scans:
            scans[path] = _scan(root, path)
        names, strings, imports_folder = scans[path]
        by_path = (m.group(1) for text in strings if (m := _IMPORT_PATH.fullmatch(text)))
        todo += [p for name in [*names, *by_path] for p in resolve(root, name)]
        todo += [p for name in strings if _MODULE_NAME.fullmatch(name)
                 and (init := module_file(root, name)) and init.name == "__init__.py"
                 for p in sorted(init.parent.glob("*.py"))]
        if imports_folder:
            todo += sorted(path.parent.glob("*.py"))
        todo += _data_beside(path, strings)
    return sorted(files)


def digest(root: Path, files: list[Path]) -> str:
    """sha256 (16 hex digits) of each file's path below `root` and contents, in sorted order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def job_digests(root: str | Path,
                entry_points: dict[str, tuple[str, ...]] = ENTRY_POINTS) -> dict[str, str]:
    """job -> digest of its closure, for the package under `root` (the workflow's folder)."""
    root, scans = Path(root), {}
    return {job: digest(root, closure(root, modules, scans))
            for job, modules in entry_points.items()}
