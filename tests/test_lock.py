"""constraints/tiny.txt, the lock of the README's first command (issue 22): it pins every package
that install pulls in, each inside pyproject's range, so the tiny default installs the versions
that produced the committed aggregate."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "constraints" / "tiny.txt"


def lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{LOCK}: {line!r} is not an exact pin"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def first_command_requirements() -> list[Requirement]:
    """pyproject's dependencies plus the `test` extra, its own extras expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, reqs, todo = project["optional-dependencies"], [], ["test"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    while todo:
        for text in extras[todo.pop()]:
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                todo += sorted(req.extras)
            else:
                reqs.append(req)
    return reqs


def test_every_direct_requirement_is_pinned_inside_its_range():
    pins = lock()
    for req in first_command_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{LOCK}: {req.name} (pyproject: {req}) is not pinned"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK}: {name}=={pins[name]} is outside pyproject's {req}")


def test_the_lock_is_closed_under_the_installed_packages_requirements():
    """Where this environment holds a locked version, what that version requires is pinned too
    (so pip has nothing left to choose); packages installed at other versions (CI's newest
    releases) are not judged here."""
    pins, checked = lock(), 0
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version).public != str(version):
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{LOCK}: {name}=={version} requires {req}, which is not pinned"
            assert req.specifier.contains(pins[dep], prereleases=True), (
                f"{LOCK}: {dep}=={pins[dep]} does not satisfy {name}'s {req}")
    assert checked > 0 or not pins


def test_the_readmes_first_command_installs_under_the_lock():
    first = next(line for line in (ROOT / "README.md").read_text().splitlines()
                 if "snakemake --cores all" in line and "pip install" in line)
    assert "-c constraints/tiny.txt" in first, first
