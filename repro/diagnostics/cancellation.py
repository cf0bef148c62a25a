"""The paper's mechanism metrics, from coefficients c [B, T] and the shared-node structure.

asym: do members sharing a node get the same coefficient per unit advantage? (exchangeability)
residual_full: how much net push survives on nodes the whole group shares? (cancellation)
freq_energy: what share of the net update pressure lands on the most frequent token types?
shared_frac: what share of the response tokens sit on a shared node at all (where
cancellation can act)?
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from repro.diagnostics.shared_nodes import SharedNodes, find_shared_nodes


def asym(coef: Tensor, advantages: Tensor, nodes: SharedNodes) -> float:
    """Mean over shared nodes (>= 2 members with A != 0) of the dispersion of kappa = c / A.

    Dispersion = population std / mean |kappa| (a coefficient of variation that stays finite
    when kappas of opposite sign meet); all-zero kappas count as 0. Exchangeable objectives give 0.
    NaN when no node qualifies: "no evidence" is not "no asymmetry".
    """
    c = coef[nodes.rows, nodes.cols].double()
    a = advantages[nodes.rows].double()
    live = a != 0
    kappa = torch.where(live, c / torch.where(live, a, 1.0), 0.0)
    n = nodes.node_sum(live.double())
    mean = nodes.node_sum(kappa) / n.clamp_min(1)
    dev = torch.where(live, kappa - mean[nodes.node], 0.0)
    std = (nodes.node_sum(dev * dev) / n.clamp_min(1)).sqrt()
    scale = nodes.node_sum(kappa.abs()) / n.clamp_min(1)
    cv = torch.where(scale > 0, std / scale.clamp_min(1e-300), 0.0)
    keep = n >= 2
    return float(cv[keep].mean()) if bool(keep.any()) else math.nan


def residual_full(coef: Tensor, nodes: SharedNodes) -> float:
    """sum |sum_i c| / sum sum_i |c| over nodes shared by every member of their group (0 = cancel).

    NaN when no node is shared by a whole group; 0 when all their coefficients are 0.
    """
    if not bool(nodes.full.any()):
        return math.nan
    c = coef[nodes.rows, nodes.cols].double()
    net = nodes.node_sum(c).abs()[nodes.full].sum()
    total = nodes.node_sum(c.abs())[nodes.full].sum()
    return float(net / total) if float(total) > 0 else 0.0


def freq_energy(coef: Tensor, tokens: Tensor, mask: Tensor, vocab_size: int) -> float:
    """Share of sum_v (net coefficient of type v)^2 on the top 1% (>= 5) most frequent types.

    Ties in count are broken by the lower token id, so F is deterministic.
    """
    tok = tokens[mask].long()
    c = coef[mask].double()
    counts = torch.bincount(tok, minlength=vocab_size)
    net = torch.zeros(counts.numel(), dtype=torch.float64, device=c.device).index_add(0, tok, c)
    k = min(counts.numel(), max(5, math.ceil(0.01 * vocab_size)))
    top = torch.sort(counts, descending=True, stable=True).indices[:k]
    energy = net * net
    total = energy.sum()
    return float(energy[top].sum() / total) if float(total) > 0 else 0.0


def shared_frac(nodes: SharedNodes) -> float:
    """Share of response tokens on a node with >= 2 members of their group (NaN: no token)."""
    n = nodes.node.numel()
    return float((nodes.count[nodes.node] >= 2).double().mean()) if n else math.nan


CANCELLATION_KEYS = ("asym", "residual_full", "freq_energy", "shared_frac")


def cancellation_metrics(
    coef: Tensor, tokens: Tensor, mask: Tensor, group: Tensor, advantages: Tensor, vocab_size: int
) -> dict[str, float]:
    """CANCELLATION_KEYS of one minibatch (one shared-node pass)."""
    nodes = find_shared_nodes(tokens, mask, group)
    return {
        "asym": asym(coef, advantages, nodes),
        "residual_full": residual_full(coef, nodes),
        "freq_energy": freq_energy(coef, tokens, mask, vocab_size),
        "shared_frac": shared_frac(nodes),
    }
