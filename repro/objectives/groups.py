"""Group bookkeeping: map arbitrary group ids to compact indices and reduce per group.

Rows of one group answer the same prompt. Groups may be non-contiguous and unequal in size, so
every per-group quantity is a segment reduction (index_add / scatter_reduce) over a compact
index: a few tensor passes whatever the number of groups, and no Python loop over groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Groups:
    """Compact group structure of a batch of B rows."""

    ids: Tensor  # [n] the distinct group ids, sorted
    index: Tensor  # [B] long: compact group index of each row, in [0, n)
    n: int  # number of distinct groups
    sizes: Tensor  # [n] long: rows per group

    @classmethod
    def from_ids(cls, group: Tensor, *, min_size: int = 2, field: str = "group") -> Groups:
        """Build from arbitrary integer ids; every group must have at least `min_size` rows.

        A group of one has no intra-group baseline (GRPO-style centring gives it A = 0 or, as in
        verl, its raw reward), so where whole groups are expected it is almost always a batching
        bug: refuse it loudly. `min_size=1` takes the groups as they come (a minibatch that cuts
        groups, for objectives whose per-sequence terms need no other member).
        """
        import torch

        if group.dim() != 1:
            raise ValueError(f"`{field}` must be 1-D [B], got shape {tuple(group.shape)}")
        if group.dtype.is_floating_point or group.dtype == torch.bool:
            raise ValueError(f"`{field}` must hold integer group ids, got dtype {group.dtype}")
        ids, index = torch.unique(group, return_inverse=True)
        sizes = torch.bincount(index, minlength=ids.numel())
        groups = cls(ids=ids, index=index, n=int(ids.numel()), sizes=sizes)
        groups.require_size(min_size, field)
        return groups

    def require_size(self, min_size: int = 2, field: str = "group") -> None:
        """Refuse a group with fewer than `min_size` rows, naming its ids."""
        if self.n and min_size > 1:
            small = self.sizes < min_size
            if bool(small.any()):
                bad = self.ids[small][:5].tolist()
                raise ValueError(
                    f"`{field}`: group ids {bad} have fewer than {min_size} members; "
                    "every group needs at least two responses to the same prompt "
                    "(keep whole groups together in a minibatch)"
                )

    def sum(self, x: Tensor) -> Tensor:
        """Per-group sum of a row tensor [B] -> [n] (differentiable)."""
        return x.new_zeros(self.n).index_add(0, self.index, x)

    def mean(self, x: Tensor) -> Tensor:
        return self.sum(x) / self.sizes.to(x.dtype)

    def min(self, x: Tensor) -> Tensor:
        """Per-group minimum [B] -> [n] (differentiable: the gradient goes to the argmin rows)."""
        init = x.new_full((self.n,), float("inf"))
        return init.scatter_reduce(0, self.index, x, reduce="amin", include_self=False)

    def max(self, x: Tensor) -> Tensor:
        init = x.new_full((self.n,), float("-inf"))
        return init.scatter_reduce(0, self.index, x, reduce="amax", include_self=False)

    def broadcast(self, per_group: Tensor) -> Tensor:
        """Per-group values [n] -> one value per row [B]."""
        return per_group[self.index]
