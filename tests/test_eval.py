"""`repro eval` end to end: tiny model + synthetic benchmark -> Parquet; scripted engines check
that the right completions are counted correct; offline real benchmark -> the clear error."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from repro.benchmarks import build_messages, get_benchmark, load_problems
from repro.cli import app
from repro.evaluation.config import EvalConfig
from repro.evaluation.runner import run_eval
from repro.generation.base import Completion
from repro.models import TinyModelConfig, build_tiny
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, read_table
from repro.tasks import synthetic_demonstrations


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(TinyModelConfig(), path)
    return path


def test_cli_eval_tiny_model_on_synth_aime(tiny_dir, tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--model", str(tiny_dir), "--benchmark", "synth-aime", "--out", str(out),
        "--k", "2", "--limit", "3", "--max-new-tokens", "16", "--engine", "hf",
    ])
    assert result.exit_code == 0, result.output
    samples = read_table(out / "samples.parquet", EVAL_SAMPLES)
    problems = read_table(out / "problems.parquet", EVAL_PROBLEMS)
    assert samples.num_rows == 6 and problems.num_rows == 3
    row = samples.slice(0, 1).to_pylist()[0]
    assert row["benchmark"] == "synth-aime" and row["k"] == 2 and row["engine"] == "hf"
    assert row["max_new_tokens"] == 16 and row["sandbox_mode"] == "none"
    assert row["finish_reason"] in ("stop", "length")
    assert len(row["revision_hash"]) == 64 and len(row["problem_hash"]) == 64
    assert b"provenance" in pq.read_schema(out / "samples.parquet").metadata[b"config"]


def test_an_evaluation_reruns_from_its_resolved_yaml(tiny_dir, tmp_path):
    """`repro eval` writes its whole config as OUT/resolved.yaml (defaults included); `repro eval
    --config` of that file alone is the same evaluation: the same config, the same rows."""
    first = tmp_path / "first"
    args = ["eval", "--model", str(tiny_dir), "--benchmark", "synth-aime", "--benchmark",
            "synth-hmmt", "--split", "--out", str(first), "--k", "2", "--limit", "2",
            "--max-new-tokens", "8", "--engine", "hf", "--seed", "5", "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((first / "resolved.yaml").read_text())
    assert written == EvalConfig(model=str(tiny_dir), benchmarks=["synth-aime", "synth-hmmt"],
                                 split=True, out=first, k=2, limit=2, engine="hf", seed=5,
                                 workers=1, sampling={"max_new_tokens": 8}).to_dict()
    again = tmp_path / "again"
    (again / "in").mkdir(parents=True)
    moved = again / "in" / "resolved.yaml"  # a copy elsewhere: the run overwrites its own first
    moved.write_text((first / "resolved.yaml").read_text())
    result = CliRunner().invoke(app, ["eval", "--config", str(moved), "--out", str(again)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((again / "resolved.yaml").read_text()) == written | {"out": str(again)}
    for name in ("synth-aime", "synth-hmmt"):
        for table, schema in (("samples", EVAL_SAMPLES), ("problems", EVAL_PROBLEMS)):
            rows = [read_table(out / f"benchmark={name}" / f"{table}.parquet", schema)
                    .to_pylist() for out in (first, again)]
            assert rows[0] == rows[1] and rows[0], (name, table)


@pytest.mark.parametrize("text,named", [
    ("k: 0\n", "--k must be >= 1"),
    ("benchmark: synth-aime\n", "unknown EvalConfig key(s) ['benchmark']"),
    ("batch_size: many\n", "EvalConfig.batch_size must be int"),
    ("- a list\n", "must be a YAML mapping"),
])
def test_a_bad_eval_config_file_is_one_line_naming_it(tmp_path, text, named):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["eval", "--config", str(path), "--model", "m",
                                      "--benchmark", "synth-aime", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and named in result.output and "Traceback" not in result.output
    assert str(path) in result.output or "--k" in named
    assert not (tmp_path / "o").exists()


class ScriptedEngine:
    """Answers sample 0 of each prompt with the reference demonstration, sample 1 wrongly."""

    name = "scripted"

    def __init__(self, tokenizer, answers: dict[str, str]):
        self.tokenizer = tokenizer
        self.answers = answers

    def generate(self, prompts, sampling, *, keys=None, return_logprobs=False):
        rows = []
        for prompt in prompts:
            good = next(a for key, a in self.answers.items() if key in prompt)
            rows.append([
                Completion(text=good, token_ids=(1, 2), finish_reason="stop"),
                Completion(text="<think>no idea</think>\nThe answer is \\boxed{1000}.",
                           token_ids=(1,), finish_reason="length"),
            ][: sampling.n])
        return rows


def test_scripted_math_completions_are_graded(tiny_dir, tmp_path):
    spec = get_benchmark("synth-aime")
    problems, _ = load_problems(spec, limit=4)
    demos = synthetic_demonstrations("synth-aime", "eval", 30, spec.seed)
    answers = {}
    for demo in demos:
        question = demo["messages"][-2]["content"].split("\n")[0]
        answers[question] = demo["messages"][-1]["content"]
    _, tok = build_tiny(TinyModelConfig())
    cfg = EvalConfig(model="scripted", benchmarks=["synth-aime"], out=tmp_path, k=2,
                     limit=4)
    run_eval(cfg, engine=ScriptedEngine(tok, answers))
    table = read_table(tmp_path / "problems.parquet", EVAL_PROBLEMS).to_pylist()
    assert [r["c"] for r in table] == [1, 1, 1, 1]
    assert all(r["avg"] == 0.5 and r["truncated_frac"] == 0.5 for r in table)
    assert all(r["pass_at_k"] == 1.0 for r in table)
    samples = read_table(tmp_path / "samples.parquet", EVAL_SAMPLES).to_pylist()
    assert [s["verdict"] for s in samples[:2]] == ["pass", "wrong_answer"]
    assert problems[0].question in build_messages(spec, problems[0])[-1]["content"]


def test_offline_real_benchmark_without_data_is_a_clear_error(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    result = CliRunner().invoke(app, [
        "eval", "--model", str(tiny_dir), "--benchmark", "aime25", "--out", str(tmp_path / "o"),
    ])
    assert result.exit_code == 2
    assert "MathArena/aime_2025" in result.output and "download" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_synth_lcb_reference_solutions_pass_in_the_sandbox(tmp_path):
    """Integration: the synthetic code tasks' demonstrations pass the real LCB grader in bwrap,
    and a wrong program fails with a recorded verdict."""
    from repro.graders.code import CodeGrader
    from repro.sandbox import Sandbox

    spec = get_benchmark("synth-lcb")
    problems, _ = load_problems(spec)
    demos = {d["question_id"]: d
             for d in synthetic_demonstrations("synth-lcb", "eval", 30, spec.seed)}
    sandbox = Sandbox()
    sandbox.check()
    grader = CodeGrader(sandbox, workers=2)
    items = [(p, demos[p.problem_id]["messages"][-1]["content"]) for p in problems]
    items.append((problems[0], "```python\nprint('nope')\n```"))
    grades = grader.grade_many(items)
    assert [g.verdict for g in grades[:-1]] == ["pass"] * len(problems)
    assert grades[-1].verdict in ("wrong_answer", "runtime_error")
    assert {p.tests.fn_name is None for p in problems} == {True, False}  # both test types
