"""The nested (cluster) bootstrap of repro.evaluation.stats and the engine's refusals around it.

- Simulation: units nest in starts with a between-start spread. The nested interval covers the
  true mean near its nominal 95%; the flat one, which counts every unit as independent, visibly
  less. Fixed seeds, 400 replications (a coverage's standard error is about 1.2 points at 95%),
  thresholds: nested >= 0.88, flat <= 0.80, and nested - flat >= 0.10. Measured at this commit:
  see the assertion messages (run with -s to print them).
- An independent implementation (index draws in plain loops, not the engine's multinomial
  counts) recomputes a nested interval on a toy set; the engine's agrees within Monte Carlo error.
- The bootstrap variance with one problem and equal clusters has a closed form; the engine's
  replicates match it.
- Bad input: a cluster column the aggregate lacks, or nesting units without a declared
  cluster, is refused with one line naming the key.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from repro.evaluation.stats import (
    cluster_codes,
    nested_counts,
    paired_seed_bootstrap,
    unit_bootstrap,
)
from repro.reporting.verdict import check_nesting
from repro.reporting.verdict_spec import PREDICTIONS, SpecError, load_spec

TRUE_MEAN = 0.3


def simulate(rng: np.random.Generator, starts: int, seeds: int, problems: int
             ) -> tuple[np.ndarray, list[int]]:
    """[starts * seeds, problems] paired differences: start effect sd 1, seed sd 0.2, problem
    noise sd 0.5 (the start dominates, as study 3's GRPO gains by start did)."""
    start = rng.normal(0.0, 1.0, starts)
    seed = rng.normal(0.0, 0.2, (starts, seeds))
    d = (TRUE_MEAN + start[:, None, None] + seed[:, :, None]
         + rng.normal(0.0, 0.5, (starts, seeds, problems)))
    return d.reshape(starts * seeds, problems), [c for c in range(starts) for _ in range(seeds)]


def coverage(nested: bool, reps: int = 400, starts: int = 12, seeds: int = 4) -> float:
    rng = np.random.default_rng(20261205)
    hits = 0
    for _ in range(reps):
        d, clusters = simulate(rng, starts, seeds, problems=20)
        test = paired_seed_bootstrap(d, np.zeros_like(d), n_boot=1000,
                                     clusters=clusters if nested else None)
        hits += test["lo"] <= TRUE_MEAN <= test["hi"]
    return hits / reps


def test_nested_interval_covers_near_nominal_and_flat_visibly_less():
    nested, flat = coverage(nested=True), coverage(nested=False)
    print(f"coverage of the true mean, 12 starts x 4 seeds: nested {nested:.3f}, flat {flat:.3f}")
    assert nested >= 0.88, f"nested coverage {nested:.3f} < 0.88 (flat {flat:.3f})"
    assert flat <= 0.80, f"flat coverage {flat:.3f} > 0.80 (nested {nested:.3f})"
    assert nested - flat >= 0.10, (nested, flat)


def hand_nested(d: np.ndarray, clusters: list[str], n_boot: int, seed: int) -> np.ndarray:
    """The two-stage bootstrap written out: draw clusters, then units within each drawn cluster,
    and problems, by index; the replicate is the mean over drawn units and problems."""
    rng = np.random.default_rng(seed)
    members = {c: [i for i, x in enumerate(clusters) if x == c] for c in dict.fromkeys(clusters)}
    names = list(members)
    out = np.empty(n_boot)
    for b in range(n_boot):
        units = []
        for c in rng.integers(0, len(names), len(names)):
            group = members[names[c]]
            units += [group[j] for j in rng.integers(0, len(group), len(group))]
        problems = rng.integers(0, d.shape[1], d.shape[1])
        out[b] = d[np.ix_(units, problems)].mean()
    return out


def test_an_independent_implementation_gives_the_same_interval():
    rng = np.random.default_rng(7)
    clusters = ["s1", "s1", "s2", "s3", "s3", "s3"]
    shift = {"s1": 0.0, "s2": 2.0, "s3": -1.0}
    d = np.array([[shift[c] + x for x in rng.normal(0, 0.5, 8)] for c in clusters])
    engine = paired_seed_bootstrap(d, np.zeros_like(d), n_boot=20_000, clusters=clusters)
    hand = hand_nested(d, clusters, 20_000, seed=11)
    lo, hi = np.quantile(hand, [0.025, 0.975])
    tol = 0.05 * hand.std() * 4  # Monte Carlo error of a 2.5% quantile at 20k draws, with margin
    assert engine["diff"] == pytest.approx(d.mean())
    assert engine["lo"] == pytest.approx(lo, abs=tol), (engine, lo, hi)
    assert engine["hi"] == pytest.approx(hi, abs=tol), (engine, lo, hi)
    flat = paired_seed_bootstrap(d, np.zeros_like(d), n_boot=20_000)
    assert flat["hi"] - flat["lo"] < 0.8 * (hi - lo), "the toy set must tell the two apart"


def test_the_bootstrap_variance_matches_its_closed_form():
    """One problem, C clusters of n units each: Var* = (B + W / n) / C, B the (population)
    variance of cluster means, W the mean within-cluster population variance."""
    rng = np.random.default_rng(3)
    c, n = 5, 3
    x = rng.normal(0, 1, (c, n)) + rng.normal(0, 2, (c, 1))
    codes = np.repeat(np.arange(c), n)
    counts = nested_counts(np.random.default_rng(0), codes, 40_000)
    reps = counts @ x.ravel() / counts.sum(axis=1)
    expected = (x.mean(axis=1).var() + x.var(axis=1).mean() / n) / c
    assert reps.var() == pytest.approx(expected, rel=0.05)


def test_singleton_clusters_are_the_flat_bootstrap_exactly():
    rng = np.random.default_rng(1)
    a, b = rng.random((4, 9)), rng.random((4, 9))
    assert cluster_codes(["x", "y", "z", "w"], 4) is None
    assert paired_seed_bootstrap(a, b, clusters=["x", "y", "z", "w"]) == paired_seed_bootstrap(a, b)
    assert unit_bootstrap(a[:, 0], clusters=list("abcd")) == unit_bootstrap(a[:, 0])
    with pytest.raises(ValueError, match="one cluster per unit"):
        paired_seed_bootstrap(a, b, clusters=["x"])


def runs(models: list[str], seeds: list[int]) -> types.SimpleNamespace:
    rows = [(m, s) for m in models for s in seeds]
    return types.SimpleNamespace(runs=pa.table({
        "run_algo": ["grpo"] * len(rows), "run_model": [m for m, _ in rows],
        "run_group_size": [8] * len(rows), "run_seed": [s for _, s in rows]}))


def spec_with(tmp_path: Path, **keys: str | None):
    text = (PREDICTIONS / "preregistration-3.yaml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines()
             if not line.startswith(("cluster:", "estimator:", "secondary:"))]
    lines += [f"{k}: {v}" for k, v in keys.items() if v is not None]
    path = tmp_path / "p.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_spec(path)


def test_a_cluster_column_the_aggregate_lacks_is_refused(tmp_path):
    spec = spec_with(tmp_path, cluster="stage1_model")
    with pytest.raises(SpecError, match=r"p\.yaml: cluster: .*no column 'stage1_model'"):
        check_nesting(runs(["m1", "m2"], [0, 1]), spec)


def test_nesting_units_without_a_cluster_are_refused(tmp_path):
    spec = spec_with(tmp_path, cluster=None, estimator="flat")
    with pytest.raises(SpecError, match=r"p\.yaml: cluster: not declared, but the units nest "
                                        r"\(2 RL seeds"):
        check_nesting(runs(["m1", "m2"], [0, 1]), spec)
    check_nesting(runs(["m1", "m2", "m3"], [0]), spec)  # one unit per start: independent
    check_nesting(runs(["m1", "m2"], [0, 1]), spec_with(tmp_path, cluster="run_model"))


@pytest.mark.parametrize(("keys", "message"), [
    ({"cluster": "run_model", "estimator": "pooled"}, "estimator: one of flat, nested"),
    ({"cluster": "run_model", "estimator": "flat", "secondary": "{flat: 2026-12-05}"},
     "secondary.flat: need an estimator other than"),
    ({"cluster": "run_model", "estimator": "flat", "secondary": "{nested: soon}"},
     "secondary.nested: need the date"),
    ({"cluster": "'run model'"}, "cluster: need a column"),
])
def test_bad_inference_keys_fail_naming_the_key(tmp_path, keys, message):
    with pytest.raises(SpecError, match=message):
        spec_with(tmp_path, **keys)


def test_every_registered_table_names_its_estimator():
    """A flat registered table says so in its own notes (as registered: "bootstrap ... over
    seeds/units and problems"); a nested one gets the engine's note (test_offpolicy4_presets,
    test_nested_readings). Every file that nests units declares the column they nest in."""
    import re

    for path in sorted(PREDICTIONS.glob("*.yaml")):
        spec = load_spec(path)
        assert spec.cluster == "run_model", path.name
        if spec.estimator == "flat":
            notes = " ".join(" ".join(spec.notes).split())
            assert re.search(r"bootstrap (interval )?over (seeds|units) and problems", notes), \
                path.name
