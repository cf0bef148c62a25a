"""DFPO's weight transforms written independently of repro.objectives: plain Python loops over
groups and, for the projection, brute-force enumeration of active sets (small groups only)."""

from __future__ import annotations

import itertools
import math

import torch


def brute_force_projection(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """argmin ||v - w|| s.t. a.v = 0, v >= 0 by enumerating active sets (small groups only)."""
    best, best_d = None, float("inf")
    n = len(w)
    for k in range(0, n + 1):
        for active in itertools.combinations(range(n), k):
            idx = list(active)
            v = torch.zeros_like(w)
            if idx:
                den = float((a[idx] ** 2).sum())
                lam = float((a[idx] * w[idx]).sum()) / den if den > 0 else 0.0
                v[idx] = w[idx] - lam * a[idx]
            if float(v.min()) < -1e-12 or abs(float(a @ v)) > 1e-9:
                continue
            d = float(((v - w) ** 2).sum())
            if d < best_d:
                best, best_d = v, d
    return best


def reference_weights(transform: str, s: list[float], adv: list[float],
                      group: list[int]) -> list[float]:
    """w~ per row for min_replace (group minimum), group_mean (group mean), global_scale
    (mean of group minima / mean of s, times s) and orth_proj (brute-force projection per
    group)."""
    ids = sorted(set(group))
    members = {g: [i for i, gi in enumerate(group) if gi == g] for g in ids}
    if transform == "min_replace":
        return [min(s[j] for j in members[group[i]]) for i in range(len(s))]
    if transform == "group_mean":
        return [sum(s[j] for j in members[group[i]]) / len(members[group[i]])
                for i in range(len(s))]
    if transform == "group_geomean":
        return [math.exp(sum(math.log(s[j]) for j in members[group[i]]) / len(members[group[i]]))
                for i in range(len(s))]
    if transform == "global_scale":
        kappa = (sum(min(s[j] for j in members[g]) for g in ids) / len(ids)) / (sum(s) / len(s))
        return [kappa * x for x in s]
    if transform == "orth_proj":
        out = [0.0] * len(s)
        for g in ids:
            rows = members[g]
            w = torch.tensor([s[i] for i in rows], dtype=torch.float64)
            a = torch.tensor([adv[i] for i in rows], dtype=torch.float64)
            v = brute_force_projection(w, a) if float(a.norm()) > 1e-12 else w
            for i, x in zip(rows, v.tolist(), strict=True):
                out[i] = x
        return out
    raise ValueError(transform)
