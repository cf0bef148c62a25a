"""The mechanism study's verdicts (docs/preregistration-2.md) on a synthetic aggregate whose
truth is known: three starts (models) x RL seeds, every run evaluated at four fractions.

The world: the start and `grpo` are all wrong / all right (G2 holds); `dfpo_min_prod` is `gspo`
plus extra correct samples (P1 holds); `dfpo_none_prod` has `dfpo_min_prod`'s samples exactly
(P2: Δ = 0, fails); `dfpo_min_prod`'s preamble_kl is a tenth of gspo's (P7 holds), the
phrasing_kl equal (P8 inconclusive), its entropy drops more (P9 fails). A world with a spread of
s under 2% makes every prediction "invalid regime": the gates can fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from job_files import write_eval_files
from typer.testing import CliRunner

from repro.cli import app
from repro.evaluation.stats import holm
from repro.reporting.load import load_aggregate
from repro.reporting.scores import compare
from repro.reporting.verdict import FAILS, HOLDS, INCONCLUSIVE, verdict_tables, verdict_tables_of
from repro.reporting.verdict_metrics import Part, Scope, auc_pair
from repro.reporting.verdict_spec import load_spec, spec_for
from repro.results import TRAIN_LOG, write_table
from repro.results.schemas import TRAIN_LOG_METRICS, TRAIN_LOG_TIMING

MODELS, MAIN_SEEDS, FRACS = ("m0", "m1", "m2"), (0, 1), (0.25, 0.5, 0.75, 1.0)
PROBLEMS, K, STEPS = 16, 2, 8
MAIN = ("grpo", "gspo", "dfpo_min_prod", "dfpo_none_prod", "dfpo_global_prod")
ABLATIONS = ("dfpo_orth_prod", "dfpo_orth_plain_prod", "dfpo_min", "gspo_noclip", "gspo_tokmean")
SPEC = spec_for("mechanism-study")  # repro/reporting/predictions/preregistration-2.yaml
INVALID, NOT_AFTER_HOLM = SPEC.gates[0].label, SPEC.holm["accuracy"][1]


def hive(root: Path, kind: str, algo: str, model: str, seed: int, g: int | None) -> Path:
    return root / kind / f"algo={algo}" / f"model={model}" / (
        f"group_size={g}" if g else "") / f"seed={seed}"


def write_train(root: Path, algo: str, model: str, seed: int, spread: float) -> Path:
    rows = []
    for i in range(STEPS):
        metrics = dict.fromkeys(TRAIN_LOG_METRICS + TRAIN_LOG_TIMING, 0.5) | {
            "reward_mean": 0.1 * i + (0.01 if algo == "dfpo_min_prod" else 0.0),
            "s_spread_product": spread,
            "preamble_kl": 0.01 if algo == "dfpo_min_prod" else 0.1,
            "phrasing_kl": 0.2,
            "entropy": 1.0 - (0.02 if algo == "dfpo_min_prod" else 0.01) * i,
        }
        rows.append(metrics | {"algorithm": algo, "objective": "x", "seed": seed, "step": i + 1,
                               "gen_tokens": 100, "gen_tokens_cum": 100 * (i + 1),
                               "flops_cum": 1e6 * (i + 1)})
    path = hive(root, "runs", algo, model, seed, 8) / "train_log.parquet"
    write_table(rows, TRAIN_LOG, path)
    return path


def write_eval(root: Path, algo: str, model: str, seed: int, frac: float,
               correct: np.ndarray) -> Path:
    g = None if algo == "init" else 8
    folder = hive(root, "eval", algo, model, seed, g) / f"frac={frac}/benchmark=toy"
    return write_eval_files(folder, [[(bool(ok), None) for ok in row] for row in correct],
                            benchmark="toy", seed=seed)


def correctness(model: str, seed: int, frac: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([MODELS.index(model), seed, int(100 * frac)])
    gspo = rng.random((PROBLEMS, K)) < 0.3
    dfpo = gspo | (rng.random((PROBLEMS, K)) < 0.5)
    out = {a: rng.random((PROBLEMS, K)) < 0.4 for a in (*MAIN, *ABLATIONS)}
    return out | {"gspo": gspo, "dfpo_min_prod": dfpo, "dfpo_none_prod": dfpo,
                  "grpo": np.ones((PROBLEMS, K), bool)}


def build(root: Path, spread: float | dict[str, float]) -> tuple[Path, dict]:
    """The world's aggregate; `spread`: the spread of s of every run, or by model."""
    files, truth = [], {}
    for m in MODELS:
        for algos, seeds in ((MAIN, MAIN_SEEDS), (ABLATIONS, (0,))):
            for a in algos:
                for s in seeds:
                    files.append(write_train(root, a, m, s, spread if isinstance(
                        spread, float) else spread[m]))
                    for f in FRACS:
                        truth[a, m, s, f] = correctness(m, s, f)[a]
                        files.append(write_eval(root, a, m, s, f, truth[a, m, s, f]))
        for s in MAIN_SEEDS:
            files.append(write_eval(root, "init", m, s, 0.0, np.zeros((PROBLEMS, K), bool)))
    out = root / "aggregate"
    result = CliRunner().invoke(app, [
        "aggregate", "--out", str(out), "--experiment", "mechanism-study", "--baseline", "gspo",
        "--proposed", "dfpo_min_prod", "--main-algos", ",".join(MAIN),
        "--ablation-algos", ",".join(ABLATIONS), "--group-algos", "gspo,dfpo_min_prod",
        *map(str, files)])
    assert result.exit_code == 0, result.output
    return out, truth


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("mech"), spread=0.5)


@pytest.fixture(scope="module")
def world(built):
    out, truth = built
    table = verdict_tables(load_aggregate(out))[0]
    return {row[0]: row for row in table.rows}, truth


def hand_auc(truth: dict, algo: str, model: str, seed: int) -> np.ndarray:
    """Per-problem AUC over FRACS: np.trapezoid, divided by the span."""
    curve = np.stack([truth[algo, model, seed, f].mean(1) for f in FRACS])
    return np.trapezoid(curve, FRACS, axis=0) / (FRACS[-1] - FRACS[0])


def test_gates_hold_and_p1_matches_a_hand_computation(world):
    rows, truth = world
    assert [rows[g][-1] for g in ("G1", "G2", "G3")] == [HOLDS] * 3
    assert "50.0%" in rows["G1"][2] and "Δ = +100.0 [+100.0, +100.0]" in rows["G2"][2]
    hand = np.mean([(hand_auc(truth, "dfpo_min_prod", m, s) - hand_auc(truth, "gspo", m, s))
                    .mean() for m in MODELS for s in MAIN_SEEDS]) * 100
    assert rows["P1"][2].startswith(f"AUC Δ = {hand:+.1f} [") and "6 units" in rows["P1"][2]
    assert hand > 0 and rows["P1"][-1] in (HOLDS, NOT_AFTER_HOLM)
    assert "per start: m0 " in rows["P1"][2]


def test_rules_can_fail_and_stay_inconclusive(world):
    rows, _ = world
    assert rows["P2"][-1] == FAILS and "Δ = +0.0 [+0.0, +0.0]" in rows["P2"][2]
    assert "3 units" in rows["P4"][2]
    assert rows["P7"][-1] == HOLDS and f"{math.log(0.1):+.3f}" in rows["P7"][2]
    assert rows["P8"][-1] == INCONCLUSIVE
    assert rows["P9"][-1] == FAILS


def test_a_regime_without_spread_is_invalid_not_failed(tmp_path):
    out, _ = build(tmp_path, spread=0.001)
    rows = {r[0]: r for r in verdict_tables(load_aggregate(out))[0].rows}
    assert rows["G1"][-1] == FAILS
    assert {rows[p][-1] for p in ("P1", "P2", "P5", "P6a", "P7", "P9")} == {INVALID}


# ---- what study 3 needs of the engine, on the same world ---------------------------------------
# (docs/preregistration-3.md: AUC A vs B paired per unit, gates per source, Holm over a family
# per source and pooled over the valid sources; here the "sources" are sets of starts)
OFFPOLICY = """
preregistration: docs/preregistration-3.md
registered_for: offpolicy-study
experiments: [offpolicy-study]
unit: model/seed
cluster: run_model
estimator: flat  # the flat rule that block_p recomputes below
title: "Q ({experiment})"
no_data: no paired units
blocks:
  by: source
  subsets:
    early: {models: [m0, m1]}
    late: {models: [m2], label: "LATE"}
  pooled: true
gates:
  - {id: G1, claim: "spread of s in {A}", A: dfpo_min_prod, metric: steps(s_spread_product),
     test: level, holds: {value: ">= 0.02"}, fails: otherwise, numbers: "{value:.1%}",
     invalidates: all, label: invalid regime}
families:
  confirmatory:
    holm: {alpha: 0.05, label: holds (not after Holm)}
    test: paired
    metric: auc
    holds: {lo: "> 0"}
    fails: {hi: "< 1"}
    numbers: "{delta}; Holm p {p_holm:.3f}"
predictions:
  - {id: Q1, family: confirmatory, claim: "{A} vs {B}", A: dfpo_min_prod, B: gspo}
  - {id: Q2, family: confirmatory, claim: "{A} vs {B}", A: dfpo_min_prod, B: dfpo_none_prod}
  - {id: Q3, family: confirmatory, claim: "{A} vs {B}", A: dfpo_orth_prod, B: gspo}
"""


def offpolicy(out: Path, tmp_path: Path, late_label: str = "{arm}"
              ) -> dict[tuple[str, str], list[str]]:
    """(source, id) -> row of the study-3-shaped file on the world in `out`; `late_label`: the
    run label of an arm in the late source ("{arm}": the world's runs; another: none)."""
    path = tmp_path / "offpolicy.yaml"
    path.write_text(OFFPOLICY.replace("LATE", late_label))
    tables = verdict_tables_of(load_aggregate(out), load_spec(path))
    assert tables[0].header == ["source", "id", "prediction", "numbers", "verdict"]
    return {(r[0], r[1]): r for r in tables[0].rows}


def block_p(agg, models: tuple[str, ...], a: str, b: str) -> float:
    return compare(*auc_pair(agg, Scope((Part(models),), by_seed=False), a, b)).p_value


def test_sources_get_their_gates_holm_within_and_a_pooled_block(built, tmp_path):
    rows = offpolicy(built[0], tmp_path)
    assert [k for k in rows if k[0] == "pooled"] == [("pooled", q) for q in ("Q1", "Q2", "Q3")]
    assert rows["early", "G1"][-1] == rows["late", "G1"][-1] == HOLDS
    assert "4 units" in rows["early", "Q1"][3] and "2 units" in rows["late", "Q1"][3]
    assert "6 units" in rows["pooled", "Q1"][3] and "3 units" in rows["pooled", "Q3"][3]
    agg = load_aggregate(built[0])
    for source, models in (("early", ("m0", "m1")), ("late", ("m2",))):
        raw = [block_p(agg, models, a, b) for a, b in (("dfpo_min_prod", "gspo"), (
            "dfpo_min_prod", "dfpo_none_prod"), ("dfpo_orth_prod", "gspo"))]
        for q, p in zip(("Q1", "Q2", "Q3"), holm(raw), strict=True):
            assert rows[source, q][3].endswith(f"Holm p {p:.3f}"), (source, q)
    p1 = verdict_tables(agg)[0].rows[3]  # the mechanism study's P1: every unit, one block
    assert p1[0] == "P1" and p1[2].startswith("AUC " + rows["pooled", "Q1"][3].split(";")[0])


def test_a_source_whose_gate_fails_is_invalid_and_leaves_the_pool(tmp_path):
    out, _ = build(tmp_path, spread={"m0": 0.5, "m1": 0.5, "m2": 0.001})  # the late one fails
    rows = offpolicy(out, tmp_path)
    assert rows["late", "G1"][-1] == FAILS and rows["late", "G1"][3] == "0.1%"
    assert {rows["late", q][-1] for q in ("Q1", "Q2", "Q3")} == {INVALID}
    assert rows["early", "G1"][-1] == HOLDS and rows["early", "Q1"][-1] != INVALID
    for q in ("Q1", "Q2", "Q3"):  # the pool is the early source alone
        assert rows["pooled", q][3] == rows["early", q][3]
    assert "4 units" in rows["pooled", "Q1"][3]
    missing = offpolicy(out, tmp_path, late_label="{arm}_not_run")  # a source without runs
    assert missing["late", "G1"][3] == "no paired units"
    assert missing["late", "G1"][-1] == INCONCLUSIVE and missing["late", "Q1"][-1] == INVALID
