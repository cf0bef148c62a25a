"""Real AIME 2025 / HMMT February 2025 / LiveCodeBench data (../shared/data/real): the loaders
on an offline mirror of them, the math grader on their gold answers in both compat modes, the
LCB record through the restricted unpickler and the sandbox, and `repro eval` end to end."""

from __future__ import annotations

import base64
import pickle
import zlib

import pytest
from real_data import real_rows, write_real_lcb_mirror, write_real_mirror
from typer.testing import CliRunner

from repro.benchmarks import get_benchmark, load_problems
from repro.benchmarks.lcb import decode_tests
from repro.benchmarks.pins import read_lock
from repro.benchmarks.problem import Problem
from repro.cli import app
from repro.graders.base import NO_ANSWER, PASS, WRONG_ANSWER
from repro.graders.math import MathGrader
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, read_table


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    return write_real_mirror(tmp_path_factory.mktemp("real") / "hub")


@pytest.fixture(scope="module")
def graders():
    with MathGrader(workers=2) as default, MathGrader(workers=2, compat="matharena") as arena:
        yield {"default": default, "matharena": arena}


@pytest.mark.parametrize("name", ["aime25", "hmmt25"])
def test_real_mirror_loads_every_problem_with_its_answer(mirror, name):
    rows = real_rows(name)
    problems, provenance = load_problems(get_benchmark(name), data_dir=mirror)
    assert len(problems) == len(rows) == 30
    assert {p.problem_id: p.answer for p in problems} == {str(r["problem_idx"]): r["answer"]
                                                         for r in rows}
    assert provenance["source"] == "data_dir" and len(provenance["revision_hash"]) == 64


# ---- the math grader on the 60 real gold answers -------------------------------------------

def integer_forms(gold: str) -> list[str]:
    """What a strong model writes for an integer answer; every form must pass."""
    return [rf"\boxed{{{gold}}}", rf"$\boxed{{{gold}}}$.", rf"\boxed{{{gold}.}}",
            rf"\boxed{{ {gold} }}", rf"\boxed{{x = {gold}}}", rf"\boxed{{{gold} \text{{ cm}}}}",
            rf"\boxed{{\left({gold}\right)}}", rf"\boxed{{{gold}.0}}"]


def integer_misses(gold: str) -> list[str]:
    """Off by one either way, and the wrong sign."""
    n = int(gold)
    return [rf"\boxed{{{n + 1}}}", rf"\boxed{{{n - 1}}}", rf"\boxed{{{-n}}}"]


# Equivalent forms and near misses of every non-integer HMMT answer, written by hand.
LATEX_FORMS = {
    r"\frac{1}{576}": ([r"\dfrac{1}{576}", "1/576", r"\frac{2}{1152}"],
                       [r"\frac{1}{575}", r"-\frac{1}{576}"]),
    r"\frac{1311}{2017}": ([r"\dfrac{1311}{2017}", r"\left(\frac{1311}{2017}\right)"],
                           [r"\frac{1312}{2017}", r"\frac{2017}{1311}"]),
    r"\frac{9 \sqrt{23}}{23}": ([r"\frac{9}{\sqrt{23}}", r"\frac{9\sqrt{23}}{23}",
                                 r"\dfrac{9}{23}\sqrt{23}"],
                                [r"\frac{9 \sqrt{22}}{23}", r"\frac{9 \sqrt{23}}{22}"]),
    r"1-\frac{2}{\pi}": ([r"-\frac{2}{\pi}+1", r"\frac{\pi - 2}{\pi}", r"1 - \dfrac{2}{\pi}"],
                         [r"1+\frac{2}{\pi}", r"1-\frac{\pi}{2}"]),
    r"\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}": (
        [r"\frac{-1-\sqrt{17}}{2}, \frac{-1+\sqrt{17}}{2}",
         r"\dfrac{-1+\sqrt{17}}{2}, \dfrac{-1-\sqrt{17}}{2}"],
        [r"\frac{-1+\sqrt{17}}{2}", r"\frac{1+\sqrt{17}}{2}, \frac{1-\sqrt{17}}{2}"]),
    r"2^{25} \cdot 26!": ([r"26! \cdot 2^{25}", r"2^{25} \times 26!", r"2^{25}26!"],
                          [r"2^{24} \cdot 26!", r"2^{25} \cdot 25!"]),
    r"\frac{2025}{101}": ([r"\dfrac{2025}{101}", "2025/101", r"20+\frac{5}{101}"],
                          [r"\frac{2025}{100}", r"\frac{2024}{101}"]),
    r"\frac{4}{9}": ([r"\dfrac{4}{9}", r"\frac{8}{18}", "4/9"], [r"\frac{5}{9}", r"\frac{4}{7}"]),
    r"\frac{448}{3}": ([r"\dfrac{448}{3}", r"149+\frac{1}{3}"], [r"\frac{448}{5}", "149"]),
    r"8\sqrt{10}": ([r"\sqrt{640}", r"8 \sqrt{10}", r"2\sqrt{160}"],
                    [r"8\sqrt{11}", r"-8\sqrt{10}", r"10\sqrt{8}"]),
    r"\sqrt{23}-2 \sqrt{3}": ([r"-2\sqrt{3}+\sqrt{23}", r"\sqrt{23}-\sqrt{12}"],
                              [r"\sqrt{23}+2\sqrt{3}", r"2\sqrt{3}-\sqrt{23}"]),
    r"9\sqrt{15}": ([r"\sqrt{1215}", r"9 \sqrt{15}", r"3\sqrt{135}"],
                    [r"9\sqrt{14}", r"15\sqrt{9}"]),
    r"\frac{7}{18}": ([r"\dfrac{7}{18}", r"\frac{14}{36}"], [r"\frac{7}{19}", r"\frac{18}{7}"]),
    r"\sqrt{6}": ([r"6^{1/2}", r"\sqrt{ 6 }", r"\frac{6}{\sqrt{6}}"], [r"\sqrt{5}", r"\sqrt{7}"]),
    r"14+4\sqrt{37}": ([r"4\sqrt{37}+14", r"2(7+2\sqrt{37})"],
                       [r"14-4\sqrt{37}", r"14+4\sqrt{38}"]),
    r"\sqrt{\frac{95}{24}}": ([r"\frac{\sqrt{570}}{12}", r"\sqrt{\dfrac{95}{24}}",
                               r"\frac{\sqrt{95}}{2\sqrt{6}}"],
                              [r"\sqrt{\frac{95}{23}}", r"\frac{95}{24}"]),
}


def real_cases() -> list[tuple[str, str, bool]]:
    """(gold, completion, should pass) for every real answer of both sets."""
    cases = []
    for name in ("aime25", "hmmt25"):
        for row in real_rows(name):
            gold = row["answer"]
            if gold.lstrip("-").isdigit():
                cases += [(gold, form, True) for form in integer_forms(gold)]
                cases += [(gold, miss, False) for miss in integer_misses(gold)]
            else:
                forms, misses = LATEX_FORMS[gold]
                cases += [(gold, rf"\boxed{{{f}}}", True) for f in [gold, *forms]]
                cases += [(gold, rf"\boxed{{{m}}}", False) for m in misses]
    return cases


@pytest.mark.parametrize("compat", ["default", "matharena"])
def test_every_real_answer_in_equivalent_forms_and_near_misses(graders, compat):
    cases = real_cases()
    assert len({gold for gold, _, _ in cases}) == 60  # every gold answer of both sets
    items = [(Problem("real", str(i), "q", answer=gold), f"<think>work</think>Final: {text}")
             for i, (gold, text, _) in enumerate(cases)]
    grades = graders[compat].grade_many(items)
    wrong = [(gold, text, g.verdict, g.reason)
             for (gold, text, ok), g in zip(cases, grades, strict=True) if g.correct != ok]
    assert wrong == []


@pytest.mark.parametrize(("completion", "default", "matharena"), [
    (r"So the answer is $\boxed{1037.}$", PASS, PASS),  # was the project's bug
    (r"\boxed{\text{1037}}", PASS, WRONG_ANSWER),  # MathArena deletes \text{...} content
    ("The result is 1037", NO_ANSWER, PASS),  # MathArena's last-integer fallback
    ("The result is 1036", NO_ANSWER, WRONG_ANSWER),
    (r"<think>so it is 1037, boxed: \boxed{1037}", NO_ANSWER, NO_ANSWER),  # unclosed <think>
    (r"<think>\boxed{1037}</think>I could not finish.", NO_ANSWER, NO_ANSWER),
])
def test_the_three_matharena_differences_on_a_real_answer(graders, completion, default, matharena):
    problem = Problem("hmmt25", "9", "q", answer="1037")  # HMMT Feb 2025 problem 9
    assert graders["default"].grade(problem, completion).verdict == default
    assert graders["matharena"].grade(problem, completion).verdict == matharena


def test_the_fallback_is_flagged_in_the_reason(graders):
    grade = graders["matharena"].grade(Problem("aime25", "29", "q", answer="104"),
                                       "After all that, the result is 104")
    assert grade.correct and "last integer" in grade.reason


# ---- LiveCodeBench: the real record, the restricted unpickler, the sandbox ------------------

SHORT_SORT_OK = """```python
t = int(input())
for _ in range(t):
    s = input().strip()
    print("YES" if sum(a != b for a, b in zip(s, "abc")) <= 2 else "NO")
```"""
SHORT_SORT_WRONG = """```python
t = int(input())
for _ in range(t):
    input()
    print("YES")
```"""


def test_real_lcb_private_tests_decode_through_the_restricted_unpickler():
    (row,) = real_rows("lcb_codeforces_1873A.jsonl")
    with pytest.raises(ValueError, match="pickle"):
        decode_tests(row["private_test_cases"], allow_pickle=False)
    cases = decode_tests(row["private_test_cases"], allow_pickle=True)
    assert len(cases) == 4 and {c["testtype"] for c in cases} == {"stdin"}
    assert {"input": "1\nabc\n", "output": "YES\n"} in [
        {k: c[k] for k in ("input", "output")} for c in cases]


def test_a_pickle_that_names_a_global_is_refused():
    evil = b"cos\nsystem\n(S'echo owned'\ntR."  # protocol 0: os.system('echo owned')
    payload = base64.b64encode(zlib.compress(evil)).decode()
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load global os.system"):
        decode_tests(payload, allow_pickle=True)


@pytest.fixture(scope="module")
def lcb_lock(tmp_path_factory):
    """The real record mirrored as lcb-train's shards, pinned by `repro data pin` (offline:
    the files are there, nothing is downloaded)."""
    base = tmp_path_factory.mktemp("lcb")
    write_real_lcb_mirror(base / "hub")
    lock = base / "data.lock.yaml"
    result = CliRunner().invoke(app, ["data", "pin", "--benchmark", "lcb-train", "--data-dir",
                                      str(base / "hub"), "--lock", str(lock)])
    assert result.exit_code == 0, result.output
    return lock


def test_the_real_record_passes_a_correct_and_fails_a_wrong_solution_in_the_sandbox(lcb_lock):
    from repro.graders.code import CodeGrader
    from repro.sandbox import Sandbox

    lock = read_lock(lcb_lock)
    pins = lock["datasets"]["livecodebench/code_generation_lite"]["sha256"]
    assert sorted(pins) == ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 6)]
    (problem,), _ = load_problems(get_benchmark("lcb-train"), data_dir=lock["data_dir"],
                                  sha256_pins=pins)
    assert problem.problem_id == "1873_A" and len(problem.tests.inputs) == 5  # 1 public + 4
    grader = CodeGrader(Sandbox())
    assert grader.sandbox_mode == "bwrap"
    ok, bad = grader.grade_many([(problem, SHORT_SORT_OK), (problem, SHORT_SORT_WRONG)])
    assert ok.verdict == PASS, ok.reason
    assert bad.verdict == WRONG_ANSWER


def test_a_changed_shard_is_refused_and_a_missing_pin_named(lcb_lock, tmp_path, tiny_dir):
    out = tmp_path / "o"
    unpinned = CliRunner().invoke(app, ["eval", "--model", str(tiny_dir), "--benchmark",
                                        "lcb-train", "--out", str(out), "--data-dir",
                                        str(read_lock(lcb_lock)["data_dir"])])
    assert unpinned.exit_code == 2 and "no sha256 pin for ['test.jsonl'" in unpinned.output
    shard = read_lock(lcb_lock)["data_dir"] / "livecodebench/code_generation_lite/test2.jsonl"
    shard.write_bytes(b"\n")
    try:
        changed = CliRunner().invoke(app, ["eval", "--model", str(tiny_dir), "--benchmark",
                                           "lcb-train", "--out", str(out), "--lock",
                                           str(lcb_lock)])
    finally:
        shard.write_bytes(b"")
    assert changed.exit_code == 2 and "does not match the pinned sha256" in changed.output
    assert "Traceback" not in changed.output + unpinned.output and not out.exists()


# ---- end to end ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from repro.models import TinyModelConfig, build_tiny

    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(TinyModelConfig(), path)
    return path


@pytest.mark.slow
def test_repro_eval_on_all_60_real_problems_with_the_tiny_model(mirror, tiny_dir, tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--model", str(tiny_dir), "--benchmark", "aime25", "--benchmark", "hmmt25",
        "--split", "--data-dir", str(mirror), "--out", str(out), "--k", "2",
        "--max-new-tokens", "8", "--engine", "hf", "--batch-size", "16",
    ])
    assert result.exit_code == 0, result.output
    for name in ("aime25", "hmmt25"):
        problems = read_table(out / f"benchmark={name}" / "problems.parquet", EVAL_PROBLEMS)
        samples = read_table(out / f"benchmark={name}" / "samples.parquet", EVAL_SAMPLES)
        assert problems.num_rows == 30 and samples.num_rows == 60
        rows = problems.to_pylist()
        assert sorted(int(r["problem_id"]) for r in rows) == list(range(1, 31))
        assert {r["grader_compat"] for r in rows} == {"default"}
        assert {r["grader_errors"] for r in rows} == {0}
        expected = load_problems(get_benchmark(name), data_dir=mirror)[1]["revision_hash"]
        assert {r["revision_hash"] for r in rows} == {expected}


@pytest.mark.slow
def test_lm_eval_tasks_run_on_the_real_mirror(mirror, tiny_dir):
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("accelerate")
    import os

    from lm_eval.tasks import TaskManager

    import repro.lmeval

    manager = TaskManager(include_path=os.path.dirname(repro.lmeval.__file__),
                          include_defaults=False, metadata={"data_dir": str(mirror)})
    results = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={tiny_dir},dtype=float32",
        tasks=["aime25_repro", "hmmt25_repro"], task_manager=manager, limit=2,
        apply_chat_template=True, gen_kwargs="max_gen_toks=4", device="cpu", batch_size=16,
    )
    for task in ("aime25_repro", "hmmt25_repro"):
        assert 0.0 <= results["results"][task]["avg@k,all_samples"] <= 1.0


def test_lm_eval_docs_and_scores_on_the_real_mirror(mirror):
    """The tasks' documents are the real problems, and their scorer accepts the gold answer."""
    from repro.lmeval.utils import dataset, process_results

    for name in ("aime25", "hmmt25"):
        docs = list(dataset(name, data_dir=str(mirror))["test"])
        assert [d["answer"] for d in docs] == [r["answer"] for r in real_rows(name)]
        for doc in docs[:5]:
            right = f"<think>x</think>\\boxed{{{doc['answer']}}}"
            assert process_results(doc, [[right, "\\boxed{-1}"]]) == {"avg@k": 0.5}
