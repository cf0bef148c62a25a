"""No test skips because a module of this suite is missing: a deleted module must fail loudly.

Skips for the host (no bubblewrap, no writable cgroup, no ../shared) or for optional third-party
packages stay allowed; guards on `repro.*` do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
GUARDS = {"importorskip", "find_spec", "skip", "skipif"}


def _self_guards(path: Path) -> list[str]:
    """Calls of a skip/import guard whose arguments mention the package `repro`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in GUARDS:
            continue
        texts = [n.value for arg in [*node.args, *(k.value for k in node.keywords)]
                 for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if any(t == "repro" or t.startswith("repro.") or "not available yet" in t for t in texts):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_skip_guard_on_the_suite_itself():
    files = sorted(TESTS.glob("*.py"))
    assert len(files) > 10
    offenders = [hit for path in files for hit in _self_guards(path)]
    assert offenders == [], f"skip guards on the suite's own modules: {offenders}"


def test_the_check_sees_a_guard(tmp_path):
    """The scan is not vacuous: each spelling of a self-guard is found."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        'import importlib.util\nimport pytest\n'
        'tasks = pytest.importorskip("repro.tasks")\n'
        '@pytest.mark.skipif(importlib.util.find_spec("repro.graders") is None, reason="x")\n'
        'def test_a(): pass\n'
        'def test_b():\n    pytest.skip("repro.tasks not available yet")\n')
    assert sorted(_self_guards(sample)) == ["test_sample.py:3", "test_sample.py:4",
                                            "test_sample.py:4", "test_sample.py:7"]
