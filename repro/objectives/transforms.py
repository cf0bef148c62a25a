"""DFPO's intra-group weight transforms w -> w~ (paper Eq. 17-18 and the ablation controls).

All transforms act per group on the sequence weights w (GSPO ratios s_i) given the advantages A.
DFPO applies them under stop-gradient; with `stop_gradient: false` they stay differentiable,
which is why every operation here is a differentiable torch op (min through scatter_reduce,
the projection through its exact active-set formula).

A transform is one function registered here with `@register_transform(name, cancels=...)`;
`TRANSFORMS` (the names, in registration order) is read from that registry by DFPO's config,
the tests and the benches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from repro.objectives.groups import Groups
from repro.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

Transform = Callable[["Tensor", "Tensor", Groups], "Tensor"]  # (w, A, groups) -> w~

ADV_NORM_TOL = 1e-12  # ||A_g|| below this: the group carries no signal, leave w unchanged
BISECTION_STEPS = 64  # float64 bisection: the bracket shrinks by 2^-64, far below 1e-12

_TRANSFORMS: Registry[Transform] = Registry("transform")
_CANCELLING: set[str] = set()


def register_transform(name: str, *, cancels: bool) -> Callable[[Transform], Transform]:
    """Decorator: register `fn(w, adv, groups) -> w~` under `name`. `cancels`: the transform
    makes sum_i A_i w~_i = 0 in every group, which restores the cancellation of shared tokens."""

    def decorate(fn: Transform) -> Transform:
        _TRANSFORMS.add(name, fn)
        if cancels:
            _CANCELLING.add(name)
        return fn

    return decorate


def apply_transform(name: str, w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Transformed weights w~ [B] for the transform `name`."""
    return _TRANSFORMS.get(name)(w, adv, groups)


def cancelling_transforms() -> tuple[str, ...]:
    """The registered transforms that zero sum_i A_i w~_i in every group."""
    return tuple(name for name in _TRANSFORMS if name in _CANCELLING)


@register_transform("identity", cancels=False)
def identity(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """w~ = w: GSPO's weights without GSPO's clip."""
    return w


@register_transform("min_replace", cancels=True)
def min_replace(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Eq. 17: every member gets the group's smallest weight, so sum_i A_i w~_i = 0."""
    return groups.broadcast(groups.min(w))


@register_transform("group_mean", cancels=True)
def group_mean(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Control (issue 38): every member gets its group's mean weight. It cancels exactly, as
    min_replace does, but keeps the group's average importance correction instead of shrinking
    it to the minimum, so "cancellation" can be told apart from "damping the weights"."""
    return groups.broadcast(groups.mean(w))


@register_transform("group_geomean", cancels=True)
def group_geomean(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Control (issue 47): every member gets its group's geometric mean weight, exp(mean log w).
    It cancels as group_mean does, but one heavy-tailed member (the product reading's s reached
    99 under study 3's reuse, and the arithmetic mean blew up with it) moves it by only its
    log / group size; it lies between the group's minimum and mean. Computed in log space."""
    import torch

    tiny = torch.finfo(w.dtype).tiny  # a weight that underflowed to 0 reads as the smallest
    return groups.broadcast(torch.exp(groups.mean(torch.log(w.clamp_min(tiny)))))


def _projection_coefficient(
    w: Tensor, a: Tensor, groups: Groups, active: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """lam_g = sum_{active} A w / sum_{active} A^2 per group (0 where that is 0), and the
    denominator. active=None means every row (one pass fewer on the common path)."""
    import torch

    aw, aa = a * w, a * a
    if active is not None:
        aw = torch.where(active, aw, torch.zeros_like(aw))
        aa = torch.where(active, aa, torch.zeros_like(aa))
    num, den = groups.sum(aw), groups.sum(aa)
    lam = torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny),
                      torch.zeros_like(num))
    return lam, den


@register_transform("orth_proj", cancels=True)
def orth_proj(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Exact Euclidean projection of w onto {v : A^T v = 0, v >= 0}, per group.

    KKT: v_i = max(0, w_i - lam A_i) with lam solving f(lam) = sum_i A_i max(0, w_i - lam A_i) = 0,
    f non-increasing. If the unconstrained projection is already non-negative it is the answer.
    Otherwise bisect lam in float64 for all groups at once on the bracket
    [min_{A<0} w/A, max_{A>0} w/A] (f >= 0 at the left end, <= 0 at the right end, for w >= 0),
    then recompute lam exactly from the active set {v_i > 0}; that closed form is also what
    carries the gradient when the transform is used without stop-gradient.
    """
    import torch

    w64, a = w.to(torch.float64), adv.to(torch.float64)
    lam, a2 = _projection_coefficient(w64, a, groups)
    signal = groups.broadcast(a2.sqrt() >= ADV_NORM_TOL)
    v = w64 - groups.broadcast(lam) * a
    if bool(((v.detach() < 0) & signal).any()):
        active = _active_set(w64.detach(), a, groups)
        lam, _ = _projection_coefficient(w64, a, groups, active)
        v = torch.where(active, w64 - groups.broadcast(lam) * a, torch.zeros_like(w64))
    return torch.where(signal, v.clamp_min(0), w64).to(w.dtype)


@register_transform("orth_proj_plain", cancels=True)
def orth_proj_plain(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Eq. 18 without constraints: w - (A^T w / ||A||^2) A. May produce negative weights."""
    import torch

    w64, a = w.to(torch.float64), adv.to(torch.float64)
    lam, a2 = _projection_coefficient(w64, a, groups)
    signal = groups.broadcast(a2.sqrt() >= ADV_NORM_TOL)  # ||A|| ~ 0: leave w unchanged
    return torch.where(signal, w64 - groups.broadcast(lam) * a, w64).to(w.dtype)


@register_transform("global_scale", cancels=False)
def global_scale(w: Tensor, adv: Tensor, groups: Groups) -> Tensor:
    """Control: shrink all weights by kappa = mean_g(min_g w) / mean(w), one scalar per batch.

    Same average step shrinkage as min_replace, but the weights keep their spread, so
    cancellation is not restored. Separates "a smaller step" from "restored symmetry".
    """
    kappa = groups.min(w).mean() / w.mean()
    return kappa * w


def _active_set(w: Tensor, a: Tensor, groups: Groups) -> Tensor:
    """Rows with w_i - lam* A_i > 0 at the root lam* of f, found by vectorised bisection."""
    import torch

    if bool((w < 0).any()):
        raise ValueError("orth_proj needs non-negative weights (sequence ratios are > 0)")
    ratio = w / torch.where(a == 0, torch.ones_like(a), a)
    inf = torch.full_like(ratio, float("inf"))
    lo = groups.min(torch.where(a < 0, ratio, inf))
    hi = groups.max(torch.where(a > 0, ratio, -inf))
    finite = torch.isfinite(lo) & torch.isfinite(hi)  # groups with both signs of A
    lo = torch.where(finite, lo, torch.zeros_like(lo))
    hi = torch.where(finite, hi, torch.zeros_like(hi))
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        f = groups.sum(a * (w - groups.broadcast(mid) * a).clamp_min(0))
        lo = torch.where(f > 0, mid, lo)
        hi = torch.where(f > 0, hi, mid)
    return w - groups.broadcast(0.5 * (lo + hi)) * a > 0


TRANSFORMS = tuple(_TRANSFORMS)  # the registered names, in registration order
