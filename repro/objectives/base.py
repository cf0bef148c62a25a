"""What every objective shares: the minibatch it consumes, config validation, base config."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from repro.objectives.groups import Groups

if TYPE_CHECKING:
    import torch
    from torch import Tensor


def require(ok: bool, owner: Any, name: str, rule: str) -> None:
    """Raise a ValueError that names the config class, the field and the offending value."""
    if not ok:
        cls = type(owner).__name__
        raise ValueError(f"{cls}.{name} {rule}, got {getattr(owner, name)!r}")


AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
# Readings of the sequence ratio s_i (docs/objectives.md): "mean" = GSPO's length-normalised
# exp(mean_t log r), "product" = the paper's prod_t r = exp(sum_t log r).
SEQUENCE_RATIOS = ("mean", "product")


@dataclass
class LossConfig:
    """Fields every policy loss has. Subclasses set `name` and may change the defaults. A field
    that bounds the ratio carries metadata `clip`: "low", "high" or "both" (one symmetric
    bound), so a trainer's clip settings map onto any objective (repro.integrations.verl_config:
    `clip_fields`) with no list of which fields clip."""

    name: ClassVar[str] = ""

    loss_agg_mode: str = field(
        default="token-mean",
        metadata={"help": f"How per-token losses become one scalar, verl names: {AGG_MODES}. "
                  "Modes whose normaliser differs between members of a group "
                  "(seq-mean-token-mean) break shared-token cancellation."},
    )
    loss_norm_length: int | None = field(
        default=None,
        metadata={"help": "L_norm of seq-mean-token-sum-norm (Dr.GRPO): a run constant, normally "
                  "the max response length. None = the padded length of each minibatch."},
    )

    def __post_init__(self) -> None:
        require(self.loss_agg_mode in AGG_MODES, self, "loss_agg_mode",
                f"must be one of {AGG_MODES}")
        require(
            self.loss_norm_length is None or self.loss_norm_length > 0,
            self, "loss_norm_length", "must be a positive integer or None",
        )


@dataclass(frozen=True)
class Minibatch:
    """One optimizer minibatch of B responses padded to T tokens.

    logp carries the graph; logp_old is the behaviour policy (detached here). A minibatch may
    cut groups (micro-batches of verl or TRL do) for objectives whose per-sequence terms need no
    other member of the group (GRPO, GRPO-fix, GSPO); the ones that couple a group's members
    (DFPO) need whole groups, or `seq_weight` computed over them (`Algorithm.group_weights`).
    """

    logp: Tensor  # [B, T] float, log pi_theta of the response tokens
    logp_old: Tensor  # [B, T] float, log pi_old of the same tokens
    mask: Tensor  # [B, T] bool, True on response tokens
    advantages: Tensor  # [B] float, one per sequence
    group: Tensor  # [B] int, rows with equal ids answer the same prompt
    # [B] detached per-sequence weights computed beforehand over whole groups (DFPO's w~), for a
    # minibatch that holds only part of a group (split across micro-steps or processes): the
    # transform needs the whole group, so the caller computes it first with `dfpo_weights`.
    seq_weight: Tensor | None = None

    def __post_init__(self) -> None:
        import torch

        if self.logp.dim() != 2:
            raise ValueError(f"`logp` must be [B, T], got shape {tuple(self.logp.shape)}")
        shape = self.logp.shape
        for name in ("logp_old", "mask"):
            got = getattr(self, name).shape
            if got != shape:
                raise ValueError(f"`{name}` shape {tuple(got)} != `logp` shape {tuple(shape)}")
        for name in ("advantages", "group"):
            got = getattr(self, name).shape
            if got != shape[:1]:
                raise ValueError(f"`{name}` must be [B] = [{shape[0]}], got {tuple(got)}")
        if self.mask.dtype != torch.bool:
            raise ValueError(f"`mask` must be bool, got {self.mask.dtype}")
        if not self.logp.dtype.is_floating_point:
            raise ValueError(f"`logp` must be floating point, got {self.logp.dtype}")
        if self.seq_weight is not None and self.seq_weight.shape != shape[:1]:
            raise ValueError(f"`seq_weight` must be [B] = [{shape[0]}], got "
                             f"{tuple(self.seq_weight.shape)}")
        object.__setattr__(self, "logp_old", self.logp_old.detach())
        if self.seq_weight is not None:
            object.__setattr__(self, "seq_weight", self.seq_weight.detach())

    @cached_property
    def present_groups(self) -> Groups:
        """The groups as far as this minibatch holds them (a cut group may have one row here)."""
        return Groups.from_ids(self.group, min_size=1)

    @cached_property
    def groups(self) -> Groups:
        """The groups, each with at least two rows: for computations across a group's members,
        which a group cut to one row here would silently get wrong."""
        self.present_groups.require_size(2)
        return self.present_groups

    @property
    def dtype(self) -> torch.dtype:
        """Ratio arithmetic dtype: float32 at least, whatever the model dtype."""
        import torch

        return torch.promote_types(self.logp.dtype, torch.float32)

    def logp_compute(self) -> Tensor:
        return self.logp.to(self.dtype)

    def token_log_ratio(self) -> Tensor:
        """log r_{i,t} = logp - logp_old in float32 (with grad), 0 on padding."""
        import torch

        diff = self.logp_compute() - self.logp_old.to(self.dtype)
        return torch.where(self.mask, diff, torch.zeros_like(diff))

    def lengths(self) -> Tensor:
        """|y_i| as float, at least 1 so an empty response gives log s = 0."""
        return self.mask.sum(-1).clamp_min(1).to(self.dtype)

    def seq_log_ratio(self, reading: str = "mean") -> Tensor:
        """log s_i (with grad): mean_t log r_{i,t} (GSPO's length-normalised ratio) or, for
        reading="product", sum_t log r_{i,t} (the paper's product of token ratios, kept in log
        space: the product of |y_i| float ratios would under- or overflow on long responses)."""
        total = self.token_log_ratio().sum(-1)
        if reading == "product":
            return total
        if reading != "mean":
            raise ValueError(f"unknown sequence ratio reading {reading!r}; known: "
                             f"{SEQUENCE_RATIOS}")
        return total / self.lengths()

    def unit(self) -> Tensor:
        """exp(logp - sg[logp]): value 1, gradient grad(logp). Lets detached weights multiply it."""
        import torch

        logp = self.logp_compute()
        return torch.exp(logp - logp.detach())
