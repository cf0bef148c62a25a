"""`repro eval` configuration: one dataclass with help on every field, for the whole evaluation
(a model on one or more benchmarks).

Built once, from the command line, from a YAML file (`repro eval --config`) or from the pipeline
config (`repro.pipeline.jobs.Jobs.eval_config`), and passed through as is. Every evaluation
writes it, defaults included, as `resolved.yaml` beside its outputs: `repro eval --config
OUT/resolved.yaml` runs the same evaluation again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.config_bounds import check_bounds
from repro.config_fields import check_fields
from repro.generation.base import SamplingConfig

RESOLVED_FILE = "resolved.yaml"
SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingConfig)
                      if f.name not in ("n", "seed"))  # the run sets n (= k) and the seed


class _Overrides:
    """Methods of `SamplingOverrides` (its fields are made from SamplingConfig's below)."""

    @classmethod
    def of(cls, given: Mapping[str, Any] | _Overrides | None) -> SamplingOverrides:
        """From a mapping as YAML or the CLI spell it (null: the benchmark's own value)."""
        if isinstance(given, _Overrides):
            return given  # type: ignore[return-value]
        given = {k: v for k, v in (given or {}).items() if v is not None}
        unknown = sorted(set(given) - set(SAMPLING_KEYS))
        if unknown:
            raise ValueError(f"sampling key {unknown[0]!r} is not one of {list(SAMPLING_KEYS)}")
        SamplingConfig(**given)  # a bad value fails here, naming the field
        return SamplingOverrides(**given)

    def given(self) -> dict[str, Any]:
        """The keys set, as resolved.yaml and the pipeline config spell them."""
        return {k: getattr(self, k) for k in SAMPLING_KEYS if getattr(self, k) is not None}

    def over(self, spec_sampling: Mapping[str, Any], k: int, seed: int) -> SamplingConfig:
        """The one rule of an evaluation's sampling: the benchmark's, these keys over it, n = k,
        the run seed. The runner and the memory planner both call it."""
        return SamplingConfig(**(dict(spec_sampling) | self.given() | {"n": k, "seed": seed}))


# Every SamplingConfig field the run does not set, optional: the same types, help and bounds.
SamplingOverrides = dataclasses.make_dataclass(
    "SamplingOverrides",
    [(f.name, f"{f.type} | None" if isinstance(f.type, str) else f.type | None,
      dataclasses.field(default=None, metadata=f.metadata | {"unset": True}))  # no default
     for f in dataclasses.fields(SamplingConfig) if f.name in SAMPLING_KEYS],
    bases=(_Overrides,), frozen=True,
)
SamplingOverrides.__module__ = __name__
SamplingOverrides.__doc__ = ("Overrides of a benchmark's sampling (EvalConfig.sampling, config "
                             "eval.sampling); None = the benchmark's own value.")


@dataclass
class EvalConfig:
    """One evaluation run (the options of `repro eval`, the fields of its resolved.yaml)."""

    model: str = field(default="", metadata={
        "help": "Local model folder or hub id (Qwen/Qwen3-32B)."})
    benchmarks: list[str] = field(default_factory=list, metadata={
        "help": "Registry names (repro/benchmarks/specs): aime25, hmmt25, livecodebench, "
                "synth-*. Several share one model load."})
    out: Path | None = field(default=None, metadata={
        "help": "Output folder for samples.parquet, problems.parquet and resolved.yaml."})
    split: bool = field(default=False, metadata={
        "help": "Write each benchmark to OUT/benchmark=NAME/ (required for several)."})
    k: int | None = field(default=None, metadata={
        "help": "Samples per problem (avg@k); None = the benchmark's default (32 for the "
                "paper's).", "min": 1})
    limit: int | None = field(
        default=None, metadata={"help": "Evaluate only the first N problems; None = all.",
                                "min": 1}
    )
    data_dir: Path | None = field(
        default=None, metadata={"help": "Offline mirror of the datasets."}
    )
    lock: Path | None = field(default=None, metadata={
        "help": "Data lock of `repro data pin`: sha256 pins, and the mirror when data_dir is "
                "None."})
    checkpoint: str = field(default="final", metadata={"help": "Label stored with the results."})
    engine: str = field(default="auto", metadata={
        "help": "Generation engine: auto (vLLM on a GPU, else HF), hf or vllm.",
        "choices": ("auto", "hf", "vllm")})
    batch_size: int = field(default=16, metadata={"help": "Prompts per HF generate call.",
                                                  "min": 1})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    sampling: SamplingOverrides = field(
        default_factory=SamplingOverrides,
        metadata={"help": "Overrides of the benchmark's sampling (temperature, "
                  "max_new_tokens...)."},
    )
    workers: int = field(default=2, metadata={"help": "Parallel grading workers (sandboxes).",
                                              "min": 1})
    unsafe_no_sandbox: bool = field(
        default=False,
        metadata={"help": "Run generated code without bubblewrap (recorded in the results)."},
    )

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("--model must name a model folder or hub id")
        if self.out is None or not str(self.out):
            raise ValueError("--out must name the output folder")
        self.out = Path(self.out)
        self.data_dir = None if self.data_dir is None else Path(self.data_dir)
        self.lock = None if self.lock is None else Path(self.lock)
        self.benchmarks = list(self.benchmarks)
        if not self.benchmarks:
            raise ValueError("--benchmark is missing: name at least one benchmark")
        duplicated = sorted({b for b in self.benchmarks if self.benchmarks.count(b) > 1})
        if duplicated:
            raise ValueError(f"--benchmark {duplicated[0]} is given twice")
        if len(self.benchmarks) > 1 and not self.split:
            raise ValueError(f"{len(self.benchmarks)} benchmarks need one folder each: "
                             "pass --split")
        check_bounds(self, spell=lambda name: "--" + name.replace("_", "-"))
        self.sampling = SamplingOverrides.of(self.sampling)  # built once, used by the runner

    def out_of(self, benchmark: str) -> Path:
        """Where one benchmark's files go: OUT/benchmark=NAME/ with `split`, else OUT."""
        assert self.out is not None  # __post_init__ refuses None
        return self.out / f"benchmark={benchmark}" if self.split else self.out

    def to_dict(self) -> dict[str, Any]:
        """Every field as YAML spells it (paths as strings): the content of resolved.yaml."""
        out = {k: str(v) if isinstance(v, Path) else v
               for k, v in dataclasses.asdict(self).items()}
        return out | {"sampling": self.sampling.given()}

    def sampling_for(self, spec: Any) -> SamplingConfig:
        """One benchmark's sampling (`SamplingOverrides.over`): n = k or the spec's default."""
        return self.sampling.over(spec.sampling, self.k or spec.default_k, self.seed)


def load_eval_config(path: Path | None, given: dict[str, Any]) -> EvalConfig:
    """A YAML file of EvalConfig fields (optional), the `given` values over it (a `sampling`
    mapping over the file's, key by key); unknown keys and ill-typed values are named."""
    data: dict[str, Any] = {}
    if path is not None:
        import yaml

        if not Path(path).is_file():
            raise ValueError(f"--config {path}: no such file")
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: an eval config must be a YAML mapping")
        check_fields(EvalConfig, loaded, f"{path}: ")
        data = loaded
    for key, value in given.items():
        data[key] = (data.get(key) or {}) | value if key == "sampling" else value
    return EvalConfig(**data)


def write_resolved(cfg: EvalConfig) -> Path:
    """Write `cfg` as OUT/resolved.yaml, atomically; a file that already holds it is left as is
    (the pipeline writes it before the job that reads it, which must not look newer)."""
    import yaml

    from repro.atomic import write_yaml

    assert cfg.out is not None  # __post_init__ refuses None
    path = cfg.out / RESOLVED_FILE
    if not (path.is_file() and yaml.safe_load(path.read_text()) == cfg.to_dict()):
        write_yaml(path, cfg.to_dict())
    return path
