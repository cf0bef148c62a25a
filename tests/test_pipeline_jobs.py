"""The workflow's logic without Snakemake (repro/pipeline): run keys, targets, layout and the
parse-time checks, on the configs Snakemake resolves (config.yaml with a preset over it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from presets import resolved
from snakemake.io import expand

from repro.evaluation.config import EvalConfig
from repro.pipeline.checks import at_parse_time, check_selections, schema_refusal
from repro.pipeline.jobs import EVAL_THREADS, Jobs
from repro.pipeline.layout import FIGURES, TABLES, Layout
from repro.training.sources import get_source, source_names

ROOT = Path(__file__).resolve().parents[1]


def test_smoke_runs_are_the_main_grid_then_the_ablations_without_duplicates():
    runs = Jobs(resolved("smoke.yaml")).run_keys()
    keys = [(r["algo"], r["group_size"], r["seed"], r["main"]) for r in runs]
    assert keys == [("gspo", 4, 0, True), ("gspo", 4, 1, True), ("dfpo_min", 4, 0, True),
                    ("dfpo_min", 4, 1, True), ("dfpo_global", 4, 0, False),
                    ("gspo", 2, 0, False), ("dfpo_min", 2, 0, False)]


def test_ablation_runs_are_evaluated_at_the_final_fraction_unless_all_fractions():
    jobs = Jobs(resolved("smoke.yaml"))
    problems = jobs.eval_problems()
    main = [p for p in problems if "algo=gspo/model=tiny/group_size=4/seed=0/" in p]
    ablation = [p for p in problems if "group_size=2/seed=0/" in p and "algo=gspo" in p]
    assert [p.split("frac=")[1][:3] for p in main] == ["0.5", "1.0"]
    assert [p.split("frac=")[1][:3] for p in ablation] == ["1.0"]
    # 4 main runs x 2 fractions, and the start at each of the 2 run seeds
    assert len(jobs.eval_problems(main_only=True)) == 4 * 2 + 2
    every = Jobs(resolved("smoke.yaml", ablations={"all_fractions": True})).eval_problems()
    assert [p.split("frac=")[1][:3] for p in every
            if "group_size=2/seed=0/" in p and "algo=gspo" in p] == ["0.5", "1.0"]
    assert len(every) == len(problems) + 3  # each of the 3 ablation runs gains its 0.5


def test_the_mechanism_study_has_three_starts_and_every_run_at_four_fractions():
    jobs = Jobs(resolved("mechanism-study.yaml"))
    runs = jobs.run_keys()
    assert {r["model"] for r in runs} == {f"tiny-preamble-{i}" for i in range(3)}
    assert len(runs) == 3 * (5 * 2 + 5)  # main: 5 algorithms x 2 seeds; controls: 5 x seed 0
    per_run = [p for p in jobs.eval_problems() if "algo=gspo_tokmean/model=tiny-preamble-1/" in p]
    assert [p.split("frac=")[1].split("/")[0] for p in per_run] == ["0.25", "0.5", "0.75", "1.0"]


def test_the_layout_keys_an_experiments_logs_like_its_outputs():
    assert (Layout("results").log_dir, Layout("results").bench_dir) == ("logs", "benchmarks")
    study = Layout.of({"results": "results/tiny-study/"})
    assert study.log_dir == "logs/tiny-study" and study.agg_dir == "results/tiny-study/aggregate"
    assert Layout("elsewhere/x").log_dir == "logs/elsewhere/x"


def test_the_workflow_declares_every_table_and_figure_the_commands_write():
    """The rules' outputs are the layout's names; `repro tables` writes one file pair per entry
    of repro.reporting's TABLES (and paper), `repro figures` one per entry of its FIGURES. A
    name missing from the layout is a file Snakemake neither checks nor removes on failure. The
    OPTIONAL tables (a study's dated secondary reading, written only where its predictions file
    registers one) are the exception: a declared output that most runs never write would fail
    every other run."""
    from repro.reporting import figures, tables

    assert set(tables.TABLES) >= tables.OPTIONAL
    assert [*(n for n in tables.TABLES if n not in tables.OPTIONAL), "paper"] == TABLES
    assert list(figures.FIGURES) == FIGURES


def test_table_and_figure_files_are_in_snakemakes_expand_order():
    layout = Layout("results")
    assert layout.table_files() == expand("results/tables/{name}.{ext}", name=TABLES,
                                          ext=["md", "tex"])
    assert layout.figure_files() == expand("results/figures/{name}.{ext}", name=FIGURES,
                                           ext=["pdf", "png"])


@pytest.mark.parametrize("change,message", [
    ({"ablations": {"group_sizes": [3]}}, "config: ablations.group_sizes has 3"),
    ({"models": {"tiny": {"source": "sft", "base": "tiny", "sft": {}}}},
     "config: models.tiny.base forms a cycle through 'tiny'"),
    ({"models": {"tiny": {"source": "sft", "base": "nowhere", "sft": {}}}},
     "config: models.tiny.base names 'nowhere', not an sft entry"),
    ({"train": {"lr": -1.0}}, "TrainConfig.lr"),
    ({"algorithms": {"gspo": {"algorithm": "gspo", "train": {"lr": 1.0}}}},
     "config algorithms.gspo.train: lr is shared by every run (compute matching)"),
    ({"algorithms": {"gspo": {"algorithm": "gspo", "train": {"epochs": 0}}}},
     "config: run algo=gspo/model=tiny/group_size=8/seed=0: TrainConfig.epochs"),
    ({"algorithms": {"gspo": {"algorithm": "gspo", "source": "nope"}}},
     "config algorithms.gspo.source: unknown source 'nope'; known: ['bf16', "),
    ({"algorithms": {"gspo": {"algorithm": "gspo", "source": "hot_sampler"}},
      "train": {"engine": "trl"}},
     "config algorithms.gspo.source: 'hot_sampler' is not supported by train.engine 'trl'"),
    ({"algorithms": {"gspo": {"algorithm": "gspo", "source": "reuse", "train": {"epochs": 3}}}},
     "config algorithms.gspo: sets both source and train")])
def test_a_bad_value_is_refused_naming_its_key(change, message):
    jobs = Jobs(resolved(**change))
    with pytest.raises(ValueError, match=re.escape(message)):
        jobs.check()
        jobs.check_run_configs()


@pytest.mark.parametrize("name", source_names())
def test_a_named_source_is_its_registered_knobs(name):
    """`algorithms.LABEL.source` resolves to the same runs as its knobs spelled as `train:`."""
    knobs = dict(get_source(name).knobs)
    configs = []
    for entry in ({"algorithm": "gspo", "source": name}, {"algorithm": "gspo", "train": knobs}):
        config = resolved()  # P = 8: every source's K divides it
        config["algorithms"]["gspo_src"] = entry
        config["run"]["algorithms"] = ["gspo_src"]
        jobs = Jobs(config)
        jobs.check()
        configs.append([jobs.run_config(SimpleNamespace(**r)) for r in jobs.run_keys()])
    assert configs[0] == configs[1]
    assert {k: configs[0][0][k] for k in knobs} == knobs


def test_the_planner_sizes_the_knobs_of_each_named_source():
    """`repro plan` sizes a label's own K from its source's knobs, as its runs get them."""
    from repro.plan import source_overrides

    config = resolved("offpolicy-study.yaml")
    found = {tuple(sorted(block.items())) for block in source_overrides(config)}
    assert found == {tuple(sorted(get_source(name).knobs.items()))
                     for name in ("reuse", "stale", "bf16")}


def test_a_labels_source_reaches_its_runs_alone():
    """`algorithms.LABEL.train` (an off-policy source) changes that label's runs and nothing
    else: every other field of its config equals the plain label's."""
    source = {"minibatches": 2, "epochs": 2, "sampler_dtype": "bfloat16", "staleness": 2}
    config = resolved("smoke.yaml")
    config["algorithms"]["gspo_reuse"] = {"algorithm": "gspo", "train": source}
    config["run"]["algorithms"] = ["gspo", "gspo_reuse"]
    jobs = Jobs(config)
    jobs.check()
    configs = {r["algo"]: jobs.run_config(SimpleNamespace(**r)) for r in jobs.run_keys()
               if r["main"] and r["seed"] == 0}
    plain, reused = configs["gspo"], configs["gspo_reuse"]
    assert {k: reused[k] for k in source} == source
    assert {k: plain[k] for k in source} != source
    assert {k: v for k, v in reused.items() if k not in source} == {
        k: v for k, v in plain.items() if k not in source}


def test_a_selection_outside_its_catalogue_is_refused_in_one_line(capsys):
    config = resolved(run={"algorithms": ["gspo", "nope"]})
    with pytest.raises(SystemExit) as exit_:
        at_parse_time(check_selections, config)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("config: run.algorithms names ['nope']"), err


def test_a_schema_report_is_cut_to_its_key_and_reason():
    report = ("Error validating config file.\nValidationError: 0 is less than the minimum of 1\n"
              "\nFailed validating 'minimum' in schema\n\nOn instance['eval']['k']:\n    0\n")
    assert schema_refusal(report) == "config ['eval']['k']: 0 is less than the minimum of 1"


# What every Snakemake parse runs (rules/common.smk): its imports, read from the file so a new one
# is covered, then its parse-time calls on the default config. Snakemake parses once per
# invocation and once more in every job process, so a heavy import here costs seconds each time.
_PARSE = """
import ast, sys
from pathlib import Path

root = Path(sys.argv[1])
tree = ast.parse((root / "rules" / "common.smk").read_text())
imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
exec(compile(ast.Module(imports, type_ignores=[]), "common.smk", "exec"))
from repro.plan import load_config

config = load_config(root / "config" / "config.yaml", [root / p for p in sys.argv[2:3] if p])
check_selections(config)
jobs = Jobs(config)
jobs.check()
plan_jobs(config)
jobs.check_run_configs()
job_digests(root)
print(" ".join(sorted(name for name in sys.argv[3:] if name in sys.modules)))
"""


@pytest.mark.parametrize("preset", ["", "config/presets/paper-qwen3-32b.yaml"])
def test_a_workflow_parse_imports_neither_torch_nor_transformers(preset):
    """The parse checks `models.*.sft` blocks against SFTConfig (repro.training.sft_config), not
    the trainer module, which loads transformers, accelerate and much of torch (~6 s a parse).
    A paper preset's parse also plans GPU jobs: the planner reads TRL's `vllm_mode` default only
    when the preset leaves it out (TRL's config module loads transformers' Trainer and peft), and
    the vLLM engine's defaults without the HF sampler. Nor torch (~3 s, a third of a parse):
    the objectives registry, which the `train:` and `algorithms` checks read, and the checkpoint
    module import it inside the functions that compute (repro/objectives/__init__.py)."""
    heavy = ["torch", "transformers", "accelerate", "trl", "vllm", "datasets"]
    done = subprocess.run([sys.executable, "-c", _PARSE, str(ROOT), preset, *heavy], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_the_main_comparison_preset_is_the_from_start_presets_main_grid():
    """config/presets/main-comparison.yaml runs the main runs of from-committed-start.yaml (the
    default's RL phase) and nothing else: the same resolved configs, start, evaluations and eval
    options, in another results folder. Its numbers are those runs' (docs/results.md)."""
    part = Jobs(resolved("main-comparison.yaml"))
    whole = Jobs(resolved("from-committed-start.yaml"))
    runs = part.run_keys()
    assert runs == [r for r in whole.run_keys() if r["main"]] and len(runs) == 15
    assert len(whole.run_keys()) > len(runs)  # the ablations are what it leaves out
    for run in runs:
        wildcards = SimpleNamespace(**{k: run[k] for k in ("algo", "model", "group_size", "seed")})
        assert part.run_config(wildcards) == whole.run_config(wildcards)
    assert part.config["experiment"] == whole.config["experiment"]
    assert part.config["report"] == whole.config["report"]

    def relative(paths: list[str], jobs: Jobs) -> list[str]:
        root = jobs.config["results"] + "/"
        assert all(p.startswith(root) for p in paths), paths
        return [p.removeprefix(root) for p in paths]

    for run in runs:  # the same evaluations, each in its own results folder
        for frac in part.fractions:
            wildcards = SimpleNamespace(frac=frac, **{k: run[k] for k in ("algo", "model",
                                                                          "group_size", "seed")})
            mine, theirs = part.eval_config(wildcards), whole.eval_config(wildcards)
            assert (relative([mine.pop("out"), mine.pop("model")], part)
                    == relative([theirs.pop("out"), theirs.pop("model")], whole))
            assert mine == theirs

    assert relative(part.eval_problems(), part) == relative(whole.eval_problems(main_only=True),
                                                           whole)


def _eval_wildcards(jobs: Jobs) -> SimpleNamespace:
    run = jobs.run_keys()[0]
    return SimpleNamespace(frac=jobs.final, **{k: run[k] for k in ("algo", "model", "group_size",
                                                                  "seed")})


def test_an_evaluations_resolved_config_is_config_eval_and_its_job():
    """Each evaluation's EvalConfig (its resolved.yaml, what `repro eval --config` reads) holds
    config `eval` and the job's own values; an `eval.sampling` null leaves the benchmark's own."""
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.05,
                "max_new_tokens": None}
    jobs = Jobs(resolved(eval={"sampling": sampling, "k": 3, "limit": 7}))
    wildcards = _eval_wildcards(jobs)
    cfg = EvalConfig(**jobs.eval_config(wildcards))
    run_dir = jobs.run_dir(vars(wildcards))
    assert cfg.model == f"{run_dir}/policy/frac={jobs.final}"
    assert str(cfg.out) == jobs.layout.eval_dir.format(**vars(wildcards))
    assert (cfg.checkpoint, cfg.seed, cfg.workers) == (f"frac={jobs.final}", wildcards.seed,
                                                       EVAL_THREADS)
    assert cfg.benchmarks == jobs.config["eval"]["benchmarks"] and cfg.split
    assert (cfg.k, cfg.limit, cfg.engine, cfg.batch_size) == (3, 7, "auto", 32)
    assert cfg.sampling.given() == {k: v for k, v in sampling.items() if v is not None}
    start = EvalConfig(**jobs.init_eval_config(SimpleNamespace(model="tiny", seed=4)))
    assert (start.model, start.checkpoint, start.seed) == (jobs.start_policy("tiny"), "init", 4)
    assert str(start.out) == jobs.layout.init_dir.format(model="tiny", seed=4)


def test_the_paper_presets_evaluations_run_vllm_at_avg_at_32_with_the_lock(tmp_path):
    lock = tmp_path / "data.lock.yaml"
    lock.write_text("datasets: {}\ndata_dir: null\n")
    jobs = Jobs(resolved("paper-qwen3-32b.yaml") | {"data_lock": str(lock)})
    cfg = jobs.eval_config(_eval_wildcards(jobs))
    assert (cfg["engine"], cfg["k"], cfg["lock"]) == ("vllm", 32, str(lock))
    assert cfg["benchmarks"] == ["aime25", "hmmt25", "livecodebench"]
    assert "max_new_tokens" not in cfg["sampling"]  # each benchmark's own budget, not 64
    assert Jobs(resolved("paper-qwen3-32b.yaml") | {"data_lock": str(tmp_path / "none")}
                ).eval_config(_eval_wildcards(jobs))["lock"] is None


def test_each_runs_objective_is_built_once_in_the_parse_process(monkeypatch):
    """The parse-time check and the run_config rule's params read one TrainConfig per run, so
    its objective (a DFPOConfig for DFPO's labels) is built once per run in this process."""
    from repro.training import config as config_module

    built: list[tuple] = []
    real = config_module.make_config
    monkeypatch.setattr(config_module, "make_config",
                        lambda *a, **kw: built.append(a) or real(*a, **kw))
    jobs = Jobs(resolved())
    jobs.check_run_configs()
    keys = ("algo", "model", "group_size", "seed")
    for run in jobs.run_keys():  # the rule's params, once or more per job
        jobs.run_config(SimpleNamespace(**{k: run[k] for k in keys}))
    assert len(built) == len({tuple(run[k] for k in keys) for run in jobs.run_keys()}) > 0
