"""The lm-eval task YAMLs, generated from the benchmark specs so they cannot drift from them.

`python -m repro.lmeval.generate` rewrites `<benchmark>_repro.yaml` beside this file for every
benchmark whose spec says `lm_eval: true` (TASK_BENCHMARKS; k as `repeats`, the spec's sampling
as `generation_kwargs`, `unsafe_code` for code benchmarks); a test fails when a committed YAML
differs from what this writes. The shared settings live in `_repro_template_yaml`.
"""

from __future__ import annotations

from pathlib import Path

from repro.benchmarks import benchmark_names, get_benchmark

HERE = Path(__file__).resolve().parent
TASK_BENCHMARKS = tuple(name for name in benchmark_names() if get_benchmark(name).lm_eval)


def task_name(benchmark: str) -> str:
    return benchmark.replace("-", "_") + "_repro"


def task_yaml(benchmark: str) -> str:
    """The YAML text of one benchmark's lm-eval task."""
    spec = get_benchmark(benchmark)
    sampling = dict(spec.sampling)
    max_new = sampling.pop("max_new_tokens")
    lines = ["include: _repro_template_yaml", f"task: {task_name(benchmark)}"]
    if spec.kind == "code":
        lines.append("unsafe_code: true  # graded by running the generated code "
                     "(in repro's sandbox)")
    lines += [
        f"repeats: {spec.default_k}",
        "filter_list:",
        "  - name: all_samples",
        "    filter:",
        "      - function: take_first_k",
        f"        k: {spec.default_k}",
        f"generation_kwargs:  # the benchmark's sampling (repro/benchmarks/specs/{benchmark}.yaml);"
        " EOS is the only stop",
        "  until: []",
        "  do_sample: true",
        *(f"  {key}: {value}" for key, value in sampling.items()),
        f"  max_gen_toks: {max_new}",
        "metadata:",
        "  version: 1.0",
        f"  benchmark: {benchmark}",
    ]
    return "\n".join(lines) + "\n"


def write_task_yamls(folder: Path = HERE) -> list[Path]:
    """Write every task YAML into `folder`; returns the paths."""
    paths = []
    for benchmark in TASK_BENCHMARKS:
        path = folder / f"{task_name(benchmark)}.yaml"
        path.write_text(task_yaml(benchmark))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_task_yamls():
        print(f"wrote {written}")
