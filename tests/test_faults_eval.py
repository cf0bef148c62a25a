"""An evaluation killed mid-run resumes without regenerating its finished batches and ends with
the same tables as an uninterrupted run."""

from __future__ import annotations

import pytest

from repro.evaluation.cache import CACHE_FILE
from repro.evaluation.config import EvalConfig
from repro.evaluation.runner import run_eval
from repro.generation.hf import HFEngine
from repro.models import TinyModelConfig, build_tiny, load
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, read_table


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(TinyModelConfig(), path)
    return path


class Killed(Exception):
    """Stands in for the job being killed."""


class Counting:
    """An HF engine that counts generate calls and dies at call `die_at` (1-based)."""

    def __init__(self, model_dir, die_at: int | None = None):
        model, tok = load(str(model_dir))
        self.inner = HFEngine(model, tok, batch_size=2)
        self.tokenizer, self.name = tok, self.inner.name
        self.calls, self.die_at = 0, die_at

    def generate(self, prompts, sampling, **kw):
        self.calls += 1
        if self.calls == self.die_at:
            raise Killed
        return self.inner.generate(prompts, sampling, **kw)


def tables(out):
    return (read_table(out / "samples.parquet", EVAL_SAMPLES).to_pylist(),
            read_table(out / "problems.parquet", EVAL_PROBLEMS).to_pylist())


def test_killed_evaluation_resumes_without_regenerating(tiny_dir, tmp_path, capsys):
    def cfg(out):
        return EvalConfig(model=str(tiny_dir), benchmarks=["synth-aime"], out=out, k=2, limit=6,
                          batch_size=2, seed=3, sampling={"max_new_tokens": 8})

    whole = Counting(tiny_dir)
    run_eval(cfg(tmp_path / "whole"), engine=whole)
    assert whole.calls == 3

    with pytest.raises(Killed):
        run_eval(cfg(tmp_path / "killed"), engine=Counting(tiny_dir, die_at=3))
    assert (tmp_path / "killed" / CACHE_FILE).is_file()
    assert not (tmp_path / "killed" / "samples.parquet").exists()
    resumed = Counting(tiny_dir)
    run_eval(cfg(tmp_path / "killed"), engine=resumed)
    assert resumed.calls == 1  # only the batch that was cut off
    assert "resuming synth-aime: 2 finished batch(es)" in capsys.readouterr().out
    assert tables(tmp_path / "killed") == tables(tmp_path / "whole")
    assert not (tmp_path / "killed" / CACHE_FILE).exists()


def test_a_torn_cache_line_or_another_model_is_not_reused(tiny_dir, tmp_path):
    def cfg(model):
        return EvalConfig(model=str(model), benchmarks=["synth-aime"], out=tmp_path / "e", k=2,
                          limit=4, batch_size=2, sampling={"max_new_tokens": 8})

    with pytest.raises(Killed):
        run_eval(cfg(tiny_dir), engine=Counting(tiny_dir, die_at=2))
    cache = tmp_path / "e" / CACHE_FILE
    cache.write_text(cache.read_text() + '{"key": "torn')  # killed while appending
    again = Counting(tiny_dir)
    run_eval(cfg(tiny_dir), engine=again)
    assert again.calls == 1

    with pytest.raises(Killed):
        run_eval(cfg(tiny_dir), engine=Counting(tiny_dir, die_at=2))
    other = tmp_path / "other"
    build_tiny(TinyModelConfig(), other)  # a retrained policy: its samples are its own
    fresh = Counting(other)
    run_eval(cfg(other), engine=fresh)
    assert fresh.calls == 2
