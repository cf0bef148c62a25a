"""Shared nodes: (group, prefix, token) that occur in two or more members of a group.

Members of a group answer the same prompt, so two response tokens sit at the same history iff
their response prefixes up to and including the token are equal. Prefixes are hashed with two
polynomial hashes (moduli near 2^31, so every cumsum fits in int64), all positions at once; a
node is a unique (group, position, hash) triple.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from repro.objectives import Groups

_HASHES = ((2_147_483_647, 1_000_003), (2_147_483_629, 999_983))  # (prime modulus, base)


@dataclass(frozen=True)
class SharedNodes:
    """Node structure of the response tokens of a batch.

    rows, cols: [N] positions of the valid (mask True) tokens; node: [N] node id of each;
    count: [n_nodes] members at each node; full: [n_nodes] node shared by its whole group;
    group_index: [N] compact group index of each token.
    """

    rows: Tensor
    cols: Tensor
    node: Tensor
    count: Tensor
    full: Tensor
    group_index: Tensor

    @property
    def n_nodes(self) -> int:
        return int(self.count.numel())

    def node_sum(self, x: Tensor) -> Tensor:
        """Sum a per-token value [N] over the members of each node -> [n_nodes]."""
        return x.new_zeros(self.n_nodes).index_add(0, self.node, x)


@lru_cache(maxsize=8)
def _powers(length: int, modulus: int, base: int) -> Tensor:
    out, p = [], 1
    for _ in range(length):
        out.append(p)
        p = p * base % modulus
    return torch.tensor(out, dtype=torch.int64)


def _prefix_hash(tokens: Tensor) -> Tensor:
    """[B, T] int -> [B, T] int64 hash of tokens[:, :t+1] (equal prefixes, equal hashes)."""
    t = tokens.to(torch.int64) + 1
    keys = []
    for modulus, base in _HASHES:
        pw = _powers(t.shape[1], modulus, base).to(t.device)
        keys.append(torch.cumsum(t * pw % modulus, dim=1) % modulus)
    return keys[0] * _HASHES[1][0] + keys[1]


def find_shared_nodes(tokens: Tensor, mask: Tensor, group: Tensor) -> SharedNodes:
    """Nodes of all valid response tokens; tokens [B, T] int, mask [B, T] bool, group [B]."""
    groups = Groups.from_ids(group)
    rows, cols = mask.nonzero(as_tuple=True)
    h = _prefix_hash(tokens)[rows, cols]
    gidx = groups.index[rows]
    _, node = torch.unique(torch.stack([gidx, cols, h]), dim=1, return_inverse=True)
    n_nodes = int(node.max()) + 1 if node.numel() else 0
    count = torch.bincount(node, minlength=n_nodes)
    node_group = torch.zeros(n_nodes, dtype=torch.int64, device=tokens.device)
    node_group[node] = gidx
    full = count == groups.sizes[node_group]
    return SharedNodes(rows=rows, cols=cols, node=node, count=count, full=full, group_index=gidx)
