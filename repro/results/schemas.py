"""Every result table's schema, defined once. Readers (pandas, polars, duckdb) take them as is.

Provenance that is the same for a whole file (resolved config, git revision, package version)
lives in the schema metadata; what can differ between rows that get concatenated later
(model, benchmark, sampling, grader, sandbox) is a column, so aggregates keep it.
"""

from __future__ import annotations

import pyarrow as pa


def _f(name: str, kind: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, kind, nullable=nullable)


_RUN_KEYS = [
    _f("model", pa.string()),  # model path or hub id as given
    _f("checkpoint", pa.string()),  # a label: "final", "step=120", or the path's last part
    _f("benchmark", pa.string()),
    _f("revision_hash", pa.string()),  # hash of the loaded problem set (repro.benchmarks)
    _f("k", pa.int64()),
    _f("temperature", pa.float64()),
    _f("top_p", pa.float64()),
    _f("top_k", pa.int64()),
    _f("min_p", pa.float64()),
    _f("max_new_tokens", pa.int64()),
    _f("seed", pa.int64()),
    _f("engine", pa.string()),
    _f("grader_version", pa.string()),
    _f("grader_compat", pa.string()),  # math: "default" or "matharena"; code: "lcb" or "fixed"
    _f("sandbox_mode", pa.string()),  # "bwrap", "unsafe" or "none" (math)
]

EVAL_SAMPLES = pa.schema(
    [
        *_RUN_KEYS,
        _f("problem_id", pa.string()),
        _f("problem_hash", pa.string()),
        _f("sample_idx", pa.int64()),
        _f("completion", pa.string()),
        _f("n_tokens", pa.int64()),
        _f("finish_reason", pa.string()),  # "stop" or "length"
        _f("correct", pa.bool_()),
        _f("verdict", pa.string()),
        _f("reason", pa.string()),
        _f("extracted", pa.string(), nullable=True),
    ],
    metadata={"schema_name": "eval_samples", "schema_version": "1"},
)

EVAL_PROBLEMS = pa.schema(
    [
        *_RUN_KEYS,
        _f("problem_id", pa.string()),
        _f("problem_hash", pa.string()),
        _f("n", pa.int64()),  # samples
        _f("c", pa.int64()),  # correct samples
        _f("avg", pa.float64()),  # c / n
        _f("pass_at_k", pa.float64()),  # unbiased pass@k with k = n
        _f("truncated_frac", pa.float64()),  # finish_reason == "length"
        _f("no_answer_frac", pa.float64()),
        _f("grader_errors", pa.int64()),  # samples the grader failed on (timeout, error, sandbox)
    ],
    metadata={"schema_name": "eval_problems", "schema_version": "1"},
)

# One row per RL step (rollout batch). Metrics of the K updates are averaged over them;
# timing columns are the only ones a resumed run may change. s_spread: within-group relative
# range of the sequence ratios, averaged over the K updates (the first is 0 by construction
# unless the behaviour policy differs from the trainer's). Version 3 added the mechanism
# columns: s_spread_product (the same spread under the product reading of s), w_shift (DFPO's
# mean |w~/w - 1|, NaN for other objectives), shared_frac (share of response tokens on shared
# prefix nodes); files written before read them as NaN (ADDED_COLUMNS). Version 4 added the
# preamble probes (synth-preamble; NaN for tasks without preambles): preamble_kl, the mean per
# preamble token of KL(start || now) (the learning tax on shared, reward-irrelevant tokens), and
# phrasing_kl, KL(start || now) of the distribution over the equally taught phrasings.
# Version 5 added aux_loss: an MoE policy's router load-balancing loss (transformers' own, before
# its coefficient), averaged over the K updates; NaN for dense models or a coefficient of 0.
# Version 6 added the off-policy readings (issue 38): log_ratio_mean, the mean over response
# tokens of logp - logp_old at the step's first update (the sampler's bias, -ppo_kl of that
# update), and w_dev, the mean |s - 1| of the sequence ratio (mean reading), over the updates.
# Version 7 redefined log_ratio_mean as the mean over the sequences of every update of the step
# of GSPO's log s_i = mean_t (logp - logp_old) (each sequence once, whatever its length; the
# updates' means averaged, all of equal size): the ratio's bias over the whole step, not the
# first update's token mean. A file written under an earlier version reads it as NaN
# (REDEFINED_COLUMNS), so the two quantities never mix.
TRAIN_LOG_ADDED = ("s_spread_product", "w_shift", "shared_frac")
TRAIN_LOG_PREAMBLE = ("preamble_kl", "phrasing_kl")
TRAIN_LOG_ROUTER = ("aux_loss",)
TRAIN_LOG_OFFPOLICY = ("log_ratio_mean", "w_dev")
TRAIN_LOG_METRICS = (
    "reward_mean", "reward_std", "accuracy", "response_len", "truncated_frac", "entropy",
    "loss", "clip_frac", "ppo_kl", "w_min", "w_max", "w_mean", "neg_weight_frac", "s_spread",
    "zero_adv_frac", "asym", "residual_full", "freq_energy", "logodds", "logodds_drift",
    "kl_template", "grad_norm", "lr", "grader_errors", *TRAIN_LOG_ADDED, *TRAIN_LOG_PREAMBLE,
    *TRAIN_LOG_ROUTER, *TRAIN_LOG_OFFPOLICY,
)
TRAIN_LOG_TIMING = ("time_rollout", "time_update")
TRAIN_LOG = pa.schema(
    [
        _f("algorithm", pa.string()),  # the run's label, e.g. dfpo_min
        _f("objective", pa.string()),  # registry name of the loss, e.g. dfpo
        _f("seed", pa.int64()),
        _f("step", pa.int64()),  # 1-based rollout batch index
        _f("gen_tokens", pa.int64()),
        _f("gen_tokens_cum", pa.int64()),
        _f("flops_cum", pa.float64()),  # 2 N per generated token + 6 N per trained token
    ]
    + [_f(name, pa.float64()) for name in TRAIN_LOG_METRICS + TRAIN_LOG_TIMING],
    metadata={"schema_name": "train_log", "schema_version": "7"},  # 2: s_spread, 3: ADDED,
)  # 4: TRAIN_LOG_PREAMBLE, 5: TRAIN_LOG_ROUTER, 6: TRAIN_LOG_OFFPOLICY, 7: log_ratio_mean

# Aggregates (`repro aggregate`): the per-job tables concatenated, with the run's keys parsed
# from the hive-style path (algo=/model=/group_size=/seed=/frac=) as `run_*` columns. The
# prefix keeps them apart from same-named columns of the job tables (an eval's `model` is the
# evaluated checkpoint and its `seed` the sampling seed) and makes them one join key across
# every aggregate. The study settings (repro.reporting.study) sit in each file's `config`.
_AGG_RUN_KEYS = [
    _f("run_algo", pa.string()),  # run label; "init" for the SFT starting point
    _f("run_model", pa.string()),  # model label of the experiment, e.g. tiny
    _f("run_group_size", pa.int64()),
    _f("run_seed", pa.int64()),
]
_AGG_EVAL_KEYS = [
    _f("run_algo", pa.string()),
    _f("run_model", pa.string()),
    _f("run_group_size", pa.int64(), nullable=True),  # null for the SFT starting point
    _f("run_seed", pa.int64()),
    _f("frac", pa.float64()),  # share of the training budget of the evaluated checkpoint
]

AGG_TRAIN_CURVES = pa.schema(
    [*_AGG_RUN_KEYS, *TRAIN_LOG],
    metadata={"schema_name": "agg_train_curves", "schema_version": "6"},  # 2: TRAIN_LOG_ADDED
)  # 3: TRAIN_LOG_PREAMBLE, 4: TRAIN_LOG_ROUTER, 5: TRAIN_LOG_OFFPOLICY, 6: log_ratio_mean (v7)

# float64 columns a schema gained after files were committed under it: `read_table` reads
# such a file with these columns as NaN ("not measured"), so old results stay readable.
ADDED_COLUMNS = {name: TRAIN_LOG_ADDED + TRAIN_LOG_PREAMBLE + TRAIN_LOG_ROUTER + TRAIN_LOG_OFFPOLICY
                 for name in ("train_log", "agg_train_curves")}
# float64 columns whose meaning changed: schema name -> {column: the first schema version with
# the current meaning}. `read_table` reads the column of a file written under an earlier version
# as NaN ("not measured"), never as the new quantity.
REDEFINED_COLUMNS = {"train_log": {"log_ratio_mean": 7}, "agg_train_curves": {"log_ratio_mean": 6}}
AGG_EVAL_SAMPLES = pa.schema(
    [*_AGG_EVAL_KEYS, *EVAL_SAMPLES],
    metadata={"schema_name": "agg_eval_samples", "schema_version": "1"},
)
AGG_EVAL_PROBLEMS = pa.schema(
    [*_AGG_EVAL_KEYS, *EVAL_PROBLEMS],
    metadata={"schema_name": "agg_eval_problems", "schema_version": "1"},
)
AGG_RUNS = pa.schema(
    [
        *_AGG_RUN_KEYS,
        _f("objective", pa.string()),
        _f("steps", pa.int64()),  # last logged step
        _f("gen_tokens_cum", pa.int64()),  # at the last step
        _f("flops_cum", pa.float64()),
        _f("time_total", pa.float64()),  # seconds: sum of time_rollout + time_update
        _f("reward_final", pa.float64()),  # mean reward_mean of the last smooth_window steps
        _f("entropy_final", pa.float64()),  # entropy at the last step
    ],
    metadata={"schema_name": "agg_runs", "schema_version": "1"},
)

# The paper's published numbers (repro.reporting.paper_numbers), one row per value.
PAPER_REFERENCE = pa.schema(
    [
        _f("table", pa.string()),  # the paper's table number, e.g. "1"
        _f("benchmark", pa.string(), nullable=True),  # registry name (aime25); null: train reward
        _f("model", pa.string(), nullable=True),  # e.g. Qwen3-32B; null where not stated
        _f("method", pa.string()),  # the paper's name, e.g. "DFPO (Min-Replace)"
        _f("group_size", pa.int64(), nullable=True),  # G of an ablation row
        _f("metric", pa.string()),  # avg@32, compute_rel_gspo, delta_vs_gspo
        _f("value", pa.float64()),  # in the metric's unit (avg@32 in %)
        _f("note", pa.string(), nullable=True),  # source tag, caveats
    ],
    metadata={"schema_name": "paper_reference", "schema_version": "1"},
)


# `repro theory`: one row per (algorithm, seed, step) of the exact tabular experiment.
THEORY = pa.schema(
    [_f("algorithm", pa.string())]
    + [_f(name, pa.int64()) for name in ("seed", "step")]
    + [
        _f(name, pa.float64())
        for name in (
            "kl_template", "kl_template_cum", "kl_tax", "kl_tax_cum", "logodds",
            "logodds_drift", "p_correct", "p_template", "entropy_answer", "template_residual",
            "clip_frac", "zero_adv_frac",
        )
    ]
)
