"""Benchmarks declared as data, their loaders, and the Problem record they produce."""

from repro.benchmarks.lcb import ShardIntegrityError
from repro.benchmarks.loaders import DatasetUnavailable, load_problems
from repro.benchmarks.mapping import build_messages, row_to_problem
from repro.benchmarks.problem import CodeTests, Problem, revision_hash
from repro.benchmarks.registry import benchmark_names, get_benchmark, load_spec
from repro.benchmarks.spec import BenchmarkSpec, BenchmarkSpecError

__all__ = [
    "BenchmarkSpec",
    "BenchmarkSpecError",
    "CodeTests",
    "DatasetUnavailable",
    "Problem",
    "ShardIntegrityError",
    "benchmark_names",
    "build_messages",
    "get_benchmark",
    "load_problems",
    "load_spec",
    "revision_hash",
    "row_to_problem",
]
