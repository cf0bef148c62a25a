"""Benchmarks as data: spec validation, loaders on hub-layout fixtures, LCB rules, prompts,
lm-eval."""

from __future__ import annotations

import importlib
import os
import pickle
from pathlib import Path

import huggingface_hub.constants
import pytest
import yaml
from fixtures_hub import (
    AIME_ID,
    AIME_ROWS,
    lcb_compress,
    write_aime,
    write_hmmt,
    write_hub_cache,
    write_lcb,
)

from repro.benchmarks import (
    BenchmarkSpecError,
    DatasetUnavailable,
    ShardIntegrityError,
    benchmark_names,
    build_messages,
    get_benchmark,
    load_problems,
    load_spec,
    row_to_problem,
)
from repro.benchmarks.lcb import decode_tests, shards_for_release
from repro.benchmarks.registry import SPEC_DIR

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LCB = get_benchmark("livecodebench")
DROP = object()  # marks a key to delete from a YAML


# --- specs -----------------------------------------------------------------------------------


# The registry is the one list of benchmarks: a spec file dropped into repro/benchmarks/specs is
# listed, parsed and (synthetic) loaded by the tests below with no other edit
# (tests/test_registry_extension.py adds one in a copy of the package).
NAMES = benchmark_names()
SYNTHETIC_NAMES = [n for n in NAMES if get_benchmark(n).source == "synthetic"]


def test_the_registry_lists_every_spec_file():
    assert sorted(p.stem for p in SPEC_DIR.glob("*.yaml")) == NAMES
    assert {"aime25", "hmmt25", "livecodebench", "synth-rule"} <= set(NAMES)  # the paper's, ours


@pytest.mark.parametrize("name", NAMES)
def test_every_builtin_yaml_validates(name):
    spec = get_benchmark(name)
    assert spec.name == name and load_spec(SPEC_DIR / f"{name}.yaml") == spec
    assert spec.default_k >= 1 and spec.grader in ("math", "code")
    if spec.source == "synthetic":
        assert spec.fields == get_benchmark(spec.twin).fields  # the twin's mapping


def test_the_paper_benchmarks_specs():
    aime, hmmt = get_benchmark("aime25"), get_benchmark("hmmt25")
    assert (aime.dataset, aime.split, aime.template) == (AIME_ID, "train", "math-integer")
    assert (hmmt.dataset, hmmt.template, hmmt.default_k) == ("MathArena/hmmt_feb_2025", "math", 32)
    assert aime.sampling == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
                             "max_new_tokens": 38912}
    assert (LCB.release, str(LCB.start_date), str(LCB.end_date)) == ("v6", "2025-02-01",
                                                                      "2025-05-01")
    assert (LCB.default_k, LCB.sampling["max_new_tokens"], LCB.expected_count) == (8, 32768, 175)
    assert LCB.sha256 == {}  # pins come from the run's config


def test_unknown_benchmark_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown benchmark 'aime24'.*'aime25'.*'synth-lcb'"):
        get_benchmark("aime24")


@pytest.mark.parametrize(
    ("base", "change", "key"),
    [
        ("aime25", {"splitt": "train"}, "splitt"),
        ("aime25", {"kind": "physics"}, "kind"),
        ("aime25", {"default_k": 0}, "default_k"),
        ("aime25", {"sampling": {"top_p": 1.5}}, "sampling.top_p"),
        ("aime25", {"sampling": {"temprature": 0.6}}, "sampling.temprature"),
        ("aime25", {"fields": {"problem_idx": "problem_id", "problem": "question",
                               "answer": "solution"}}, "fields.answer"),
        ("aime25", {"template": "lcb-generic"}, "template"),
        ("aime25", {"files": ["data/train.jsonl"]}, "files"),
        ("aime25", {"dataset": DROP}, "dataset"),
        ("aime25", {"name": "aime26"}, "name"),
        ("livecodebench", {"release": "v7"}, "release"),
        ("livecodebench", {"sha256": {"test6.jsonl": "bb4c364f71"}}, "sha256.test6.jsonl"),
        ("livecodebench", {"end_date": "2025-01-01"}, "end_date"),
        ("synth-aime", {"twin": "livecodebench"}, "twin"),
        ("synth-aime", {"generator": "repro.tasks.synth_aime.rows"}, "generator"),
        ("synth-aime", {"lm_eval": "yes"}, "lm_eval"),
    ],
)
def test_bad_yaml_names_file_and_key(tmp_path, base, change, key):
    raw = yaml.safe_load((SPEC_DIR / f"{base}.yaml").read_text())
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not DROP}
    path = tmp_path / f"{base}.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BenchmarkSpecError) as error:
        load_spec(path)
    assert str(error.value).startswith(str(path))
    assert f"'{key}'" in str(error.value)


# --- math loaders ----------------------------------------------------------------------------


def test_aime25_from_data_dir(tmp_path):
    write_aime(tmp_path, commit=COMMIT)
    with pytest.warns(UserWarning, match="loaded 3 problems, expected 30"):
        problems, prov = load_problems(get_benchmark("aime25"), data_dir=tmp_path)
    assert [p.problem_id for p in problems] == ["1", "2", "3"]
    first = problems[0]
    assert (first.benchmark, first.answer, first.kind) == ("aime25", "56", "math")
    assert first.question == AIME_ROWS[0]["problem"]
    assert first.metadata == {"problem_type": ["Number Theory"]}
    assert prov["dataset"] == AIME_ID and prov["source"] == "data_dir"
    assert prov["resolved_revision"] == COMMIT  # from hf download's local metadata
    assert list(prov["files"]) == ["data/train-00000-of-00001.parquet"]
    assert len(prov["files"]["data/train-00000-of-00001.parquet"]) == 64
    assert prov["count"] == 3
    two, prov2 = load_problems(get_benchmark("aime25"), data_dir=tmp_path, limit=2)
    assert [p.problem_id for p in two] == ["1", "2"] and prov2["count"] == 2


def test_hmmt25_latex_answers(tmp_path):
    write_hmmt(tmp_path)
    problems, prov = load_problems(get_benchmark("hmmt25"), data_dir=tmp_path, limit=5)
    assert [p.answer for p in problems] == [
        "\\frac{11}{15}", "4\\sqrt{2}", "1-\\frac{\\pi}{4}", "2^{10} \\cdot 6!",
        "\\frac{1+\\sqrt{5}}{2}, \\frac{1-\\sqrt{5}}{2}",
    ]
    assert prov["resolved_revision"] is None  # no hf download metadata: unknown, not guessed


def test_revision_hash_is_stable_and_tracks_problem_text(tmp_path):
    spec = get_benchmark("aime25")
    write_aime(tmp_path / "a")
    write_aime(tmp_path / "b")
    edited = [dict(row) for row in AIME_ROWS]
    edited[1]["problem"] += " "
    write_aime(tmp_path / "c", rows=edited)
    hashes = [load_problems(spec, data_dir=tmp_path / d, limit=3)[1]["revision_hash"]
              for d in "abc"]
    assert hashes[0] == hashes[1] != hashes[2]


def test_fixture_layout_is_what_datasets_finds(tmp_path):
    datasets = pytest.importorskip("datasets")
    root = write_aime(tmp_path)
    rows = datasets.load_dataset(str(root), split="train", cache_dir=str(tmp_path / "cache"))
    assert rows.column_names == ["problem_idx", "problem", "answer", "problem_type"]
    assert rows[0] == AIME_ROWS[0]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE set only now (after huggingface_hub's import), with an empty hub cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_offline_and_missing_names_dataset_and_command(offline):
    with pytest.raises(DatasetUnavailable) as error:
        load_problems(get_benchmark("aime25"))
    message = str(error.value)
    assert "MathArena/aime_2025" in message and "HF_HUB_OFFLINE" in message
    assert ("hf download MathArena/aime_2025 --repo-type dataset --revision main "
            "--include 'data/train-*.parquet' --local-dir DATA_DIR/MathArena/aime_2025") in message
    with pytest.raises(DatasetUnavailable, match=r"--include test6.jsonl --local-dir"):
        load_problems(LCB)  # only the shard the v6 window needs


def test_data_dir_missing_points_the_command_at_it(tmp_path):
    with pytest.raises(DatasetUnavailable) as error:
        load_problems(get_benchmark("hmmt25"), data_dir=tmp_path)
    assert f"--local-dir {tmp_path}/MathArena/hmmt_feb_2025" in str(error.value)


def test_standard_hf_cache_serves_offline(offline):
    write_hub_cache(offline, AIME_ID, COMMIT, lambda root: write_aime(root))
    problems, prov = load_problems(get_benchmark("aime25"), limit=3)
    assert len(problems) == 3
    assert (prov["source"], prov["resolved_revision"]) == ("hf_cache", COMMIT)


def test_lcb_arguments_are_refused_elsewhere(tmp_path):
    with pytest.raises(ValueError, match=r"\['release'\] apply to LiveCodeBench"):
        load_problems(get_benchmark("aime25"), data_dir=tmp_path, release="v6")


# --- LiveCodeBench ---------------------------------------------------------------------------


def test_release_tags_pick_shards():
    shards = LCB.shards
    assert shards_for_release("release_v2", shards) == ("test.jsonl", "test2.jsonl")
    assert shards_for_release("v6", shards) == ("test6.jsonl",)
    assert shards_for_release("v2_v4", shards) == ("test2.jsonl", "test3.jsonl", "test4.jsonl")
    assert shards_for_release("release_latest", shards) == shards
    for bad in ("v0", "v7", "v4_v2", "release_v7", "latest", "v6_"):
        with pytest.raises(ValueError, match="release"):
            shards_for_release(bad, shards)


def test_v6_window_is_inclusive_and_sorted(tmp_path):
    pins = write_lcb(tmp_path, commit=COMMIT)
    with pytest.warns(UserWarning, match="loaded 3 problems, expected 175"):
        problems, prov = load_problems(LCB, data_dir=tmp_path, sha256_pins=pins)
    assert [p.problem_id for p in problems] == ["9104", "abc391_b", "abc400_c"]
    assert [p.metadata["contest_date"][:10] for p in problems] == [
        "2025-03-16", "2025-02-01", "2025-05-01"]
    assert prov["files"] == {"test6.jsonl": pins["test6.jsonl"]}
    assert (prov["release"], prov["start_date"], prov["end_date"], prov["count"]) == (
        "v6", "2025-02-01T00:00:00", "2025-05-01T00:00:00", 3)
    assert prov["resolved_revision"] == COMMIT and prov["pinned"] == ["test6.jsonl"]


def test_other_releases_and_windows(tmp_path):
    pins = write_lcb(tmp_path)
    every, prov = load_problems(LCB, data_dir=tmp_path, release="release_v6", sha256_pins=pins)
    assert len(every) == 12 and len(prov["files"]) == 6  # no default window off the default tag
    window, _ = load_problems(LCB, data_dir=tmp_path, release="release_v6", sha256_pins=pins,
                              start_date="2025-02-01", end_date="2025-05-01")
    assert [p.problem_id for p in window] == ["9104", "abc390_a", "abc391_b", "abc400_c"]
    plain, _ = load_problems(LCB, data_dir=tmp_path, release="v2")  # plain JSON: no pin needed
    assert [p.problem_id for p in plain] == ["abc350_b"]


def test_both_test_types_public_then_private(tmp_path):
    pins = write_lcb(tmp_path)
    with pytest.warns(UserWarning):
        problems, _ = load_problems(LCB, data_dir=tmp_path, sha256_pins=pins)
    functional, stdin_plain, stdin_packed = problems
    assert functional.tests.fn_name == "pairSum"
    assert functional.starter_code.startswith("class Solution:")
    assert functional.tests.inputs == ("[1, 2, 3]\n2", "[4]\n1", "[0, 0]\n2")
    assert functional.tests.outputs == ("5", "4", "0")
    for problem in (stdin_plain, stdin_packed):  # private tests: plain JSON, then compressed
        assert problem.tests.fn_name is None and problem.starter_code == ""
        assert problem.tests.inputs == ("3\n1 2 3\n", "1\n7\n", "2\n-1 1\n")
        assert problem.tests.outputs == ("6\n", "7\n", "0\n")


def test_pickled_tests_need_a_matching_pin(tmp_path):
    pins = write_lcb(tmp_path)
    with pytest.raises(ShardIntegrityError) as error:
        load_problems(LCB, data_dir=tmp_path)
    assert "test6.jsonl" in str(error.value) and pins["test6.jsonl"] in str(error.value)
    wrong = "0" * 64
    with pytest.raises(ShardIntegrityError) as error:
        load_problems(LCB, data_dir=tmp_path, sha256_pins={"test6.jsonl": wrong})
    assert all(s in str(error.value) for s in ("test6.jsonl", wrong, pins["test6.jsonl"]))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_unpickler_refuses_globals_even_when_allowed():
    import base64
    import zlib

    evil = base64.b64encode(zlib.compress(pickle.dumps(_Evil()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing to load global"):
        decode_tests(evil, allow_pickle=True)
    tests = [{"input": "1", "output": "1", "testtype": "stdin"}]
    assert decode_tests(lcb_compress(tests), allow_pickle=True) == tests


# --- synthetic stand-ins and prompts ---------------------------------------------------------


@pytest.mark.parametrize("name", SYNTHETIC_NAMES)
def test_synthetic_uses_the_twin_mapping(name):
    spec = get_benchmark(name)
    module = spec.generator.split(":")[0]
    problems, prov = load_problems(spec, limit=4)
    twin = get_benchmark(spec.twin)
    rows = importlib.import_module(module).rows(spec.split, spec.n, spec.seed)
    again = [row_to_problem(twin, row, allow_pickle=True) for row in rows]
    by_id = {p.problem_id: p for p in again}
    for problem in problems:
        assert problem.benchmark == name and problem.kind == spec.kind
        assert problem.text_hash() == by_id[problem.problem_id].text_hash()
    assert prov["source"] == "synthetic" and prov["count"] == 4


def test_build_messages_per_template(tmp_path):
    write_aime(tmp_path)
    write_hmmt(tmp_path)
    aime = load_problems(get_benchmark("aime25"), data_dir=tmp_path, limit=1)[0][0]
    hmmt = load_problems(get_benchmark("hmmt25"), data_dir=tmp_path, limit=1)[0][0]
    [user] = build_messages(get_benchmark("aime25"), aime)
    assert user["role"] == "user" and user["content"].startswith(aime.question + "\n\nPlease ")
    assert "integer between 0 and 999" in user["content"]
    [user] = build_messages(get_benchmark("hmmt25"), hmmt)
    assert user["content"].endswith("within \\boxed{}.")
    pins = write_lcb(tmp_path)
    with pytest.warns(UserWarning):
        functional, stdin, _ = load_problems(LCB, data_dir=tmp_path, sha256_pins=pins)[0]
    system, user = build_messages(LCB, functional)
    assert system["role"] == "system" and "expert Python programmer" in system["content"]
    assert user["content"].startswith(f"### Question:\n{functional.question}")
    assert functional.starter_code in user["content"]
    assert "Read the inputs from stdin" in build_messages(LCB, stdin)[1]["content"]


# --- lm-eval ---------------------------------------------------------------------------------

LMEVAL_DIR = Path(__file__).resolve().parents[1] / "repro" / "lmeval"
TASKS = {"aime25_repro": "aime25", "hmmt25_repro": "hmmt25",
         "livecodebench_repro": "livecodebench", "synth_aime_repro": "synth-aime",
         "synth_hmmt_repro": "synth-hmmt", "synth_lcb_repro": "synth-lcb"}


def test_lmeval_yamls_parse_and_match_the_specs():
    task_module = pytest.importorskip("lm_eval.tasks")
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = task_module.TaskManager(include_path=str(LMEVAL_DIR), include_defaults=False)
    assert set(TASKS) <= set(manager.all_tasks)
    for task, benchmark in TASKS.items():
        cfg = load_yaml(LMEVAL_DIR / f"{task}.yaml")
        spec = get_benchmark(benchmark)
        assert cfg["metadata"]["benchmark"] == benchmark
        assert cfg["repeats"] == cfg["filter_list"][0]["filter"][0]["k"] == spec.default_k
        kwargs = dict(cfg["generation_kwargs"])
        assert kwargs.pop("max_gen_toks") == spec.sampling["max_new_tokens"]
        assert kwargs == {"until": [], "do_sample": True, **{
            key: value for key, value in spec.sampling.items() if key != "max_new_tokens"}}
        assert cfg.get("unsafe_code", False) == (spec.kind == "code")


def test_lmeval_task_loads_docs_from_our_loader(tmp_path):
    task_module = pytest.importorskip("lm_eval.tasks")
    write_aime(tmp_path)
    manager = task_module.TaskManager(include_path=str(LMEVAL_DIR), include_defaults=False,
                                      metadata={"data_dir": str(tmp_path)})
    with pytest.warns(UserWarning):
        task = manager.load(["aime25_repro"])["tasks"]["aime25_repro"]
    docs = list(task.test_docs())
    assert [d["problem_id"] for d in docs] == ["1", "2", "3"]
    assert docs[0]["system"] == "" and "integer between 0 and 999" in docs[0]["user"]
    from repro.lmeval.utils import doc_to_problem

    problem = doc_to_problem(docs[0])
    assert (problem.answer, problem.question) == ("56", AIME_ROWS[0]["problem"])



def test_lmeval_process_results_is_avg_over_the_k_kept_samples(tmp_path):
    from repro.lmeval.utils import problem_to_doc, process_results

    write_hmmt(tmp_path)
    spec = get_benchmark("hmmt25")
    problems, prov = load_problems(spec, data_dir=tmp_path, limit=1)
    doc = problem_to_doc(spec, problems[0], prov["revision_hash"])
    samples = ["so \\boxed{\\frac{11}{15}}", "no box", "\\boxed{2}", "\\boxed{\\frac{22}{30}}"]
    assert process_results(doc, [samples]) == {"avg@k": 0.5}
