"""Study 4's admission of stage-1 starts (docs/preregistration-4.md, "Starts"): each start's
held-out avg@2 at the RL start, and whether the registered band admits it.

Run after the screen computed the starts' evaluations and before any RL run:

    snakemake --cores all --configfile config/presets/offpolicy4-study.yaml --until evaluate_init
    python scripts/admit_study4.py

It reads each start's evaluation at every RL seed of the preset (the `start` of its units, at
frac 0) and prints one line per start: its accuracy (the mean over problems and RL seeds) and
"admitted" or "replace". It exits 1 while any start is outside the band or not yet evaluated:
the rule then replaces that start, in the preset, by the next unused stage-1 seed, in a commit
of its own, and the screen runs again.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repro.pipeline.layout import INIT  # noqa: E402
from repro.plan import load_config  # noqa: E402
from repro.results import EVAL_PROBLEMS, read_table  # noqa: E402

PRESET = ROOT / "config" / "presets" / "offpolicy4-study.yaml"
BAND = (0.10, 0.40)  # the registered band of held-out avg@2 at the RL start, inclusive


def admitted(accuracy: float) -> bool:
    return BAND[0] <= accuracy <= BAND[1]


def start_accuracy(results: Path, model: str, seeds: list[int], benchmark: str) -> float | None:
    """Mean avg@k over problems and RL seeds of the start's evaluations; None if any is
    missing."""
    values = []
    for seed in seeds:
        path = (results / "eval" / INIT.format(model=model, seed=seed)
                / f"benchmark={benchmark}" / "problems.parquet")
        if not path.exists():
            return None
        values += read_table(path, EVAL_PROBLEMS).column("avg").to_pylist()
    return sum(values) / len(values)


def main() -> int:
    config = load_config(ROOT / "config" / "config.yaml", [PRESET])
    results = ROOT / config["results"]
    ok = True
    for model in config["run"]["models"]:
        acc = start_accuracy(results, model, config["run"]["seeds"],
                             config["eval"]["benchmarks"][0])
        if acc is None:
            print(f"{model}: not evaluated yet")
            ok = False
            continue
        verdict = "admitted" if admitted(acc) else "replace"
        ok &= verdict == "admitted"
        print(f"{model}: {acc:.1%} held out at the RL start: {verdict} (band "
              f"{BAND[0]:.0%}-{BAND[1]:.0%})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
