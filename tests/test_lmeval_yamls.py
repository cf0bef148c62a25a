"""The lm-eval task YAMLs are the specs' output: each committed file equals what
`python -m repro.lmeval.generate` writes from its benchmark spec (edit a spec, regenerate)."""

from __future__ import annotations

import pytest

from repro.lmeval.generate import HERE, TASK_BENCHMARKS, task_name, task_yaml, write_task_yamls


@pytest.mark.parametrize("benchmark", TASK_BENCHMARKS)
def test_committed_yaml_is_generated_from_the_spec(benchmark):
    committed = (HERE / f"{task_name(benchmark)}.yaml").read_text()
    assert committed == task_yaml(benchmark), "run `python -m repro.lmeval.generate`"


def test_every_task_yaml_has_a_spec():
    assert sorted(p.name for p in HERE.glob("*_repro.yaml")) == sorted(
        f"{task_name(b)}.yaml" for b in TASK_BENCHMARKS)


def test_a_spec_change_shows_in_the_generated_yaml(tmp_path, monkeypatch):
    """Not a copy: the generator reads the spec (here a patched k and temperature)."""
    import dataclasses

    import repro.lmeval.generate as gen

    real = gen.get_benchmark("aime25")
    patched = dataclasses.replace(real, default_k=5, sampling={**real.sampling, "temperature": 0.9})
    monkeypatch.setattr(gen, "get_benchmark", lambda name: patched)
    text = write_task_yamls(tmp_path)[0].read_text()
    assert "repeats: 5\n" in text and "        k: 5\n" in text and "temperature: 0.9\n" in text
