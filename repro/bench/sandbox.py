"""`repro bench sandbox`: what the sandbox costs per generation, against the same harness bare.

Every case grades `generations` completions through `CodeGrader.grade_many` with `workers`
threads, each generation running `tests_per_generation` tests inside one harness process, as an
evaluation does. Two program kinds: "trivial" (read a number, print it) and "typical" (a small
O(n log n) computation per test, the kind of work an accepted LCB solution does). Each kind runs
in bubblewrap (`mode="bwrap"`) and unsandboxed (`mode="unsafe"`: the same harness, rlimits and
cgroups, no namespaces), so the ratio isolates the isolation.

Fairness: cases are interleaved round-robin with a rotating start, warm-up rounds are dropped,
the median round is reported. Acceptance (from the issue): sandboxed costs at most 2x
unsandboxed per generation, for both kinds, with every generation graded "pass". The bench
prints PASS/FAIL; tests check the structure only.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from repro.benchmarks.problem import CodeTests, Problem
from repro.graders.base import PASS
from repro.graders.code import CodeGrader
from repro.sandbox import Sandbox, SandboxConfig

MAX_RATIO = 2.0  # acceptance: sandboxed / unsandboxed seconds per generation
MODES = ("bwrap", "unsafe")
KINDS = ("trivial", "typical")
PROGRAMS = {
    "trivial": "print(int(input()) + 1)",
    "typical": ("seed, n = map(int, input().split())\n"
                "a = sorted((i * 1103515245 + seed) % 2147483648 for i in range(n))\n"
                "print(sum(a[::7]) % 1000000007)"),
}


@dataclass
class SandboxBenchConfig:
    """Sizes and repetitions of `repro bench sandbox`."""

    workers: int = field(default=2, metadata={"help": "Generations graded in parallel."})
    generations: int = field(default=32, metadata={"help": "Generations per case and round."})
    tests_per_generation: int = field(default=20, metadata={
        "help": "Tests per generation, all run in the generation's one sandbox."})
    rounds: int = field(default=3, metadata={"help": "Timed rounds per case; median reported."})
    warmup: int = field(default=1, metadata={"help": "Untimed rounds before the timed ones."})
    typical_n: int = field(default=20000, metadata={
        "help": "Elements sorted per test by the 'typical' program."})
    timeout_per_test: int = field(default=6, metadata={"help": "LCB's per-test limit, seconds."})

    def __post_init__(self) -> None:
        for name in ("workers", "generations", "tests_per_generation", "rounds", "typical_n",
                     "timeout_per_test"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxBenchConfig.{name} must be an integer >= 1, "
                                 f"got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"SandboxBenchConfig.warmup must be an integer >= 0, "
                             f"got {self.warmup!r}")


def _problem(kind: str, cfg: SandboxBenchConfig) -> Problem:
    """Tests whose expected outputs are computed here, independently of the sandbox."""
    inputs, outputs = [], []
    for seed in range(cfg.tests_per_generation):
        if kind == "trivial":
            inputs.append(f"{seed}\n")
            outputs.append(f"{seed + 1}\n")
        else:
            values = sorted((i * 1103515245 + seed) % 2147483648 for i in range(cfg.typical_n))
            inputs.append(f"{seed} {cfg.typical_n}\n")
            outputs.append(f"{sum(values[::7]) % 1000000007}\n")
    return Problem("bench-sandbox", kind, "bench", tests=CodeTests(tuple(inputs), tuple(outputs)))


def run_sandbox_bench(cfg: SandboxBenchConfig, show: bool = True) -> dict[str, Any]:
    """Measure seconds per generation in each (kind, mode) case; report the sandbox's ratio."""
    graders = {mode: CodeGrader(Sandbox(SandboxConfig(mode=mode)), cfg.timeout_per_test,
                                cfg.workers) for mode in MODES}
    items = {kind: [(_problem(kind, cfg), f"```python\n{PROGRAMS[kind]}\n```")] * cfg.generations
             for kind in KINDS}
    cases = [(kind, mode) for kind in KINDS for mode in MODES]
    times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    failures: dict[tuple[str, str], list[str]] = {case: [] for case in cases}
    for rnd in range(cfg.warmup + cfg.rounds):
        k = rnd % len(cases)
        for kind, mode in cases[k:] + cases[:k]:
            start = time.perf_counter()
            grades = graders[mode].grade_many(items[kind])
            elapsed = time.perf_counter() - start
            failures[kind, mode] += [f"{g.verdict}: {g.reason}" for g in grades
                                     if g.verdict != PASS]
            if rnd >= cfg.warmup:
                times[kind, mode].append(elapsed / cfg.generations)
    result_cases = {}
    for kind, mode in cases:
        per_gen = statistics.median(times[kind, mode])
        result_cases[f"{kind}/{mode}"] = {
            "kind": kind, "mode": mode, "s_per_generation": per_gen,
            "generations_per_s": 1.0 / per_gen,
            "tests_per_s": cfg.tests_per_generation / per_gen,
            "rounds_s_per_generation": times[kind, mode],
            "failures": failures[kind, mode][:5], "all_passed": not failures[kind, mode],
        }
    ratios = {kind: result_cases[f"{kind}/bwrap"]["s_per_generation"]
              / result_cases[f"{kind}/unsafe"]["s_per_generation"] for kind in KINDS}
    all_passed = all(c["all_passed"] for c in result_cases.values())
    result = {
        "config": asdict(cfg), "sandbox": graders["bwrap"].sandbox.info(),
        "cases": result_cases, "ratios": ratios, "max_ratio": MAX_RATIO,
        "all_passed": all_passed,
        "passed": verdict(ratios, all_passed),
    }
    if show:
        print_sandbox_report(result)
    return result


def verdict(ratios: dict[str, float], all_passed: bool) -> bool:
    """The acceptance: every generation graded pass and every ratio within MAX_RATIO."""
    return all_passed and all(r <= MAX_RATIO for r in ratios.values())


def print_sandbox_report(result: dict[str, Any]) -> None:
    """Rich tables: each case, then the sandboxed / unsandboxed ratio with the verdict."""
    cfg = result["config"]
    console = Console()
    table = Table(title=f"repro bench sandbox: {cfg['workers']} workers, "
                        f"{cfg['tests_per_generation']} tests per generation")
    for column in ("program", "mode", "ms / generation", "generations / s", "tests / s",
                   "all pass"):
        table.add_column(column, justify="left" if column in ("program", "mode") else "right")
    for case in result["cases"].values():
        table.add_row(case["kind"], case["mode"], f"{1000 * case['s_per_generation']:.1f}",
                      f"{case['generations_per_s']:.1f}", f"{case['tests_per_s']:.0f}",
                      "yes" if case["all_passed"] else "[red]NO[/red]")
    console.print(table)
    ratios = Table(title="sandboxed / unsandboxed, seconds per generation")
    ratios.add_column("program")
    ratios.add_column("ratio", justify="right")
    ratios.add_column(f"<= {result['max_ratio']:.1f}x", justify="center")
    for kind, ratio in result["ratios"].items():
        ok = ratio <= result["max_ratio"]
        ratios.add_row(kind, f"{ratio:.2f}x", "[green]yes[/green]" if ok else "[red]no[/red]")
    console.print(ratios)
    for case in result["cases"].values():
        for failure in case["failures"]:
            console.print(f"[red]{case['kind']}/{case['mode']} not graded pass:[/red] {failure}")
    verdict = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(f"{verdict}: sandboxed costs at most {result['max_ratio']:.1f}x unsandboxed per "
                  f"generation, every generation graded pass (sandbox: {result['sandbox']})")
