"""Study 3's fair GSPO clip: the one thing its pilot sets (docs/preregistration-3.md, "Fair GSPO").

Per off-policy source: GSPO's paper clip if the pilot's GSPO clipped at most 20% of tokens under
it, else the candidate symmetric eps whose pilot clip share is nearest 15% (the share GSPO's
authors report). A clip share is the mean over the pilot run's steps of its train log's
`clip_frac`. A GSPO label's source and clip are read from the pilot preset's catalogue entry
(`source`, `objective`; the paper clip is GSPOConfig's default), never from its name.
The rule's numbers are the pre-registration's; tests/test_fair_clip.py holds them to its text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from repro.objectives.gspo import GSPOConfig

PAPER_MAX_SHARE = 0.20  # the paper clip is kept when it clips at most this share
TARGET_SHARE = 0.15  # else: the candidate whose share is nearest this one
CANDIDATES = (1e-3, 3e-3, 7e-3, 1e-2, 2e-2)  # symmetric eps_low = eps_high
PAPER_CLIP = (GSPOConfig().eps_low, GSPOConfig().eps_high)  # GSPO's defaults: the paper's clip


def eps_text(eps: float) -> str:
    """3e-4, not 0.0003: the pre-registration's notation."""
    return f"{eps:.0e}".replace("e-0", "e-")


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


def clip_shares(aggregate: Path) -> dict[str, float]:
    """label -> mean `clip_frac` over the steps of its one pilot run (train_curves.parquet)."""
    curves = pq.read_table(Path(aggregate) / "train_curves.parquet",
                           columns=["run_algo", "run_model", "run_seed", "clip_frac"]).to_pandas()
    units = curves.groupby("run_algo")[["run_model", "run_seed"]].nunique()
    if (units > 1).any(axis=None):
        raise ValueError(f"{aggregate}: the pilot has one unit per label; found more: "
                         f"{units[(units > 1).any(axis=1)].index.tolist()}")
    return curves.groupby("run_algo")["clip_frac"].mean().to_dict()


def fair_clips(config: dict[str, Any], aggregate: Path) -> list[SourceClip]:
    """The rule applied to the pilot preset `config` (resolved) and its aggregate, per source in
    the preset's order. Refuses a pilot whose clips are not the pre-registered ones."""
    shares = clip_shares(aggregate)
    want = {PAPER_CLIP} | {(e, e) for e in CANDIDATES}
    by_source: dict[str, dict[tuple[float, float], float]] = {}
    for label, (source, low, high) in gspo_clips(config).items():
        if label not in shares:
            raise ValueError(f"{aggregate}: no train log of pilot run {label!r}")
        by_source.setdefault(source, {})[(low, high)] = shares[label]
    result = []
    for source, found in by_source.items():
        if set(found) != want:
            raise ValueError(f"pilot source {source!r}: GSPO clips {sorted(found)}, the "
                             f"pre-registration's are {sorted(want)}")
        paper_share = found[PAPER_CLIP]
        candidates = {e: found[(e, e)] for e in CANDIDATES}
        if paper_share <= PAPER_MAX_SHARE:
            low, high = PAPER_CLIP
        else:  # nearest the target; a tie (to 1e-9) goes to the smaller eps, the tighter clip
            low = high = min(CANDIDATES,
                             key=lambda e: (round(abs(candidates[e] - TARGET_SHARE), 9), e))
        result.append(SourceClip(source, paper_share, candidates, low, high))
    return result


def markdown(clips: list[SourceClip]) -> str:
    """The pilot's clip shares and the chosen clip per source, as reported beside the verdicts."""
    head = ["source", f"paper clip ({' / '.join(map(eps_text, PAPER_CLIP))})",
            *(f"eps {eps_text(e)}" for e in CANDIDATES), "gspo_fair clip"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in clips:
        chosen = "paper" if (c.eps_low, c.eps_high) == PAPER_CLIP else eps_text(c.eps_low)
        cells = [c.source, f"{c.paper_share:.1%}", *(f"{c.shares[e]:.1%}" for e in CANDIDATES),
                 chosen]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
