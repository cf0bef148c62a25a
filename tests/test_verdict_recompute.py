"""Study 4's verdict numbers recomputed from committed Parquet by code other than the engine's
(issue 47): the registered estimator written out here with pandas and index draws, against the
engine's printed Δ, interval and unit count for every paired prediction.

Study 4's rules are applied to its own aggregate and, as a second data set, to study 3's reuse
aggregate (the engine test tests/test_offpolicy4_presets.py does the same). The registered
estimator (docs/preregistration-4.md, "Statistics"): per (unit, problem) the held-out avg@2
integrated over the fractions 0.25..1.0 by the trapezoid rule and divided by the span;
D_u = mean over problems of A - B; Δ = mean over units; 95% percentile
interval of a bootstrap that draws starts, then the RL seeds within each drawn start, then the
problems (one draw shared by all units, as the paired test pairs problems)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from committed import committed
from test_stats_nested import hand_nested

from repro.reporting.load import load_aggregate
from repro.reporting.verdict import verdict_tables_of
from repro.reporting.verdict_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = load_spec(ROOT / "repro" / "reporting" / "predictions" / "preregistration-4.yaml")
STUDIES = ["offpolicy-study", "offpolicy4-study"]  # study 3's under study 4's rules, and 4
FRACS = (0.25, 0.5, 0.75, 1.0)
N_BOOT = 10_000


def auc_by_unit(aggregate: Path, label: str) -> dict[tuple[str, int], dict[str, float]]:
    """(start, RL seed) -> problem -> AUC of held-out avg@k over FRACS, trapezoid / span."""
    table = pq.read_table(aggregate / "eval_problems.parquet", columns=[
        "run_algo", "run_model", "run_seed", "frac", "problem_id", "avg"]).to_pandas()
    rows = table[(table.run_algo == label) & table.frac.isin(FRACS)]
    out: dict[tuple[str, int], dict[str, float]] = {}
    for (model, seed, problem), g in rows.groupby(["run_model", "run_seed", "problem_id"]):
        g = g.sort_values("frac")
        assert tuple(g.frac) == FRACS, (label, model, seed, problem)
        y = g.avg.to_numpy()
        area = sum((FRACS[i + 1] - FRACS[i]) * (y[i] + y[i + 1]) / 2 for i in range(3))
        out.setdefault((model, int(seed)), {})[problem] = area / (FRACS[-1] - FRACS[0])
    return out


def nested_interval(d: np.ndarray, starts: list[str]) -> tuple[float, float, float]:
    """(2.5%, 97.5% quantiles, replicate sd) of the two-stage bootstrap drawn by index
    (test_stats_nested.hand_nested, the estimator's independent implementation)."""
    reps = hand_nested(d, starts, N_BOOT, seed=2026)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return lo, hi, reps.std()


@pytest.mark.parametrize("study", STUDIES)
def test_the_engines_paired_numbers_recompute_independently(study):
    aggregate = committed(f"results/{study}/aggregate")
    table = verdict_tables_of(load_aggregate(aggregate), SPEC)[0]
    printed = {row[0]: row[2] for row in table.rows}
    source = SPEC.subsets[0].name
    checked = 0
    for row in SPEC.predictions:
        a, b = (auc_by_unit(aggregate, f"{arm}-{source}") for arm in (row.A, row.B))
        units = sorted(set(a) & set(b))
        if not units:
            assert printed[row.id] == "no paired units", row.id
            continue
        problems = sorted(set.intersection(*(set(a[u]) & set(b[u]) for u in units)))
        d = np.array([[a[u][p] - b[u][p] for p in problems] for u in units]) * 100
        m = re.match(r"AUC Δ = ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\] points, (\d+) units",
                     printed[row.id])
        assert m, (row.id, printed[row.id])
        delta, lo, hi, n = float(m[1]), float(m[2]), float(m[3]), int(m[4])
        assert n == len(units), row.id
        assert abs(d.mean() - delta) <= 0.05 + 1e-9, (row.id, d.mean(), delta)
        my_lo, my_hi, sd = nested_interval(d, [u[0] for u in units])
        tol = 0.05 + 4 * 0.05 * sd  # print rounding, plus Monte Carlo error of a 2.5% quantile
        assert abs(my_lo - lo) <= tol and abs(my_hi - hi) <= tol, (row.id, my_lo, my_hi, lo, hi)
        checked += 1
    assert checked >= 5, checked  # study 3 has no geometric-mean arm: Q3, Q4 have no pairs
