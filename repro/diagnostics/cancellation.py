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


def _asym_sums(coef: Tensor, advantages: Tensor, nodes: SharedNodes) -> tuple[Tensor, Tensor]:
    """(sum of the per-node dispersions, number of qualifying nodes): see `asym`."""
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
    return cv[keep].sum(), keep.sum().double()


def _residual_sums(coef: Tensor, nodes: SharedNodes) -> tuple[Tensor, Tensor, Tensor]:
    """(sum |net|, sum of |c|, number of nodes) over the nodes shared by a whole group."""
    c = coef[nodes.rows, nodes.cols].double()
    net = nodes.node_sum(c).abs()[nodes.full].sum()
    total = nodes.node_sum(c.abs())[nodes.full].sum()
    return net, total, nodes.full.sum().double()


def _freq_sums(coef: Tensor, tokens: Tensor, mask: Tensor, n_types: int) -> tuple[Tensor, Tensor]:
    """(count of each token type, net coefficient of each type), both [n_types] float64."""
    tok = tokens[mask].long()
    c = coef[mask].double()
    counts = torch.bincount(tok, minlength=n_types).double()
    if counts.numel() > n_types:
        raise ValueError(f"token id {int(tok.max())} is outside the {n_types} token types counted")
    net = torch.zeros(counts.numel(), dtype=torch.float64, device=c.device).index_add(0, tok, c)
    return counts, net


def asym(coef: Tensor, advantages: Tensor, nodes: SharedNodes) -> float:
    """Mean over shared nodes (>= 2 members with A != 0) of the dispersion of kappa = c / A.

    Dispersion = population std / mean |kappa| (a coefficient of variation that stays finite
    when kappas of opposite sign meet); all-zero kappas count as 0. Exchangeable objectives give 0.
    NaN when no node qualifies: "no evidence" is not "no asymmetry".
    """
    total, n = _asym_sums(coef, advantages, nodes)
    return _asym_value(total, n)


def residual_full(coef: Tensor, nodes: SharedNodes) -> float:
    """sum |sum_i c| / sum sum_i |c| over nodes shared by every member of their group (0 = cancel).

    NaN when no node is shared by a whole group; 0 when all their coefficients are 0.
    """
    return _residual_value(*_residual_sums(coef, nodes))


def freq_energy(coef: Tensor, tokens: Tensor, mask: Tensor, vocab_size: int) -> float:
    """Share of sum_v (net coefficient of type v)^2 on the top 1% (>= 5) most frequent types.

    Ties in count are broken by the lower token id, so F is deterministic.
    """
    return _freq_value(*_freq_sums(coef, tokens, mask, _types(tokens, mask, vocab_size)),
                       vocab_size)


def _asym_value(total: Tensor, n: Tensor) -> float:
    return float(total / n) if float(n) > 0 else math.nan


def _residual_value(net: Tensor, total: Tensor, n_full: Tensor) -> float:
    if not float(n_full) > 0:
        return math.nan
    return float(net / total) if float(total) > 0 else 0.0


def _types(tokens: Tensor, mask: Tensor, vocab_size: int) -> int:
    """Token types to count: the vocabulary, or more if a sampled id lies past it."""
    return max(vocab_size, int(tokens[mask].max()) + 1 if bool(mask.any()) else 0)


def _freq_value(counts: Tensor, net: Tensor, vocab_size: int) -> float:
    k = min(counts.numel(), max(5, math.ceil(0.01 * vocab_size)))
    top = torch.sort(counts, descending=True, stable=True).indices[:k]
    energy = net * net
    total = energy.sum()
    return float(energy[top].sum() / total) if float(total) > 0 else 0.0


def _shared_sums(nodes: SharedNodes) -> tuple[Tensor, Tensor]:
    """(response tokens on a node with >= 2 members of their group, response tokens)."""
    on_shared = (nodes.count[nodes.node] >= 2).double().sum()
    return on_shared, torch.tensor(float(nodes.node.numel()), dtype=torch.float64,
                                   device=on_shared.device)


def _shared_value(on_shared: Tensor, n: Tensor) -> float:
    return float(on_shared / n) if float(n) > 0 else math.nan


def shared_frac(nodes: SharedNodes) -> float:
    """Share of response tokens on a node with >= 2 members of their group (NaN: no token)."""
    return _shared_value(*_shared_sums(nodes))


CANCELLATION_KEYS = ("asym", "residual_full", "freq_energy", "shared_frac")
_HEAD = 7  # scalar sums before the per-type counts: asym 2, residual_full 3, shared_frac 2


def cancellation_sums(
    coef: Tensor, tokens: Tensor, mask: Tensor, group: Tensor, advantages: Tensor, n_types: int
) -> Tensor:
    """The additive quantities behind CANCELLATION_KEYS, one float64 vector [HEAD + 2 n_types]
    (n_types: token types counted, at least every id in `tokens`).

    Shared nodes live inside a group, so for pieces that hold disjoint sets of whole groups
    (the processes of one update) these vectors add up to the whole batch's: sum them (e.g. an
    all-reduce) and pass the sum to `metrics_from_sums`.
    """
    nodes = find_shared_nodes(tokens, mask, group)
    counts, net = _freq_sums(coef, tokens, mask, n_types)
    head = torch.stack([*_asym_sums(coef, advantages, nodes), *_residual_sums(coef, nodes),
                        *_shared_sums(nodes)])
    return torch.cat([head.to(counts.device), counts, net])


def metrics_from_sums(sums: Tensor, vocab_size: int) -> dict[str, float]:
    """CANCELLATION_KEYS from (summed) `cancellation_sums`; all NaN if any NaN (a piece that
    could not be measured poisons the sum instead of biasing it)."""
    if bool(sums.isnan().any()):
        return dict.fromkeys(CANCELLATION_KEYS, math.nan)
    n_types = (sums.numel() - _HEAD) // 2
    counts, net = sums[_HEAD:_HEAD + n_types], sums[_HEAD + n_types:]
    return {
        "asym": _asym_value(sums[0], sums[1]),
        "residual_full": _residual_value(sums[2], sums[3], sums[4]),
        "freq_energy": _freq_value(counts, net, vocab_size),
        "shared_frac": _shared_value(sums[5], sums[6]),
    }


def cancellation_metrics(
    coef: Tensor, tokens: Tensor, mask: Tensor, group: Tensor, advantages: Tensor, vocab_size: int
) -> dict[str, float]:
    """CANCELLATION_KEYS of one minibatch (one shared-node pass)."""
    n_types = _types(tokens, mask, vocab_size)
    return metrics_from_sums(
        cancellation_sums(coef, tokens, mask, group, advantages, n_types), vocab_size)
