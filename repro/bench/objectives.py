"""`repro bench objectives`: what each objective costs, as a ratio to GSPO, on identical inputs.

Two measurements, both reported as ratios taken side by side in one run:

1. Loss + backward of every algorithm on the same minibatch (default 1,024 sequences of up to
   4,096 tokens, groups of 16). The policy is a cheap differentiable map of a leaf tensor,
   logp = -softplus(theta), so the objective itself dominates the time. Reported relative to GSPO.
2. DFPO's transforms alone (`apply_transform`) on 4,096 and 65,536 groups: the time should grow
   about linearly in the number of groups.

Acceptance (from the issue): DFPO with min_replace or orth_proj costs at most 1.15x GSPO's
loss + backward; 65,536 vs 4,096 groups costs between 8x and 24x for the transforms. The bench
prints PASS/FAIL against these numbers; tests never assert timings.

Fairness: every case runs on the same tensors, warm-up rounds are discarded, and the cases are
interleaved round-robin (with a rotating start) so that background load hits all of them alike.
The median of the timed rounds is reported.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from repro.bench.options import ObjectivesBenchConfig
from repro.bench.report import print_objectives_report
from repro.objectives import (
    TRANSFORMS,
    Groups,
    Minibatch,
    algorithm_names,
    apply_transform,
    group_advantages,
    make_config,
    policy_loss,
)

# (case label, algorithm, config overrides): every case of the loss + backward measurement,
# from the registries: each algorithm with its defaults, DFPO once per transform that changes w
# (identity is GSPO's weights without the clip, nothing to time), so a new algorithm or
# transform is measured with no edit here.
TRANSFORM_CASES = tuple(name for name in TRANSFORMS if name != "identity")
LOSS_CASES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *((name, name, {}) for name in algorithm_names() if name != "dfpo"),
    *((f"dfpo+{name}", "dfpo", {"transform": name}) for name in TRANSFORM_CASES),
)
BASELINE = "gspo"
LOSS_RATIO_MAX = 1.15  # acceptance: DFPO (min_replace, orth_proj) <= 1.15x GSPO
LOSS_ACCEPT_CASES = ("dfpo+min_replace", "dfpo+orth_proj")

# Transforms timed alone: TRANSFORM_CASES. "orth_proj/wide_w" feeds weights spread widely enough
# that the unconstrained projection goes negative, so the bisection (active-set) path runs; it
# is reported for information, the acceptance is on the input (w = exp(0.05 z)).
WIDE_CASE = "orth_proj/wide_w"
TRANSFORM_ACCEPT_CASES = ("min_replace", "orth_proj")
SCALING_BAND = (0.5, 1.5)  # x (largest / smallest group count): 8x..24x for 65,536 vs 4,096

W_LOG_STD = 0.05  # transforms alone: w = exp(0.05 z), as in the issue
W_WIDE_LOG_STD = 1.0  # transforms alone, wide case: w = exp(z)
OLD_SEQ_SHIFT = 0.05  # theta_old = theta + 0.05 * z_seq + 0.05 * z_tok: s spreads by a few %
OLD_TOKEN_NOISE = 0.05


# --------------------------------------------------------------------------------------------
# timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _round_robin(
    fns: dict[Any, Callable[[], Any]],
    warmup: int,
    repeats: int,
    device: torch.device,
    reset: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each fn, `repeats` timed rounds after `warmup`, cases interleaved.

    Each round visits every case once, starting one case later than the round before, so no
    case is always first (cold caches) or always last. `reset` runs before each call, untimed.
    """
    names = list(fns)
    times: dict[Any, list[float]] = {n: [] for n in names}
    for rnd in range(warmup + repeats):
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            if reset is not None:
                reset()
            _sync(device)
            t0 = time.perf_counter()
            fns[name]()
            _sync(device)
            elapsed = time.perf_counter() - t0
            if rnd >= warmup:
                times[name].append(elapsed)
    return times


# --------------------------------------------------------------------------------------------
# inputs


def _shuffled_groups(n_groups: int, group_size: int, gen: torch.Generator) -> Tensor:
    """[n_groups * group_size] ids, group_size rows each, at random (non-contiguous) positions."""
    return torch.randperm(n_groups * group_size, generator=gen) // group_size


def _advantages(group: Tensor, gen: torch.Generator) -> Tensor:
    reward = torch.bernoulli(torch.full(group.shape, 0.5), generator=gen)
    adv, _ = group_advantages(reward, group)
    return adv


@dataclass
class _LossInputs:
    theta: Tensor  # [B, T] float32 leaf: the "policy parameters"
    logp_old: Tensor  # [B, T] float32, = -softplus(theta_old)
    mask: Tensor  # [B, T] bool
    advantages: Tensor  # [B] float32
    group: Tensor  # [B] long, shuffled

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def _loss_inputs(cfg: ObjectivesBenchConfig, device: torch.device) -> _LossInputs:
    gen = torch.Generator().manual_seed(cfg.seed)
    b, t = cfg.seqs, cfg.max_len
    lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    group = _shuffled_groups(b // cfg.group_size, cfg.group_size, gen)
    adv = _advantages(group, gen)
    theta = torch.randn(b, t, generator=gen)
    theta_old = (
        theta
        + OLD_SEQ_SHIFT * torch.randn(b, 1, generator=gen)
        + OLD_TOKEN_NOISE * torch.randn(b, t, generator=gen)
    )
    logp_old = -F.softplus(theta_old)
    return _LossInputs(
        theta=theta.to(device).requires_grad_(True),
        logp_old=logp_old.to(device),
        mask=mask.to(device),
        advantages=adv.to(device),
        group=group.to(device),
    )


def _loss_step(cfg: Any, inp: _LossInputs, last: dict[str, float]) -> None:
    """One timed unit: policy map, Minibatch, policy_loss, backward."""
    logp = -F.softplus(inp.theta)
    batch = Minibatch(
        logp=logp, logp_old=inp.logp_old, mask=inp.mask, advantages=inp.advantages,
        group=inp.group,
    )
    loss, metrics = policy_loss(cfg, batch)
    loss.backward()
    last.clear()
    last.update(metrics)
    last["loss"] = float(loss.detach())


# --------------------------------------------------------------------------------------------
# the two measurements


def bench_loss_backward(cfg: ObjectivesBenchConfig) -> dict[str, Any]:
    device = torch.device(cfg.device)
    inp = _loss_inputs(cfg, device)
    last: dict[str, dict[str, float]] = {label: {} for label, _, _ in LOSS_CASES}
    fns = {
        label: partial(_loss_step, make_config(algo, **over), inp, last[label])
        for label, algo, over in LOSS_CASES
    }

    def reset() -> None:
        inp.theta.grad = None

    times = _round_robin(fns, cfg.warmup, cfg.repeats, device, reset)
    base = statistics.median(times[BASELINE])
    base_min = min(times[BASELINE])
    cases = {}
    for label, algo, over in LOSS_CASES:
        med = statistics.median(times[label])
        cases[label] = {
            "algorithm": algo,
            "overrides": dict(over),
            "median_s": med,
            "min_s": min(times[label]),
            "times_s": times[label],
            "ratio_to_gspo": med / base,
            "min_ratio_to_gspo": min(times[label]) / base_min,
            "loss": last[label].get("loss", math.nan),
            "w_min": last[label].get("w_min", math.nan),
            "w_max": last[label].get("w_max", math.nan),
        }
    return {
        "shape": [cfg.seqs, cfg.max_len],
        "tokens": inp.tokens,
        "groups": cfg.seqs // cfg.group_size,
        "cases": cases,
    }


def bench_transforms(cfg: ObjectivesBenchConfig) -> dict[str, Any]:
    device = torch.device(cfg.device)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    sizes = list(cfg.transform_groups)
    names = [*TRANSFORM_CASES, WIDE_CASE]
    fns: dict[tuple[str, int], Callable[[], Tensor]] = {}
    active_set_path: dict[str, dict[int, bool]] = {"orth_proj": {}, WIDE_CASE: {}}
    for n in sizes:
        group = _shuffled_groups(n, cfg.group_size, gen)
        adv = _advantages(group, gen).to(device)
        groups = Groups.from_ids(group.to(device))
        w = torch.exp(W_LOG_STD * torch.randn(group.shape, generator=gen)).to(device)
        w_wide = torch.exp(W_WIDE_LOG_STD * torch.randn(group.shape, generator=gen)).to(device)
        for name in TRANSFORM_CASES:
            fns[name, n] = partial(apply_transform, name, w, adv, groups)
        fns[WIDE_CASE, n] = partial(apply_transform, "orth_proj", w_wide, adv, groups)
        # orth_proj bisects only when the unconstrained projection has a negative entry.
        for name, ww in (("orth_proj", w), (WIDE_CASE, w_wide)):
            plain = apply_transform("orth_proj_plain", ww, adv, groups)
            active_set_path[name][n] = bool((plain < 0).any())
    # All sizes interleaved too, so a change of background load cannot fake the scaling.
    times = _round_robin(fns, cfg.warmup, cfg.repeats, device)
    medians = {name: {n: statistics.median(times[name, n]) for n in sizes} for name in names}
    lo, hi = min(sizes), max(sizes)
    cases = {}
    for name in names:
        scaling = medians[name][hi] / medians[name][lo] if hi != lo else None
        cases[name] = {"median_s": medians[name], "scaling": scaling}
        if name in active_set_path:
            cases[name]["active_set_path"] = active_set_path[name]
    return {
        "group_size": cfg.group_size,
        "n_groups": sizes,
        "size_ratio": hi / lo,
        "cases": cases,
    }


def _acceptance(loss: dict[str, Any], transforms: dict[str, Any]) -> list[dict[str, Any]]:
    checks = []
    for label in LOSS_ACCEPT_CASES:
        ratio = loss["cases"][label]["ratio_to_gspo"]
        checks.append({
            "name": f"{label} loss+backward <= {LOSS_RATIO_MAX}x gspo",
            "value": ratio,
            "passed": ratio <= LOSS_RATIO_MAX,
            "note": f"min-time ratio {loss['cases'][label]['min_ratio_to_gspo']:.3f}",
        })
    size_ratio = transforms["size_ratio"]
    if size_ratio > 1:
        lo_x, hi_x = (f * size_ratio for f in SCALING_BAND)
        n_lo, n_hi = min(transforms["n_groups"]), max(transforms["n_groups"])
        for name in TRANSFORM_ACCEPT_CASES:
            scaling = transforms["cases"][name]["scaling"]
            checks.append({
                "name": f"{name} time {n_hi} vs {n_lo} groups in [{lo_x:g}x, {hi_x:g}x]",
                "value": scaling,
                "passed": lo_x <= scaling <= hi_x,
            })
    return checks


def run_objectives_bench(cfg: ObjectivesBenchConfig, *, show: bool = True) -> dict[str, Any]:
    """Run both measurements, print them as tables and return the results."""
    device = torch.device(cfg.device)
    threads_before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        result = _run(cfg, device)
    finally:
        torch.set_num_threads(threads_before)
    if show:
        print_objectives_report(result)
    return result


def _run(cfg: ObjectivesBenchConfig, device: torch.device) -> dict[str, Any]:
    env = {
        "torch": torch.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
    }
    loss = bench_loss_backward(cfg)
    transforms = bench_transforms(cfg)
    return {
        "config": asdict(cfg),
        "env": env,
        "loss_backward": loss,
        "transforms": transforms,
        "acceptance": _acceptance(loss, transforms),
    }
