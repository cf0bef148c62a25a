"""`repro eval` fail-fast checks and plumbing: every sampling key reaches the engine, benchmarks
and data are validated before a model loads, bad values are one-line errors, grader failures
are counted, progress is line-based off a terminal."""

from __future__ import annotations

import io

import pytest
from typer.testing import CliRunner

from repro.benchmarks import benchmark_names, get_benchmark
from repro.cli import app
from repro.evaluation import runner
from repro.generation.base import Completion
from repro.graders.base import GRADER_TIMEOUT, PASS, Grade
from repro.models import TinyModelConfig, build_tiny
from repro.progress import LineProgress, progress
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, read_table


class RecordingEngine:
    """Remembers the sampling it was given; answers every sample with a boxed 0."""

    name = "recording"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls = []

    def generate(self, prompts, sampling, *, keys=None, return_logprobs=False):
        self.calls.append((sampling, keys))
        done = Completion(text="\\boxed{0}", token_ids=(1,), finish_reason="stop")
        return [[done] * sampling.n for _ in prompts]


@pytest.fixture(scope="module")
def tok():
    return build_tiny(TinyModelConfig())[1]


@pytest.fixture
def engine(tok, monkeypatch):
    made = RecordingEngine(tok)
    monkeypatch.setattr("repro.generation.factory.make_engine", lambda *a, **kw: made)
    return made


def invoke(*args: str):
    return CliRunner().invoke(app, ["eval", "--model", "no/such-model", *args])


def test_every_sampling_option_reaches_the_engine_and_the_results(engine, tmp_path):
    result = invoke("--benchmark", "synth-aime", "--out", str(tmp_path), "--k", "2", "--limit", "3",
                    "--temperature", "0.7", "--top-p", "0.9", "--top-k", "5", "--min-p", "0.05",
                    "--max-new-tokens", "7")
    assert result.exit_code == 0, result.output
    (sampling, keys), = engine.calls
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p,
            sampling.max_new_tokens, sampling.n) == (0.7, 0.9, 5, 0.05, 7, 2)
    assert keys == [f"synth-aime/{row['problem_id']}" for row in
                    read_table(tmp_path / "problems.parquet", EVAL_PROBLEMS).to_pylist()]
    row = read_table(tmp_path / "samples.parquet", EVAL_SAMPLES).to_pylist()[0]
    assert (row["top_p"], row["top_k"], row["min_p"]) == (0.9, 5, 0.05)
    assert row["grader_compat"] == "default"


@pytest.mark.parametrize("name", [n for n in benchmark_names()
                                  if get_benchmark(n).source == "synthetic"])
def test_every_synthetic_benchmark_is_evaluated_end_to_end(engine, tmp_path, name):
    """Each synthetic spec of the registry (a new one too: no list to extend) through `repro
    eval`: prompts, its grader, both Parquet files, one row per problem."""
    result = invoke("--benchmark", name, "--out", str(tmp_path), "--k", "1", "--limit", "2",
                    "--workers", "1")
    assert result.exit_code == 0, result.output
    rows = read_table(tmp_path / "problems.parquet", EVAL_PROBLEMS).to_pylist()
    assert [(r["benchmark"], r["n"]) for r in rows] == [(name, 1)] * 2
    assert read_table(tmp_path / "samples.parquet", EVAL_SAMPLES).num_rows == 2
    (sampling, keys), = engine.calls
    assert keys == [f"{name}/{r['problem_id']}" for r in rows] and sampling.n == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--k", "0"], "repro eval: --k must be >= 1, got 0"),
    (["--limit", "0"], "repro eval: --limit must be >= 1, got 0"),
    (["--batch-size", "0"], "repro eval: --batch-size must be >= 1, got 0"),
    (["--top-p", "1.5"], "SamplingConfig.top_p must be in (0, 1], got 1.5"),
    (["--benchmark", "nope"], "unknown benchmark 'nope'"),
    (["--benchmark", "synth-aime"], "--benchmark synth-aime is given twice"),
])
def test_bad_values_are_one_line_errors_before_any_model(engine, tmp_path, args, message):
    result = invoke("--benchmark", "synth-aime", "--out", str(tmp_path / "o"), "--split", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert engine.calls == [] and not (tmp_path / "o").exists()


def test_a_missing_third_dataset_fails_before_the_model_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the data were checked")

    monkeypatch.setattr("repro.generation.factory.make_engine", no_model)
    result = invoke("--benchmark", "synth-aime", "--benchmark", "synth-hmmt", "--benchmark",
                    "hmmt25", "--split", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    assert "MathArena/hmmt_feb_2025" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("lr=abc", "TrainConfig.lr must be float, got 'abc'"),
    ("steps=2.5", "TrainConfig.steps must be int, got 2.5"),
])
def test_train_bad_values_are_one_line_errors(tmp_path, override, message):
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path), "model=x", override])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_grader_failures_are_counted_per_problem(engine, tmp_path, monkeypatch):
    """A timeout scores 0 like a wrong answer, but the problems table counts it apart."""
    class FlakyGrader:
        def grade_many(self, items):
            return [Grade(GRADER_TIMEOUT, "slow") if i % 2 else Grade(PASS)
                    for i in range(len(items))]

    monkeypatch.setattr(runner, "make_grader", lambda spec, cfg: (FlakyGrader(), "none"))
    result = invoke("--benchmark", "synth-aime", "--out", str(tmp_path), "--k", "2", "--limit", "3")
    assert result.exit_code == 0, result.output
    rows = read_table(tmp_path / "problems.parquet", EVAL_PROBLEMS).to_pylist()
    assert [(r["c"], r["grader_errors"]) for r in rows] == [(1, 1)] * 3
    assert "3 grader errors/timeouts" in result.output


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    log = io.StringIO()
    bar = progress(10, "grade aime25", "problem", stream=log)
    assert isinstance(bar, LineProgress)
    bar.every = 0.0  # a line per update (the default waits 30 s between lines)
    with bar:
        for _ in range(10):
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 11
    assert lines[-1].startswith("grade aime25: 10/10 problem (100%)")
    with progress(3, "x", stream=Terminal()) as tty_bar:
        assert not isinstance(tty_bar, LineProgress)


def test_data_pin_writes_a_lock_that_eval_reads_and_enforces(engine, tmp_path):
    """Offline (files already mirrored): `repro data pin` hashes them into the lock; `repro
    eval --lock` finds the mirror through it, and refuses a file whose bytes changed."""
    from fixtures_hub import AIME_ID, MATHARENA_FILE, write_aime

    from repro.benchmarks.pins import read_lock

    write_aime(tmp_path / "hub", commit="a" * 40)
    lock = tmp_path / "data.lock.yaml"
    pinned = CliRunner().invoke(app, ["data", "pin", "--benchmark", "aime25", "--data-dir",
                                      str(tmp_path / "hub"), "--lock", str(lock)])
    assert pinned.exit_code == 0, pinned.output
    entry = read_lock(lock)["datasets"][AIME_ID]
    assert entry["resolved_revision"] == "a" * 40 and list(entry["sha256"]) == [MATHARENA_FILE]
    assert read_lock(lock)["data_dir"] == tmp_path / "hub"
    ok = invoke("--benchmark", "aime25", "--lock", str(lock), "--out", str(tmp_path / "ok"))
    assert ok.exit_code == 0, ok.output
    (tmp_path / "hub" / AIME_ID / MATHARENA_FILE).write_bytes(b"changed")
    bad = invoke("--benchmark", "aime25", "--lock", str(lock), "--out", str(tmp_path / "bad"))
    assert bad.exit_code == 2 and "does not match the pinned sha256" in bad.output, bad.output
    assert not (tmp_path / "bad").exists()


def test_a_synthetic_benchmark_has_nothing_to_pin(tmp_path):
    result = CliRunner().invoke(app, ["data", "pin", "--benchmark", "synth-aime", "--data-dir",
                                      str(tmp_path), "--lock", str(tmp_path / "l.yaml")])
    assert result.exit_code == 2 and "no files to pin" in result.output
