"""The fair GSPO clip of studies 3 and 4: the one thing each pilot sets
(docs/preregistration-3.md and docs/preregistration-4.md, "Fair GSPO").

Per off-policy source: GSPO's paper clip if the pilot's GSPO clipped at most 20% of tokens under
it, else the candidate symmetric eps whose pilot clip share is nearest 15% (the share GSPO's
authors report). A clip share is the mean of the train logs' `clip_frac` over the pilot's units
of that label and all their steps (study 3: one unit per label; study 4: two starts). A GSPO
label's source and clip are read from the pilot preset's catalogue entry (`source`,
`objective`; the paper clip is GSPOConfig's default), never from its name. Each pilot's rule is
`RULES[its experiment]`; tests/test_fair_clip.py holds the numbers to each pre-registration's
text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from repro.objectives.gspo import GSPOConfig

PAPER_MAX_SHARE = 0.20  # the paper clip is kept when it clips at most this share
TARGET_SHARE = 0.15  # else: the candidate whose share is nearest this one
PAPER_CLIP = (GSPOConfig().eps_low, GSPOConfig().eps_high)  # GSPO's defaults: the paper's clip


@dataclass(frozen=True)
class ClipRule:
    """A pilot's registered grid of symmetric eps (eps_low = eps_high) and its units per label."""

    prereg: str  # the pre-registration that fixes it
    candidates: tuple[float, ...]
    units: int  # pilot units (start x RL seed) per label


RULES = {
    "offpolicy-pilot": ClipRule("docs/preregistration-3.md", (1e-3, 3e-3, 7e-3, 1e-2, 2e-2), 1),
    "offpolicy4-pilot": ClipRule("docs/preregistration-4.md",
                                 (5e-4, 7e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2), 2),
}


def rule_of(config: dict[str, Any]) -> ClipRule:
    """The registered rule of pilot preset `config`; an unregistered pilot is refused."""
    name = config.get("experiment")
    if name not in RULES:
        raise ValueError(f"config experiment {name!r} has no registered fair-clip rule; known "
                         f"pilots: {sorted(RULES)}")
    return RULES[name]


def eps_text(eps: float) -> str:
    """3e-4 and 1.5e-3, not 0.0003: the pre-registrations' notation."""
    mantissa, exponent = f"{eps:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


@dataclass(frozen=True)
class SourceClip:
    """One source's pilot measurements and the clip the rule gives its `gspo_fair`."""

    source: str
    paper_share: float
    shares: dict[float, float]  # candidate eps -> its pilot clip share
    eps_low: float
    eps_high: float

    @property
    def rule(self) -> str:
        if (self.eps_low, self.eps_high) == PAPER_CLIP:
            return f"paper clip: it clips {self.paper_share:.1%} <= {PAPER_MAX_SHARE:.0%}"
        return (f"paper clip clips {self.paper_share:.1%} > {PAPER_MAX_SHARE:.0%}; eps "
                f"{eps_text(self.eps_low)} clips {self.shares[self.eps_low]:.1%}, nearest "
                f"{TARGET_SHARE:.0%}")


def gspo_clips(config: dict[str, Any]) -> dict[str, tuple[str, float, float]]:
    """label -> (source, eps_low, eps_high) for every GSPO run of the pilot preset."""
    out = {}
    for label in config["run"]["algorithms"]:
        entry = config["algorithms"][label]
        if entry["algorithm"] != "gspo":
            continue
        objective = entry.get("objective", {})
        if "source" not in entry:
            raise ValueError(f"pilot label {label!r}: algorithms.{label}.source is not set")
        source = entry["source"]
        out[label] = (source, objective.get("eps_low", PAPER_CLIP[0]),
                      objective.get("eps_high", PAPER_CLIP[1]))
    return out


def clip_shares(aggregate: Path, units: int) -> dict[str, float]:
    """label -> mean `clip_frac` over its pilot units and all their steps
    (train_curves.parquet); a label with another number of units than `units` is refused."""
    curves = pq.read_table(Path(aggregate) / "train_curves.parquet",
                           columns=["run_algo", "run_model", "run_seed", "clip_frac"]).to_pandas()
    found = curves.groupby("run_algo")[["run_model", "run_seed"]].value_counts().groupby(
        "run_algo").size()
    if (found != units).any():
        raise ValueError(f"{aggregate}: the pilot has {units} unit(s) per label; found "
                         f"{found[found != units].to_dict()}")
    return curves.groupby("run_algo")["clip_frac"].mean().to_dict()


def fair_clips(config: dict[str, Any], aggregate: Path) -> list[SourceClip]:
    """The rule applied to the pilot preset `config` (resolved) and its aggregate, per source in
    the preset's order. Refuses a pilot whose clips are not the pre-registered ones."""
    rule = rule_of(config)
    shares = clip_shares(aggregate, rule.units)
    want = {PAPER_CLIP} | {(e, e) for e in rule.candidates}
    by_source: dict[str, dict[tuple[float, float], float]] = {}
    for label, (source, low, high) in gspo_clips(config).items():
        if label not in shares:
            raise ValueError(f"{aggregate}: no train log of pilot run {label!r}")
        by_source.setdefault(source, {})[(low, high)] = shares[label]
    result = []
    for source, found in by_source.items():
        if set(found) != want:
            raise ValueError(f"pilot source {source!r}: GSPO clips {sorted(found)}, "
                             f"{rule.prereg}'s are {sorted(want)}")
        paper_share = found[PAPER_CLIP]
        candidates = {e: found[(e, e)] for e in rule.candidates}
        if paper_share <= PAPER_MAX_SHARE:
            low, high = PAPER_CLIP
        else:  # nearest the target; a tie (to 1e-9) goes to the smaller eps, the tighter clip
            low = high = min(rule.candidates,
                             key=lambda e: (round(abs(candidates[e] - TARGET_SHARE), 9), e))
        result.append(SourceClip(source, paper_share, candidates, low, high))
    return result


def markdown(clips: list[SourceClip]) -> str:
    """The pilot's clip shares and the chosen clip per source, as reported beside the verdicts."""
    grid = list(clips[0].shares) if clips else []
    head = ["source", f"paper clip ({' / '.join(map(eps_text, PAPER_CLIP))})",
            *(f"eps {eps_text(e)}" for e in grid), "gspo_fair clip"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in clips:
        chosen = "paper" if (c.eps_low, c.eps_high) == PAPER_CLIP else eps_text(c.eps_low)
        cells = [c.source, f"{c.paper_share:.1%}", *(f"{c.shares[e]:.1%}" for e in grid),
                 chosen]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
