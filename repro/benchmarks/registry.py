"""The benchmark catalogue: one YAML per benchmark under `repro/benchmarks/specs/`.

Adding a benchmark is adding a YAML file. A synthetic spec names its real `twin` and takes the
twin's field mapping, so the stand-in rows go through exactly the real schema's mapping.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path

from repro.benchmarks.spec import BenchmarkSpec, BenchmarkSpecError, parse_spec, read_spec_yaml

SPEC_DIR = Path(__file__).with_name("specs")


def benchmark_names() -> list[str]:
    return sorted(_builtin())


def get_benchmark(name: str) -> BenchmarkSpec:
    specs = _builtin()
    if name not in specs:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(specs)}")
    return specs[name]


def load_spec(path: str | Path) -> BenchmarkSpec:
    """A spec from any YAML file (e.g. a user's own benchmark); twins resolve to built-ins."""
    path = Path(path)
    return _resolve_twin(parse_spec(read_spec_yaml(path), path), _builtin())


@functools.cache
def _builtin() -> dict[str, BenchmarkSpec]:
    parsed = {p.stem: parse_spec(read_spec_yaml(p), p) for p in sorted(SPEC_DIR.glob("*.yaml"))}
    return {name: _resolve_twin(spec, parsed) for name, spec in parsed.items()}


def _resolve_twin(spec: BenchmarkSpec, known: Mapping[str, BenchmarkSpec]) -> BenchmarkSpec:
    if spec.source != "synthetic":
        return spec
    real = sorted(name for name, other in known.items() if other.source != "synthetic")
    twin = known.get(spec.twin)
    if twin is None or twin.source == "synthetic":
        raise BenchmarkSpecError(
            f"{spec.path}: key 'twin': must name a real benchmark {real}, got {spec.twin!r}"
        )
    if twin.kind != spec.kind:
        raise BenchmarkSpecError(
            f"{spec.path}: key 'twin': {spec.twin!r} is a {twin.kind} benchmark, "
            f"but kind is {spec.kind!r}"
        )
    return dataclasses.replace(spec, fields=twin.fields)
