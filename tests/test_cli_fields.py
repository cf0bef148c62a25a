"""Commands whose options are generated from a config dataclass (repro/cli_fields.py): `--help`
lists every field with its help, and a value given on the command line reaches the config."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repro.bench.options import (
    CoherenceConfig,
    LogprobsBenchConfig,
    ObjectivesBenchConfig,
    PreflightConfig,
)
from repro.bench.sandbox import SandboxBenchConfig
from repro.cli import app
from repro.cli_fields import CONFIG_ATTR, config_options
from repro.evaluation.config import EvalConfig
from repro.reporting.study import Study
from repro.theory.config import TheoryConfig

ROOT = Path(__file__).resolve().parents[1]

# Commands the issue names; each must stay generated (the map itself is read from the app).
GENERATED = {"eval", "theory", "aggregate", "bench objectives", "bench sandbox", "bench logprobs",
             "bench gpu", "bench coherence"}


def generated_commands() -> dict[str, type]:
    """Spelled command name -> the dataclass its options were generated from."""
    out = {}
    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():
        for sub_name, sub in [(name, cmd), *((f"{name} {k}", v)
                                            for k, v in getattr(cmd, "commands", {}).items())]:
            cls = getattr(sub.callback, CONFIG_ATTR, None)
            if cls is not None:
                out[sub_name] = cls
    return out


def words(text: str) -> str:
    """Help as words: Rich's box characters and line wrapping removed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_the_issue_commands_are_generated():
    missing = GENERATED - set(generated_commands())
    assert not missing, sorted(missing)


@pytest.mark.parametrize("command", sorted(GENERATED))
def test_help_lists_every_field_with_its_help(command):
    cls = generated_commands()[command]
    result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = words(result.output)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text or f"{f.name}:" in text, (command, f.name)
        assert words(f.metadata["help"]) in text, (command, f.name, f.metadata["help"])


def captured(monkeypatch, module: str, name: str, result=None) -> list:
    """Replace `module.name` by a recorder of its arguments (the CLI imports it at call time)."""
    calls: list = []
    monkeypatch.setattr(f"{module}.{name}", lambda *args, **kw: calls.append(args) or result)
    return calls


def invoke(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


def test_theory_options_reach_the_config(monkeypatch, tmp_path):
    calls = captured(monkeypatch, "repro.theory.experiment", "run_theory")
    invoke("theory", "--out", str(tmp_path), "--n-seeds", "2", "--lr", "0.5")
    assert calls == [(TheoryConfig(n_seeds=2, lr=0.5), tmp_path)]


def test_eval_options_reach_the_config_and_sampling(monkeypatch, tmp_path):
    calls = captured(monkeypatch, "repro.evaluation.runner", "run_eval")
    invoke("eval", "--model", "m", "--benchmark", "synth-aime", "--benchmark", "synth-hmmt",
           "--split", "--out", str(tmp_path), "--top-k", "5", "--temperature", "0.6",
           "--unsafe-no-sandbox", "--batch-size", "3")
    want = EvalConfig(model="m", benchmarks=["synth-aime", "synth-hmmt"], split=True,
                      out=tmp_path, batch_size=3, sampling={"top_k": 5, "temperature": 0.6},
                      unsafe_no_sandbox=True)
    assert calls == [(want,)]


def test_eval_options_given_beside_config_override_its_values(monkeypatch, tmp_path):
    """`repro eval --config FILE` takes the file's values; an option given on the command line
    wins, even one spelling its default (--engine auto over the file's hf); a sampling option
    joins the file's sampling key by key."""
    calls = captured(monkeypatch, "repro.evaluation.runner", "run_eval")
    path = tmp_path / "resolved.yaml"
    path.write_text(f"model: m\nbenchmarks: [synth-aime]\nout: {tmp_path}\nengine: hf\nk: 3\n"
                    "sampling: {max_new_tokens: 9, top_k: 4}\n")
    invoke("eval", "--config", str(path), "--engine", "auto", "--top-k", "5")
    want = EvalConfig(model="m", benchmarks=["synth-aime"], out=tmp_path, engine="auto", k=3,
                      sampling={"max_new_tokens": 9, "top_k": 5})
    assert calls == [(want,)]


def test_aggregate_tuple_options_split_on_commas(monkeypatch, tmp_path):
    calls = captured(monkeypatch, "repro.reporting.aggregate", "aggregate", result={})
    log = tmp_path / "train_log.parquet"
    log.touch()
    invoke("aggregate", "--out", str(tmp_path), "--main-algos", "a, b", "--baseline", "a",
           "--group-algos", "", str(log))
    assert calls == [([log], tmp_path, Study(main_algos=("a", "b"), baseline="a", group_algos=()))]


@pytest.mark.parametrize("command,module,run,args,want", [
    ("objectives", "repro.bench.objectives", "run_objectives_bench",
     ["--transform-groups", "8,16", "--threads", "1"],
     ObjectivesBenchConfig(transform_groups=(8, 16), threads=1)),
    ("sandbox", "repro.bench.sandbox", "run_sandbox_bench", ["--typical-n", "5"],
     SandboxBenchConfig(typical_n=5)),
    ("logprobs", "repro.bench.logprobs", "run_logprobs_bench", ["--dtype", "bfloat16"],
     LogprobsBenchConfig(dtype="bfloat16")),
    ("coherence", "repro.bench.coherence", "run_coherence_bench",
     ["--model", "m", "--same-prompts", "--batches", "3"],
     CoherenceConfig(model="m", same_prompts=True, batches=3)),
])
def test_bench_options_reach_the_config(monkeypatch, command, module, run, args, want):
    calls = captured(monkeypatch, module, run)
    invoke("bench", command, *args)
    assert calls[0][0] == want


def test_bench_gpu_budgets_and_sizes_reach_the_resolved_config(monkeypatch, tmp_path):
    report = {"shapes": {}, "failures": [], "seconds": 0.0, "device": "cpu"}
    calls = captured(monkeypatch, "repro.bench.gpu", "run_preflight", result=report)
    invoke("bench", "gpu", "--tiny", "--out", str(tmp_path), "--budgets", "startup=5",
           "--group-size", "2", "--shapes", "tiny-next")
    cfg = calls[0][0]
    assert cfg == PreflightConfig(out=tmp_path, tiny=True, budgets={"startup": 5}, group_size=2,
                                  shapes=("tiny-next",))
    resolved = cfg.resolved()  # a given size wins over --tiny's; the rest are --tiny's
    assert (resolved.group_size, resolved.minibatches, resolved.budgets["startup"]) == (2, 2, 5)


@pytest.mark.parametrize("args,named", [
    (["bench", "objectives", "--transform-groups", "8,x"], "--transform-groups"),
    (["bench", "gpu", "--tiny", "--budgets", "startup=soon"], "PreflightConfig.budgets"),
    (["bench", "gpu", "--tiny", "--budgets", "nap=5"], "nap"),
    (["bench", "gpu", "--tiny", "--shapes", "qwen3-32b-4l"], "PreflightConfig.shapes"),
    (["theory", "--steps", "0"], "steps"),
])
def test_bad_values_are_refused_naming_the_option(args, named):
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert named in result.output


def test_a_field_without_help_or_cli_spelling_fails_at_definition():
    @dataclass
    class NoHelp:
        x: int = 1

    @dataclass
    class Odd:
        x: set[int] = field(default_factory=set, metadata={"help": "A set."})

    for cls in (NoHelp, Odd):
        with pytest.raises(TypeError, match="x"):
            config_options(cls)(lambda settings: None)


def test_the_command_own_options_cannot_shadow_a_field():
    def command(settings: dict, seed: int = 0) -> None: ...

    with pytest.raises(TypeError, match="seed"):
        config_options(TheoryConfig)(command)


def test_aggregate_takes_the_pipeline_spelling(monkeypatch, tmp_path):
    """rules/common.smk's study options, quoted lists included, parse as before."""
    calls = captured(monkeypatch, "repro.reporting.aggregate", "aggregate", result={})
    log = tmp_path / "x.parquet"
    log.touch()
    invoke("aggregate", "--out", str(tmp_path), "--experiment", "tiny", "--baseline", "gspo",
           "--proposed", "dfpo_min", "--main-algos", "grpo,gspo,dfpo_min", "--main-group-size", "4",
           "--ablation-algos", "dfpo_global", "--group-algos", "gspo,dfpo_min", "--threshold",
           "0.35", "--smooth-window", "5", "--final-frac", "1.0", str(log))
    assert calls[0][2] == Study(main_algos=("grpo", "gspo", "dfpo_min"), main_group_size=4,
                                ablation_algos=("dfpo_global",), group_algos=("gspo", "dfpo_min"))


_REPORT_IMPORTS = """
import sys

import repro.cli  # every subcommand's options are built here, at start-up
import repro.reporting.aggregate, repro.reporting.compare, repro.reporting.figures
import repro.reporting.paper_numbers, repro.reporting.tables  # what the report commands load

print(*sorted(name for name in sys.argv[1:] if name in sys.modules))
"""


def test_the_cli_and_the_report_commands_start_without_torch():
    """`repro tables`, `figures`, `aggregate`, `compare`, `paper-reference` and `--help` never
    touch a tensor, yet imported torch (~2.5 s a process) through the bench and theory option
    dataclasses (now repro/bench/options.py, repro/theory/config.py) and the diagnostics
    package (its names now load on first use). Fails on the code before that split: ['torch']."""
    heavy = ["torch", "transformers", "accelerate", "trl", "vllm", "datasets"]
    done = subprocess.run([sys.executable, "-c", _REPORT_IMPORTS, *heavy], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == []
