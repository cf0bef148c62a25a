"""`repro train` configuration: one dataclass with help on every field, loaded from YAML plus
`key=value` overrides (dotted keys reach into `objective`), validated with field-naming errors.

Compute matching: every algorithm of an experiment gets the same file with only `algorithm` and
`objective` changed, so P, G, K, steps, max tokens, sampling and the prompt stream are equal.
The one exception is an off-policy source (repro.training.sources): a catalogue entry may set
its run label's, so a study compares arms within a source (study 3, docs/preregistration-3.md).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro.config_bounds import check_bounds
from repro.config_fields import check_fields, field_defaults
from repro.objectives import LossConfig, algorithm_names, get_algorithm, make_config
from repro.objectives.advantages import SCALES
from repro.training.trainers import DECLARED, ENGINES
from repro.training.trl_options import check_trl_args


@dataclass
class TrainConfig:
    model: str = field(
        default="", metadata={"help": "SFT checkpoint folder or hub id to start from."}
    )
    algorithm: str = field(default="dfpo", metadata={
        "help": f"Objective, a name in repro.objectives' registry: {', '.join(algorithm_names())}."
    })
    objective: LossConfig = field(  # given as a mapping of overrides (YAML, KEY=VALUE)
        default_factory=dict,  # type: ignore[arg-type]
        metadata={"help": "The algorithm's config: the class of `algorithm`'s registry entry, "
                  "given as overrides of its defaults, e.g. {transform: orth_proj} (a key "
                  "foreign to that class is refused, named), built once here and handed to the "
                  "loss.", "chosen_by": "algorithm"},
    )
    tasks: dict[str, float] = field(
        default_factory=lambda: {"synth-aime": 1.0},
        metadata={"help": "Training prompt sets (benchmark registry names) and mixing weights: "
                  "synth-aime/-hmmt/-lcb (train splits), openr1-math, lcb-train."},
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "Offline mirror of hub prompt sets (as for repro eval)."}
    )
    sha256_pins: dict[str, str] = field(
        default_factory=dict, metadata={"help": "LCB shard -> sha256 pins (lcb-train)."}
    )
    seed: int = field(
        default=0, metadata={"help": "Run seed: prompt stream, sampling, minibatch order."}
    )
    prompts_per_step: int = field(
        default=8, metadata={"min": 1, "help": "P: prompts (groups) per rollout batch."}
    )
    group_size: int = field(default=8, metadata={"help": "G: responses per prompt."})
    minibatches: int = field(
        default=4,
        metadata={"help": "K: optimizer updates per rollout batch, each on P/K whole groups. K > 1 "
                  "makes later updates off-policy (s != 1), where DFPO's transforms act."},
    )
    epochs: int = field(
        default=1,
        metadata={"min": 1,
                  "help": "Passes over each rollout batch, each pass K minibatch updates on a "
                  "fresh permutation of the groups, logp_old fixed from before the first (TRL's "
                  "num_iterations, verl's ppo_epochs): minibatch reuse, a realistic off-policy "
                  "source. engine=trl: num_iterations, whose passes repeat pass 1's minibatches "
                  "in its order (TRL's rule)."},
    )
    sampler_dtype: str | None = field(
        default=None,
        metadata={"help": "'bfloat16': rollouts and logp_old come from a bf16 copy of the policy "
                  "made each rollout step (a bf16 sampler next to an fp32 trainer) while the "
                  "loss scores with the policy itself: a realistic sampler/trainer mismatch, "
                  "s != 1 from the first update. null = the policy samples. Both engines (trl: "
                  "HF generate on one process; repro.training.behaviour)."},
    )
    staleness: int = field(
        default=0,
        metadata={"min": 0,
                  "help": "d: the rollout of step t is sampled by the policy of d rollout steps "
                  "earlier (its weights at the start of step t - d; the start's for t <= d), "
                  "which also gives logp_old, as one-step-off (d = 1) and d = 2 asynchronous "
                  "trainers run: a realistic off-policy source. The last d policies' weights "
                  "are kept and checkpointed, so a resumed run continues the same history. "
                  "0 = on-policy rollouts. Both engines (trl: HF generate on one process; "
                  "repro.training.behaviour)."},
    )
    max_new_tokens: int = field(default=64, metadata={"min": 1,
                                                      "help": "Response budget per sample."})
    temperature: float = field(
        default=1.0,
        metadata={"help": "Rollout sampling temperature; log-probs use logits / T."},
    )
    top_p: float = field(
        default=1.0, metadata={"help": "Rollout nucleus mass: must be 1 (no truncation)."}
    )
    top_k: int = field(default=0, metadata={"help": "Rollout top-k: must be 0 (off)."})
    behaviour_temperature: float | None = field(
        default=None,
        metadata={"help": "The controlled off-policy dose (native engine): sample at this "
                  "temperature T_b and take logp_old from softmax(logits / T_b), the policy that "
                  "sampled, while the loss scores at `temperature`: a sampler/trainer mismatch, "
                  "so s != 1 from the first update. null = `temperature` (no dose)."},
    )
    behaviour_logprobs: str = field(
        default="trainer",
        metadata={"help": "'trainer': recompute logp_old after the rollout; 'engine': take the "
                  "sampler's log-probs (train/inference mismatch makes s != 1 from update 1)."},
    )
    advantage_scale: str = field(
        default="group", metadata={"help": f"Advantage scaling, {SCALES}."}
    )
    lr: float = field(default=5e-5, metadata={"exclusive_min": 0,
        "help": "AdamW learning rate (constant). Chosen for the tiny default on train reward "
                "(gspo and dfpo_min, seeds 0-1): at 2e-4 the reward fell over 40 steps, at 5e-5 "
                "it rose."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    grad_clip: float = field(default=1.0, metadata={"help": "Max global grad norm (0 = off)."})
    kl_coef: float = field(
        default=0.0,
        metadata={"help": "k3 KL to the initial policy (0 = off, no reference model)."},
    )
    router_aux_loss_coef: float | None = field(
        default=None,
        metadata={"help": "MoE policies: weight of transformers' router load-balancing loss "
                  "added to the objective's loss (logged as aux_loss, kept out of the "
                  "objective's diagnostics); null = the model config's own "
                  "(router_aux_loss_coef, 0.001 for Qwen3-Next-80B), 0 = off. Both engines."},
    )
    steps: int = field(default=40, metadata={"min": 1, "help": "Rollout batches (steps) to train."})
    token_budget: int | None = field(
        default=None,
        metadata={"help": "Stop once this many tokens were generated (compute-matched)."},
    )
    checkpoint_every: int = field(
        default=10, metadata={"min": 0, "help": "Checkpoint every N steps (0 = off)."}
    )
    keep_checkpoints: int = field(
        default=0,
        metadata={"min": 0,
                  "help": "Keep only the N newest checkpoints, plus the budget-fraction ones "
                          "the export needs (0 = keep all)."},
    )
    checkpoint_fractions: list[float] = field(
        default_factory=lambda: [0.5, 1.0],
        metadata={"help": "Also checkpoint when this share of the budget (steps or tokens) is "
                  "used.", "items": {"exclusive_min": 0, "max": 1}},
    )
    probe_n: int = field(
        default=16, metadata={"min": 1, "help": "Probe prompts for logodds_drift / kl_template."}
    )
    logprob_chunk: int = field(
        default=1024, metadata={"min": 1, "help": "Rows per lm_head chunk in log-prob passes."}
    )
    engine: str = field(
        default="native",
        metadata={"help": "Trainer, one of the engines that repro/engines/ declares: "
                  + "; ".join(f"'{e.name}' ({e.help})" for e in DECLARED.values()) + "."},
    )
    trl_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "engine=trl only: extra GRPOConfig fields (e.g. use_vllm: true, "
                  "vllm_mode: colocate). Fields this config sets, and TRL options that would "
                  "change the objective, are refused by name."},
    )

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"TrainConfig.{name} {rule}, got {getattr(self, name)!r}")

        check_scalar_types(self)
        need(bool(self.model), "model", "must name an SFT checkpoint or model")
        self._objective_keys = self._build_objective()
        from repro.benchmarks import benchmark_names

        known = benchmark_names()
        need(bool(self.tasks) and set(self.tasks) <= set(known) and min(self.tasks.values()) > 0,
             "tasks", f"must map names in {known} to positive weights")
        check_bounds(self)  # each field's own bounds (metadata), the reference's too
        need(self.group_size >= 2, "group_size", "must be >= 2 (a group needs a baseline)")
        need(self.minibatches >= 1 and self.prompts_per_step % self.minibatches == 0, "minibatches",
             f"must be >= 1 and divide prompts_per_step={self.prompts_per_step}")
        need(self.sampler_dtype in (None, "bfloat16"), "sampler_dtype", "must be null or bfloat16")
        vllm = self.engine == "trl" and bool(self.trl_args.get("use_vllm"))
        need(not vllm or self.sampler_dtype is None, "sampler_dtype", "does not drive a vLLM "
             "sampler (trl_args.use_vllm: vLLM's own dtype samples; set vllm_importance_sampling_"
             "correction there) but the trainer's HF generate")
        need(not vllm or self.staleness == 0, "staleness", "does not delay a vLLM sampler's "
             "weight sync (trl_args.use_vllm) but swaps the weights the trainer's HF generate "
             "samples with")
        need(self.behaviour_logprobs in ("trainer", "engine"), "behaviour_logprobs",
             "must be 'trainer' or 'engine'")
        need(self.advantage_scale in SCALES, "advantage_scale", f"must be one of {SCALES}")
        need(self.temperature > 0, "temperature", "must be > 0 (RL samples)")
        need(self.behaviour_temperature is None or self.behaviour_temperature > 0,
             "behaviour_temperature", "must be > 0 or null")
        need(self.behaviour_temperature is None or self.engine == "native",
             "behaviour_temperature", "is a native-engine option (TRL samples and scores at "
             "one temperature)")
        # Truncated sampling is a different policy from softmax(logits / T), whose log-probs the
        # trainer computes: ratios and gradients would refer to a policy that did not sample.
        need(self.top_p == 1, "top_p", "must be 1 in training (truncated sampling is not "
             "accounted for in the log-probs)")
        need(self.top_k == 0, "top_k", "must be 0 in training (truncated sampling is not "
             "accounted for in the log-probs)")
        need(self.router_aux_loss_coef is None or self.router_aux_loss_coef >= 0,
             "router_aux_loss_coef", "must be >= 0 or null")
        need(self.kl_coef >= 0 and self.grad_clip >= 0 and self.weight_decay >= 0, "kl_coef",
             "kl_coef, grad_clip and weight_decay must be >= 0")
        need(self.token_budget is None or self.token_budget > 0, "token_budget",
             "must be > 0 or None")
        need(all(0 < f <= 1 for f in self.checkpoint_fractions), "checkpoint_fractions",
             "must lie in (0, 1]")
        need(self.engine in ENGINES, "engine", f"must be one of {ENGINES}")
        need(self.engine == "trl" or not self.trl_args, "trl_args", "needs engine=trl")
        if self.engine == "trl":  # what TRL's engine cannot run
            check_trl_args(self.trl_args)
            need(self.behaviour_logprobs == "trainer", "behaviour_logprobs",
                 "must be 'trainer' with engine=trl (the sampler's log-probs are not wired in)")
            objective = self.objective
            if (objective.loss_agg_mode == "seq-mean-token-sum-norm"
                    and objective.loss_norm_length is None):
                raise ValueError("TrainConfig.objective.loss_norm_length must be set for "
                                 "seq-mean-token-sum-norm with engine=trl (TRL pads differently, "
                                 "so the padded length is not the native engine's)")

    def sampling_temperature(self) -> float:
        """The behaviour policy's temperature: `behaviour_temperature`, else `temperature`."""
        t_b = self.behaviour_temperature
        return self.temperature if t_b is None else t_b

    def _build_objective(self) -> tuple[str, ...] | None:
        """`objective` given as overrides becomes `algorithm`'s config class, built once here:
        the engines hand this very object to the loss. Returns the keys given (None: a built
        config was given), which `to_dict` writes back as the YAML spelled them."""
        given = self.objective
        if isinstance(given, LossConfig):
            if given.name != self.algorithm:
                raise ValueError(f"TrainConfig.objective is a {type(given).__name__} "
                                 f"({given.name!r}), not a config of algorithm "
                                 f"{self.algorithm!r}")
            return None
        try:
            self.objective = make_config(self.algorithm, **given)
        except ValueError as err:
            raise ValueError(f"TrainConfig.algorithm/objective: {err}") from None
        return tuple(given)

    def to_dict(self) -> dict[str, Any]:
        """Every field as YAML spells it; `objective` as it was given (its overrides), so a run's
        config.yaml and identity stay what they were."""
        out = dataclasses.asdict(self)
        keys = self._objective_keys  # None (a built config given): the fields off default
        if keys is None:
            defaults = field_defaults(type(self.objective))
            keys = tuple(k for k, v in out["objective"].items() if v != defaults.get(k))
        out["objective"] = {k: out["objective"][k] for k in keys}
        out["objective"] = {k: list(v) if isinstance(v, tuple) else v
                            for k, v in out["objective"].items()}
        return out


_SCALARS: dict[Any, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,),
                                         bool: (bool,)}


def check_scalar_types(config: Any) -> None:
    """Scalar fields (and `X | None`) must hold their annotated type, so `lr=abc` or
    `steps=2.5` fail before any work with one line naming the field."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        want, value = hints[f.name], getattr(config, f.name)
        args = typing.get_args(want)
        optional = typing.get_origin(want) in (typing.Union, types.UnionType) and type(None) in args
        base = next((a for a in args if a is not type(None)), None) if optional else want
        allowed = _SCALARS.get(base)
        if allowed is None or (optional and value is None):
            continue
        if (isinstance(value, bool) and base is not bool) or not isinstance(value, allowed):
            kind = base.__name__ + (" or null" if optional else "")
            raise ValueError(f"{type(config).__name__}.{f.name} must be {kind}, got {value!r}")


def fields_help() -> str:
    """One line per config field (name, default, help): the `repro train --help` epilog."""
    lines = ["Config fields (YAML keys or KEY=VALUE overrides):"]
    defaults = field_defaults(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        lines.append(f"{f.name} [{defaults[f.name]!r}]: {f.metadata['help']}")
    return "\n\n".join(lines)


_SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` strings -> a nested dict (YAML-typed values; `a.b=1` -> {a: {b: 1}})."""
    data: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} must look like key=value")
        value = yaml.safe_load(raw)
        if isinstance(value, str) and _SCIENTIFIC.fullmatch(value):
            value = float(value)  # YAML 1.1 reads 5e-5 (no dot) as a string
        if "." in key:
            head, sub = key.split(".", 1)
            data.setdefault(head, {})[sub] = value
        else:
            data[key] = value
    return data


def check_train_fields(data: dict[str, Any], where: str = "") -> None:
    """Keys and value types of a TrainConfig mapping, `objective` against its algorithm's config
    (the config class that `algorithm` chooses: a foreign key is refused, named)."""
    check_fields(TrainConfig, {k: v for k, v in data.items() if k != "objective"}, where)
    algorithm = data.get("algorithm", field_defaults(TrainConfig)["algorithm"])
    check_fields(get_algorithm(algorithm).config_cls, data.get("objective", {}),
                 f"{where}objective: ")


def load_train_config(path: str | Path | None, overrides: list[str]) -> TrainConfig:
    """YAML file (optional) + `key=value` overrides; unknown keys are named in the error."""
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: a train config must be a YAML mapping")
        data.update(loaded)
    for key, value in parse_overrides(overrides).items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = data[key] | value
        else:
            data[key] = value
    check_train_fields(data, f"{path}: " if path else "")
    return TrainConfig(**data)
