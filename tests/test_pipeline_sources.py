"""Rerun digests from import closures (repro/pipeline/sources.py): what each job's closure holds,
on a small package built here and on the real one, and that an edit changes exactly the digests
of the jobs that import the edited file."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from repro.pipeline.sources import ENTRY_POINTS, closure, job_digests, references

ROOT = Path(__file__).resolve().parents[1]


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def package(tmp_path) -> Path:
    """repro/: a lazy import, a relative import, a data folder naming a module, strays."""
    return write(tmp_path, {
        "repro/__init__.py": '"""Package."""\n',
        "repro/entry.py": ("import json\n\ndef run():\n    from repro.pkg.mod import f\n"
                           "    return f\n"),
        "repro/pkg/__init__.py": "",
        "repro/pkg/mod.py": ('"""Reads specs; see repro.stray."""\nfrom pathlib import Path\n'
                             "from . import sibling\nSPECS = Path(__file__).with_name('specs')\n"
                             "def f():\n    return SPECS\n"),
        "repro/pkg/sibling.py": "X = 1\n",
        "repro/pkg/specs/a.yaml": "generator: repro.gen:rows  # imported by name\n",
        "repro/pkg/unused.py": "Y = 2\n",
        "repro/gen.py": "def rows():\n    return []\n",
        "repro/stray.py": "Z = 3\n",
    })


def names(root: Path, files: list[Path]) -> list[str]:
    return [str(f.relative_to(root)) for f in files]


def test_the_closure_follows_lazy_and_relative_imports_data_files_and_modules_they_name(package):
    got = names(package, closure(package, ("repro.entry",)))
    assert got == ["repro/__init__.py", "repro/entry.py", "repro/gen.py", "repro/pkg/__init__.py",
                   "repro/pkg/mod.py", "repro/pkg/sibling.py", "repro/pkg/specs/a.yaml"]
    # a module only a docstring mentions, and one nothing imports, are not part of it


def test_a_digest_is_stable_and_changes_with_a_file_of_the_closure_only(package):
    entries = {"entry": ("repro.entry",), "gen": ("repro.gen",)}
    before = job_digests(package, entries)
    assert job_digests(package, entries) == before
    (package / "repro/pkg/unused.py").write_text("Y = 3\n")
    assert job_digests(package, entries) == before
    (package / "repro/pkg/specs/a.yaml").write_text("generator: repro.gen:rows\n")
    after = job_digests(package, entries)
    assert after["entry"] != before["entry"] and after["gen"] == before["gen"]


def test_an_unknown_entry_point_is_named(package):
    with pytest.raises(ValueError, match=r"entry point repro\.nowhere: no such module"):
        closure(package, ("repro.nowhere",))


def closure_of(job: str) -> list[str]:
    return names(ROOT, closure(ROOT, ENTRY_POINTS[job]))


def test_training_imports_config_fields_which_the_old_hand_list_missed():
    files = closure_of("train")
    assert "repro/config_fields.py" in files  # training/config.py imports it
    assert "repro/benchmarks/specs/synth-rule.yaml" in files  # read by the registry
    assert "repro/tasks/synth_rule.py" in files  # the spec's generator, imported by name
    assert "repro/objectives/gspo.py" in files and "repro/engines/trl.py" in files  # lazy
    assert not any(f.startswith(("repro/reporting/", "repro/pipeline/", "repro/cli"))
                   for f in files)


def test_a_package_that_imports_its_folder_brings_every_module_of_it(package):
    """repro.objectives registers a dropped-in algorithm file by walking its own folder."""
    write(package, {"repro/plug/__init__.py": (
                        "import importlib, pkgutil\n"
                        "for m in pkgutil.iter_modules(__path__):\n"
                        "    importlib.import_module(f'{__name__}.{m.name}')\n"),
                    "repro/plug/algo.py": "A = 1\n",
                    "repro/uses_plug.py": "import repro.plug\n"})
    files = names(package, closure(package, ("repro.uses_plug",)))
    assert "repro/plug/algo.py" in files
    assert "repro/pkg/unused.py" not in closure_of_pkg(package)  # a plain package does not


def test_a_module_naming_a_subpackage_brings_every_module_of_it(package):
    """repro.training.trainers reads the engines' declarations from the files of the package it
    names ("repro.engines"); a docstring naming it, or a bare "repro", brings nothing."""
    write(package, {"repro/reads.py": 'PKG = "repro.pkg"\n',
                    "repro/mentions.py": '"""Not repro.pkg."""\nTOP = "repro"\n'})
    assert "repro/pkg/unused.py" in names(package, closure(package, ("repro.reads",)))
    mentioned = names(package, closure(package, ("repro.mentions",)))
    assert mentioned == ["repro/__init__.py", "repro/mentions.py"], mentioned


def closure_of_pkg(package: Path) -> list[str]:
    return names(package, closure(package, ("repro.entry",)))


def test_each_job_holds_the_data_files_it_reads():
    assert "repro/reporting/paper.mplstyle" in closure_of("figures")
    assert "repro/graders/lcb_harness.py" in closure_of("eval")  # copied into the sandbox
    assert "repro/objectives/gspo.py" not in closure_of("sft")  # an objective edit keeps the SFT


def command_imports(path: Path, function: str) -> set[str]:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return references([node], "repro")[0]


@pytest.mark.parametrize("job,module,function", [
    ("sft", "cli", "sft"), ("init_model", "cli", "init_model"), ("train", "cli", "train"),
    ("eval", "cli", "eval_"),
    ("theory", "cli", "theory"), ("aggregate", "reporting/commands", "aggregate_cmd"),
    ("tables", "reporting/commands", "tables_cmd"),
    ("figures", "reporting/commands", "figures_cmd"),
    ("paper_reference", "reporting/commands", "paper_reference_cmd"),
    ("expectations", "reporting/commands", "expectations_cmd")])
def test_entry_points_are_what_the_rules_commands_import(job, module, function):
    imported = command_imports(ROOT / "repro" / f"{module}.py", function)
    assert set(ENTRY_POINTS[job]) <= imported, (ENTRY_POINTS[job], imported)


def test_editing_config_fields_changes_exactly_the_digests_of_the_jobs_importing_it(tmp_path):
    shutil.copytree(ROOT / "repro", tmp_path / "repro",
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = job_digests(tmp_path)
    edited = tmp_path / "repro" / "config_fields.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    after = job_digests(tmp_path)
    changed = {job for job in before if before[job] != after[job]}
    importing = {job for job, modules in ENTRY_POINTS.items()
                 if edited in closure(tmp_path, modules)}
    assert changed == importing and "train" in changed and "sft" not in changed, changed
