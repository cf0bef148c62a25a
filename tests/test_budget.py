"""Budget outcomes (issue 19, item 5): AUC over the budget fractions paired per seed, final
accuracy, and the start's correctable-error share, on a small hand-built aggregate whose
expected numbers are computed here by hand (closed forms), not by the functions under test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from job_files import write_eval_files
from typer.testing import CliRunner

from repro.benchmarks import get_benchmark, load_problems
from repro.cli import app
from repro.reporting.load import load_aggregate, start_errors
from repro.reporting.tables_budget import budget_auc, budget_table

BENCH, MODEL, G, K, SEEDS = "synth-rule", "tiny", 8, 4, (0, 1)
FRACS = (0.25, 0.5, 0.75, 1.0)
# correct samples (of K) per (algo, seed) at each fraction, for each of the 3 problems
CORRECT = {
    ("gspo", 0): [[0, 1, 2, 2], [1, 1, 1, 1], [0, 0, 2, 4]],
    ("gspo", 1): [[1, 1, 1, 3], [0, 2, 2, 2], [0, 1, 1, 1]],
    ("dfpo_min", 0): [[2, 3, 4, 4], [1, 2, 2, 1], [0, 4, 4, 4]],
    ("dfpo_min", 1): [[1, 3, 3, 3], [2, 2, 2, 2], [0, 0, 0, 4]],
}


def test_budget_auc_is_the_normalised_trapezoid() -> None:
    assert budget_auc([0.25, 0.5, 0.75, 1.0], [0.0, 0.5, 0.5, 1.0]) == pytest.approx(3 / 6)
    assert budget_auc([0.5, 1.0], [0.2, 0.6]) == pytest.approx(0.4)
    assert budget_auc([0.25, 0.5, 1.0], [0.0, 1.0, 1.0]) == pytest.approx(0.625 / 0.75)
    assert budget_auc([0.25, 1.0], [0.7, 0.7]) == pytest.approx(0.7)  # a constant curve
    with pytest.raises(ValueError, match="increasing"):
        budget_auc([1.0], [0.5])
    with pytest.raises(ValueError, match="increasing"):
        budget_auc([0.5, 0.25], [0.5, 0.5])


def _problems() -> list:
    """Three held-out problems whose answers are not palindromes (reversal is an error)."""
    problems = load_problems(get_benchmark(BENCH))[0]
    return [p for p in problems if p.answer != p.answer[::-1]][:3]


def _write_eval(root: Path, algo: str, seed: int, frac: float,
                samples: list[list[tuple[bool, str | None]]], group_size: int | None) -> Path:
    g = "" if group_size is None else f"group_size={group_size}/"
    folder = root / f"algo={algo}/model={MODEL}/{g}seed={seed}/frac={frac}/benchmark={BENCH}"
    return write_eval_files(folder, samples, benchmark=BENCH, seed=seed,
                            problems=[(p.problem_id, p.text_hash()) for p in _problems()])


def _start_samples(seed: int) -> list[list[tuple[bool, str | None]]]:
    """Seed 0: reversed, reversed, another number, correct; seed 1: reversed, no box, 2 correct."""
    out = []
    for p in _problems():
        rev, other = (False, p.answer[::-1].lstrip("0")), (False, str(int(p.answer) + 1))
        right = (True, p.answer)
        out.append([rev, rev, other, right] if seed == 0 else [rev, (False, None), right, right])
    return out


@pytest.fixture(scope="module")
def aggregate(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("budget")
    files = []
    for (algo, seed), counts in CORRECT.items():
        for f, frac in enumerate(FRACS):
            samples = [[(i < c[f], None) for i in range(K)] for c in counts]
            files.append(_write_eval(root / "eval", algo, seed, frac, samples, G))
    for seed in SEEDS:
        files.append(_write_eval(root / "eval", "init", seed, 0.0, _start_samples(seed), None))
    out = root / "aggregate"
    result = CliRunner().invoke(app, ["aggregate", "--out", str(out), "--experiment", "t",
                                      "--main-algos", "gspo,dfpo_min", *map(str, files)])
    assert result.exit_code == 0, result.output
    return out


def _hand_auc(algo: str) -> np.ndarray:
    """[seeds, problems] AUC: (y1 + 2 y2 + 2 y3 + y4) / 6 on the grid 0.25, 0.5, 0.75, 1."""
    y = np.array([CORRECT[algo, s] for s in SEEDS], dtype=float) / K
    return (y[..., 0] + 2 * y[..., 1] + 2 * y[..., 2] + y[..., 3]) / 6


def _row(table, algo: str) -> list[str]:
    return next(r for r in table.rows if r[0] == algo)


def test_auc_and_final_cells_match_a_hand_computation(aggregate) -> None:
    auc_table, _ = budget_table(load_aggregate(aggregate))
    dfpo, gspo = _row(auc_table, "dfpo_min"), _row(auc_table, "gspo")
    assert dfpo[1].startswith(f"{100 * _hand_auc('dfpo_min').mean():.1f} [")
    assert gspo[1].startswith(f"{100 * _hand_auc('gspo').mean():.1f} [")
    per_seed = (_hand_auc("dfpo_min") - _hand_auc("gspo")).mean(axis=1)
    assert dfpo[2].startswith(f"{100 * per_seed.mean():+.1f} [") and "2 seeds)" in dfpo[2]
    final = {a: np.array([[c[3] for c in CORRECT[a, s]] for s in SEEDS]) / K
             for a in ("gspo", "dfpo_min")}
    assert dfpo[3].startswith(f"{100 * final['dfpo_min'].mean():.1f} [")
    assert dfpo[4].startswith(f"{100 * (final['dfpo_min'] - final['gspo']).mean():+.1f} [")
    assert gspo[2] == gspo[4] == "(baseline)"
    assert "0.25, 0.5, 0.75, 1" in auc_table.notes[0]


def test_start_correctable_error_share(aggregate) -> None:
    counts = start_errors(aggregate / "eval_samples.parquet")
    assert counts == {(MODEL, BENCH): {0: {"reversed": 6, "arithmetic": 3},
                                       1: {"reversed": 3, "no_answer": 3}}}
    _, errors = budget_table(load_aggregate(aggregate))
    assert errors.rows == [[BENCH, "2", "15", "60.0", "50.0-66.7",
                            "arithmetic 20.0%, no_answer 20.0%, reversed 60.0%"]]


def test_start_errors_refuse_a_problem_the_task_no_longer_generates(aggregate, tmp_path) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(aggregate / "eval_samples.parquet")
    stale = table.set_column(table.schema.get_field_index("problem_hash"), "problem_hash",
                             pc.binary_join_element_wise(table["problem_hash"], "x", ""))
    pq.write_table(stale, tmp_path / "samples.parquet")
    with pytest.raises(ValueError, match="not the one the task generates"):
        start_errors(tmp_path / "samples.parquet")
