"""The engines are read from their modules' `ENGINE = {...}` literals (repro.training.trainers),
never imported: a declaration is found in any module of the folder, and a bad one is refused in
one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.training.trainers import DECLARED, TRAINERS, declared_engines

GOOD = ('ENGINE = {"name": "%s", "trainer": "go", "launch": "python", "env": "cpu",\n'
        '          "help": "one line"}\n\n\ndef go(cfg, out, **kw):\n    return out\n')


def folder(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_every_declaring_module_is_an_engine_and_no_other(tmp_path):
    found = declared_engines(folder(tmp_path, {
        "b.py": GOOD % "second", "a.py": GOOD % "first", "helper.py": "X = 1\n",
        "uses.py": "import torch  # never imported by the reader\n"}))
    assert list(found) == ["first", "second"]  # file-name order
    assert found["first"].import_path == "repro.engines.a:go"


def test_the_real_engines_are_the_native_loop_and_trl():
    assert TRAINERS == {"native": "repro.engines.native:train_native",
                        "trl": "repro.engines.trl:train_trl"}
    assert (DECLARED["native"].launch, DECLARED["trl"].launch) == ("python", "accelerate")
    assert (DECLARED["native"].env, DECLARED["trl"].env) == ("cpu", "gpu")


@pytest.mark.parametrize("text,says", [
    ('ENGINE = {"name": "x"}\n', r"x\.py: ENGINE keys must be"),
    ('ENGINE = dict(name="x")\n', r"x\.py: ENGINE must be a literal dict"),
    ((GOOD % "x").replace('"python"', '"mpirun"'), r"x\.py: ENGINE\.launch must be one of"),
    ((GOOD % "x").replace('"cpu"', '""'), r"x\.py: ENGINE\.env must be a non-empty string"),
])
def test_a_bad_declaration_is_refused_naming_file_and_key(tmp_path, text, says):
    with pytest.raises(ValueError, match=says):
        declared_engines(folder(tmp_path, {"x.py": text}))


def test_a_name_declared_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"b\.py: ENGINE\.name 'same' is declared twice"):
        declared_engines(folder(tmp_path, {"a.py": GOOD % "same", "b.py": GOOD % "same"}))
