"""Tests read the committed results from git (tests/committed.py), never from the working tree
(issue 46): the README's first command rewrites `results/aggregate/`, and `.ci/run` replaces it
with another CPU's run before the test command, so a test that read the working tree would test
that run as if it were the committed one.

The scan below is how a test that builds a committed results path itself is caught: in the
test sources, (a) a path joined onto the repository root whose first part is "results", and
(b) a string that starts with "results/NAME" for a NAME other than the pipeline's own run
folders, unless it is an argument of `committed(...)`/`copy_committed(...)`, the operand of a
comparison (a test asserting what a path is called reads nothing) or a config's `results` folder
(where a run writes).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import threading
from pathlib import Path

import committed as helper
import pytest

from repro.results.committed import NotCommitted, export

TESTS = Path(__file__).resolve().parent
# helpers that read git, not the working tree (first_commit: test_study4_order, `git log`)
HELPERS = {"committed", "copy_committed", "first_commit"}
# folders under results/ that a run writes (.gitignore): reading them reads a run, not a commit
RUN_FOLDERS = ("runs", "scratch", "models", "eval", "theory", "tables", "figures", "ci-")
COMMITTED_LITERAL = re.compile(rf"^results/(?!(?:{'|'.join(RUN_FOLDERS)}))[\w.{{-]")
ROOT_NAMES = {"ROOT", "REPO", "REPO_ROOT"}


def _root_names(tree: ast.Module) -> set[str]:
    """ROOT and the module-level names assigned from an expression of `__file__`."""
    names = set(ROOT_NAMES)
    for node in tree.body:
        if isinstance(node, ast.Assign) and "__file__" in ast.unparse(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _is_root(node: ast.expr, roots: set[str]) -> bool:
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        node = node.left
    if isinstance(node, ast.Name):
        return node.id in roots
    return "__file__" in ast.unparse(node)


def _text(node: ast.expr) -> str | None:
    """A string constant's text, or an f-string's up to its first placeholder ("{")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" for v in node.values)
    return None


def _exempt(tree: ast.Module) -> set[int]:
    """ids of the string nodes a scan lets pass: docstrings, comparison operands, helper
    arguments, a config's `results` folder."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr):
                out.add(id(doc.value))
        elif isinstance(node, ast.Dict):  # config {"results": FOLDER}: where a run writes
            out |= {id(v) for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == "results"}
        elif isinstance(node, ast.Compare):
            out |= {id(n) for part in (node.left, *node.comparators) for n in ast.walk(part)}
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in HELPERS:
                out |= {id(n) for arg in node.args for n in ast.walk(arg)}
    return out


def committed_paths(source: str) -> list[str]:
    """'LINE: code' for each place `source` builds a committed results path itself."""
    tree = ast.parse(source)
    roots, exempt, found = _root_names(tree), _exempt(tree), []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = _text(node.right)
            hit = (right is not None and right.split("/")[0] == "results"
                   and _is_root(node.left, roots))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            hit = _is_root(node.func.value, roots) and any(
                (_text(a) or "").split("/")[0] == "results" for a in node.args)
        elif id(node) not in exempt and (text := _text(node)) is not None:
            hit = bool(COMMITTED_LITERAL.match(text))
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def test_no_test_builds_a_committed_results_path_itself():
    """Every read of a committed results path goes through tests/committed.py."""
    found = {path.name: hits for path in sorted(TESTS.glob("*.py"))
             if path.name not in ("committed.py", Path(__file__).name)
             and (hits := committed_paths(path.read_text()))}
    assert found == {}, ("read committed results through tests/committed.py (committed(...), "
                         f"copy_committed(...)), not the working tree: {found}")


@pytest.mark.parametrize("source", [
    'ROOT = Path(__file__).resolve().parents[1]\nAGG = ROOT / "results" / "aggregate"',
    'AGG = Path(__file__).resolve().parents[1] / "results" / "aggregate"',
    'HERE = Path(__file__).parents[1]\nx = HERE / "results/tiny-study/aggregate"',
    'def f(study):\n    return load_aggregate(ROOT / "results" / study / "aggregate")',
    'AGGREGATES = ("results/aggregate", "results/mechanism-study/aggregate")',
    'def f(s):\n    copy_workflow(tmp, extra=(f"results/{s}/aggregate",))',
    'x = ROOT.joinpath("results", "paper")',
    'x = ROOT.glob("results/rerun-*/aggregate")',
])
def test_the_scan_finds_each_way_of_building_the_path(source):
    assert committed_paths(source), source


@pytest.mark.parametrize("source", [
    'AGG = committed("results/aggregate")',
    'def f(s):\n    copy_committed(wd, f"results/{s}/aggregate", "results/paper")',
    'x = wd / "results" / "aggregate"',  # a fresh run's folder in a temp copy
    'assert layout.agg_dir == "results/tiny-study/aggregate"',
    'TARGET = "results/runs/algo=gspo/train_log.parquet"',
    'layout = Layout.of({"results": "results/tiny-study/"})',
    'def f():\n    """Reads results/aggregate through the helper."""',
])
def test_the_scan_lets_the_helper_and_fresh_runs_pass(source):
    assert committed_paths(source) == [], source


# ---- the helper reads HEAD, not the working tree ----------------------------------------------

def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "results" / "aggregate").mkdir(parents=True)
    (repo / "results" / "aggregate" / "runs.parquet").write_text("committed")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    (repo / "results" / "aggregate" / "runs.parquet").write_text("this machine's run")
    return repo


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_export_gives_heads_content_whatever_the_working_tree_holds(tmp_path):
    repo = _repo(tmp_path)
    folder = export(repo, "results/aggregate", tmp_path / "a")
    assert folder == tmp_path / "a" / "results" / "aggregate"
    assert (folder / "runs.parquet").read_text() == "committed"
    blob = export(repo, "results/aggregate/runs.parquet", tmp_path / "b")
    assert blob.read_text() == "committed"
    with pytest.raises(NotCommitted, match=r"^results/other is not committed"):
        export(repo, "results/other", tmp_path / "c")
    shutil.rmtree(repo / ".git")
    with pytest.raises(NotCommitted, match="is not a git checkout"):
        export(repo, "results/aggregate", tmp_path / "d")


def test_the_cache_is_shared_read_only_and_safe_under_concurrent_workers(tmp_path, monkeypatch):
    """Eight threads ask at once (as xdist workers would): one copy, complete, no leftovers."""
    monkeypatch.setattr(helper, "CACHE", tmp_path / "cache")
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(helper.committed("results/paper")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and len(got) == 8
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [got[0].parents[1].name]
    files = [p for p in got[0].rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o222 == 0 for p in files)
    assert (got[0] / "reference.parquet").read_bytes() == subprocess.run(
        ["git", "-C", str(helper.ROOT), "show", "HEAD:results/paper/reference.parquet"],
        capture_output=True, check=True).stdout


def test_a_path_not_in_head_is_an_error_not_a_skip():
    with pytest.raises(NotCommitted, match="results/no-such-study is not committed"):
        helper.committed("results/no-such-study")


def test_ci_runs_the_test_command_on_another_cpus_aggregate():
    """.ci/run replaces results/aggregate with the Xeon's committed run before the README's test
    command, as the README's first command would on that CPU, and restores it after."""
    lines = [ln.strip() for ln in (helper.ROOT / ".ci" / "run").read_text().splitlines()]
    test = lines.index("python -m pytest")
    swap = lines.index("cp -r results/rerun-intel-xeon/aggregate results/aggregate")
    assert lines.index("rm -rf results/aggregate") < swap < test
    assert lines.index("git checkout -- results/aggregate  # the committed aggregate back for "
                       "the stages below") == test + 1
