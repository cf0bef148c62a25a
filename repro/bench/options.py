"""The options of `repro bench ...`: one dataclass a benchmark, its CLI generated from it.

Why a module of their own: `repro` builds every subcommand's options when it starts, so the
dataclasses must import without torch (~2.5 s a process, paid by `repro tables` and every other
command that never touches a tensor); the benchmarks that run them import it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

PRESET = Path(__file__).resolve().parents[2] / "config" / "presets" / "paper-qwen3-32b.yaml"
DTYPE_NAMES = ("bfloat16", "float16", "float32")  # `repro bench logprobs --dtype`


def _option(default: Any, help_text: str) -> Any:
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class CoherenceConfig:
    """Options of `repro bench coherence`."""

    model: str = field(metadata={"help": "Policy folder (e.g. an SFT start or a run's final)."})
    task: str = _option("synth-rule", "Training prompt set.")
    batches: int = _option(8, "Independent rollout batches (>= 2).")
    prompts: int = _option(8, "Prompts per batch.")
    group_size: int = _option(8, "Samples per prompt (>= 2).")
    max_new_tokens: int = _option(64, "Response budget.")
    temperature: float = _option(1.0, "Sampling temperature.")
    seed: int = _option(0, "Prompt stream and sampling seed.")
    same_prompts: bool = _option(False, "Redraw samples of one prompt set.")

    def __post_init__(self) -> None:
        for name in ("batches", "prompts", "group_size", "max_new_tokens"):
            if getattr(self, name) < (2 if name in ("batches", "group_size") else 1):
                raise ValueError(f"CoherenceConfig.{name} is too small: {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"CoherenceConfig.temperature must be > 0, got {self.temperature}")


NEXT_PRESET = PRESET.with_name("paper-qwen3-next-80b.yaml")


def _next_80b_width() -> dict[str, Any]:
    """Qwen3-Next-80B's config.json fields as its preset declares them (one source), with 2
    layers: one Gated DeltaNet and one gated-attention layer (full_attention_interval 2), so the
    512 experts' update fits one H200 like the dense shape's 4 layers."""
    models = yaml.safe_load(NEXT_PRESET.read_text())["models"]
    fields = dict(next(iter(models.values()))["config"])
    fields.pop("max_position_embeddings", None)  # the preflight's sequences set it
    return fields | {"num_hidden_layers": 2, "full_attention_interval": 2}


# The paper models' widths with few layers, so a step fits one H200 and the budget: dense
# Qwen3-32B (its config.json) and Qwen3-Next-80B-A3B (hybrid DeltaNet / attention, 512 experts).
# The Next fields are read from its preset when asked for (`gpu_shape`), not at import: the CLI
# must start without the repository's config/ folder.
QWEN3_32B_4L = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 4,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                "intermediate_size": 25600, "vocab_size": 151936, "tie_word_embeddings": False}
SHAPES = ("qwen3-32b-4l", "qwen3-next-80b-2l")


def gpu_shape(name: str) -> dict[str, Any]:
    """The config.json fields of GPU shape `name` (one of SHAPES)."""
    return dict(QWEN3_32B_4L) if name == "qwen3-32b-4l" else _next_80b_width()


# --tiny: the twin's random-init tiny models of the same two architectures (repro.bench.twin)
TINY_SHAPES = ("tiny", "tiny-next")
# seconds per stage on the GPU shape / on --tiny; `build` writes the random-init model
GPU_BUDGETS = {"build": 90, "startup": 150, "vllm_sync": 60, "rollout": 90, "update": 90,
               "param_change": 15, "save": 60, "vllm_resync": 30, "reload": 60}
TINY_BUDGETS = {"build": 30, "startup": 120, "vllm_sync": 30, "rollout": 60, "update": 60,
                "param_change": 15, "save": 30, "vllm_resync": 30, "reload": 60}


# rollout sizes on the GPU shape / on --tiny, where the option is not given
# 256 new tokens: HF generate (no vLLM on a lent machine) took ~270 s for 1,024 on the H200
# against the 90 s rollout budget (issue 48)
GPU_SIZES = {"prompts_per_step": 8, "group_size": 8, "minibatches": 4, "max_new_tokens": 256}
TINY_SIZES = {"prompts_per_step": 4, "group_size": 4, "minibatches": 2, "max_new_tokens": 8}


def _size(name: str, what: str) -> Any:
    """A rollout size that defaults to the mode's (GPU_SIZES or TINY_SIZES)."""
    return field(default=None, metadata={
        "help": f"{what} (default: {GPU_SIZES[name]}; {TINY_SIZES[name]} with --tiny)."})


@dataclass
class PreflightConfig:
    """Options of `repro bench gpu`; `resolved()` fills what the mode decides."""

    out: Path = field(default=Path("preflight"), metadata={
        "help": "Folder: preflight.json, the model, worker logs."})
    tiny: bool = field(default=False, metadata={
        "help": "CPU mode (tiny model, 2 gloo processes): for CI."})
    shapes: tuple[str, ...] = field(default=(), metadata={
        "help": f"Random-init shapes, run one after the other (default: all; GPU: "
                f"{', '.join(SHAPES)}; --tiny: {', '.join(TINY_SHAPES)})."})
    processes: int = field(default=0, metadata={
        "help": "Processes (0: every visible GPU; 2 on CPU)."})
    lr: float | None = field(default=None, metadata={
        "help": "Learning rate (default: the paper preset's)."})
    prompts_per_step: int | None = _size("prompts_per_step", "Prompts per rollout step")
    group_size: int | None = _size("group_size", "Responses per prompt")
    minibatches: int | None = _size("minibatches", "Updates per rollout step (K)")
    max_new_tokens: int | None = _size("max_new_tokens", "Response budget (tokens)")
    budget_s: float = field(default=480.0, metadata={
        "help": "Total seconds over all shapes (each gets what is left over the shapes still to "
                "run); each stage has its own too."})
    budgets: dict[str, float] = field(default_factory=dict, metadata={
        "help": f"Seconds of a stage over the mode's ({', '.join(GPU_BUDGETS)})."})

    def __post_init__(self) -> None:
        unknown = sorted(set(self.budgets) - set(GPU_BUDGETS))
        if unknown:
            raise ValueError(f"PreflightConfig.budgets: unknown stage(s) {unknown}; "
                             f"stages: {list(GPU_BUDGETS)}")
        known = TINY_SHAPES if self.tiny else SHAPES
        self.shapes = tuple(self.shapes) or known
        wrong = [s for s in self.shapes if s not in known]
        if wrong or len(set(self.shapes)) < len(self.shapes):
            raise ValueError(f"PreflightConfig.shapes: {list(self.shapes)} are not distinct "
                             f"shapes of {list(known)}{' (--tiny)' if self.tiny else ''}")

    def resolved(self) -> PreflightConfig:
        import torch  # not at import: `repro` builds its options without torch

        world = self.processes or (torch.cuda.device_count() if not self.tiny else 2)
        sizes = TINY_SIZES if self.tiny else GPU_SIZES
        given = {k: v for k, v in asdict(self).items() if v is not None}
        base = TINY_BUDGETS if self.tiny else GPU_BUDGETS
        return PreflightConfig(**(sizes | given | {
            "processes": world, "budgets": base | self.budgets,
            "lr": self.lr if self.lr is not None else preset()["lr"]}))


def preset() -> dict[str, Any]:
    """The paper preset's `train:` block (its lr and trl_args are the preflight's)."""
    return yaml.safe_load(PRESET.read_text())["train"]


@dataclass
class LogprobsBenchConfig:
    """Sizes and repetitions of the log-prob benchmark (defaults: Qwen3-0.6B head, 8k tokens)."""

    vocab: int = field(default=151936, metadata={"help": "Vocabulary size V (Qwen3: 151,936)."})
    hidden: int = field(default=1024, metadata={"help": "Hidden size H (Qwen3-0.6B: 1,024)."})
    tokens: int = field(
        default=8192, metadata={"help": "Response tokens N scored in one call."}
    )
    chunk_size: int = field(
        default=1024, metadata={"help": "Rows per chunk of the chunked path."}
    )
    repeats: int = field(
        default=3, metadata={"help": "Timed rounds per path; the median time is reported."}
    )
    dtype: str = field(
        default="float32",
        metadata={"help": "dtype of hidden states and weight: float32, bfloat16 or float16 "
                  "(logits are float32 either way)."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of every random input."})

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "tokens", "chunk_size", "repeats", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                self._fail(name, "must be an integer")
            if value < (0 if name == "seed" else 1):
                self._fail(name, "must be >= 0" if name == "seed" else "must be >= 1")
        if self.dtype not in DTYPE_NAMES:
            self._fail("dtype", f"must be one of {sorted(DTYPE_NAMES)}")

    def _fail(self, name: str, rule: str) -> None:
        raise ValueError(f"{type(self).__name__}.{name} {rule}, got {getattr(self, name)!r}")


@dataclass
class ObjectivesBenchConfig:
    """Sizes and repetitions of `repro bench objectives`."""

    seqs: int = field(
        default=1024, metadata={"help": "Sequences per minibatch (B); a multiple of group_size."}
    )
    max_len: int = field(
        default=4096,
        metadata={"help": "Padded response length T; lengths are uniform in [max_len/4, max_len]."},
    )
    group_size: int = field(default=16, metadata={"help": "Responses per group (at least 2)."})
    repeats: int = field(
        default=5, metadata={"help": "Timed rounds per case; the median is reported."}
    )
    warmup: int = field(default=1, metadata={"help": "Untimed rounds before the timed ones."})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. 'cpu' or 'cuda'."})
    seed: int = field(default=0, metadata={"help": "Seed of every random input."})
    threads: int | None = field(
        default=None,
        metadata={"help": "torch intra-op CPU threads during the run (None: leave torch's "
                  "setting). On a small shared CPU, 1 avoids stalls when another process "
                  "holds a core that a parallel op waits for."},
    )
    transform_groups: tuple[int, ...] = field(
        default=(4096, 65536),
        metadata={"help": "Group counts at which the transforms are timed alone (each group "
                  "has group_size rows); the largest / smallest time ratio is reported."},
    )

    def __post_init__(self) -> None:
        for name in ("seqs", "max_len", "group_size", "repeats", "warmup", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                self._fail(name, "must be an integer")
        self._check(self.seqs >= 2, "seqs", "must be >= 2")
        self._check(self.max_len >= 1, "max_len", "must be >= 1")
        self._check(self.group_size >= 2, "group_size", "must be >= 2 (a group needs a baseline)")
        self._check(
            self.seqs % self.group_size == 0, "seqs",
            f"must be divisible by group_size={self.group_size}",
        )
        self._check(self.repeats >= 1, "repeats", "must be >= 1")
        self._check(self.warmup >= 0, "warmup", "must be >= 0")
        self._check(
            self.threads is None
            or (isinstance(self.threads, int) and not isinstance(self.threads, bool)
                and self.threads >= 1),
            "threads", "must be a positive integer or None",
        )
        try:
            self.transform_groups = tuple(self.transform_groups)
        except TypeError:
            self._fail("transform_groups", "must be a sequence of positive integers")
        self._check(
            len(self.transform_groups) > 0
            and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1
                for n in self.transform_groups
            ),
            "transform_groups", "must be a non-empty sequence of positive integers",
        )
        import torch  # not at import: `repro` builds its options without torch

        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            self._fail("device", "is not a valid torch device")
        if dev.type == "cuda":
            self._check(torch.cuda.is_available(), "device", "is cuda but CUDA is not available")

    def _check(self, ok: bool, name: str, rule: str) -> None:
        if not ok:
            self._fail(name, rule)

    def _fail(self, name: str, rule: str) -> None:
        raise ValueError(f"{type(self).__name__}.{name} {rule}, got {getattr(self, name)!r}")
