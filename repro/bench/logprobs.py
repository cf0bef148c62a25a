"""Chunked vs naive per-token log-probs + entropy: forward + backward time and peak memory on CPU.

Both paths compute logp (and entropy) of ``tokens`` hidden states against a ``vocab`` x
``hidden`` lm_head and backpropagate an upstream gradient into the hidden states and the weight,
on the same tensors. Rounds alternate which path goes first; the median time is reported.

Peak memory is the peak of live tensor bytes allocated inside the call (forward, backward, and
the gradients they leave behind), read from the CPU allocator events that ``torch.profiler``
records with ``profile_memory=True`` (the data behind ``export_memory_timeline``). Unlike RSS it
is exact per call, needs no subprocess, and ignores allocator slack and memory of other
processes. Acceptance (from the issue): the chunked path's peak is at most 25% of the naive one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from repro.bench.options import DTYPE_NAMES, LogprobsBenchConfig
from repro.training.logprobs import naive_token_logprobs_and_entropy, token_logprobs_and_entropy

PATHS: dict[str, Callable[..., tuple[Tensor, Tensor | None]]] = {
    "naive": naive_token_logprobs_and_entropy,
    "chunked": token_logprobs_and_entropy,
}
MEMORY_RATIO_MAX = 0.25  # acceptance: chunked peak <= 25% of naive peak
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
LOGIT_STD = 3.0  # weight scale giving logits of std ~3, a peaked-but-not-degenerate softmax


def measure(fn: Callable[[], Any]) -> tuple[Any, int, float]:
    """``(fn(), peak bytes, seconds)``: the peak of live tensor bytes allocated inside ``fn()``.

    Replays the profiler's allocation events (+size on alloc, -size on free) in time order;
    frees of tensors allocated before the call can only lower the curve, so the result is the
    peak growth over the call's starting point (>= 0).
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
    events: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return value, peak, seconds


def _inputs(cfg: LogprobsBenchConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """hidden [N, H] and weight [V, H] (leaves), targets [N], upstream grad [N]."""
    gen = torch.Generator().manual_seed(cfg.seed)
    dtype = DTYPES[cfg.dtype]
    hidden = torch.randn(cfg.tokens, cfg.hidden, generator=gen, dtype=dtype)
    weight = torch.randn(cfg.vocab, cfg.hidden, generator=gen, dtype=dtype)
    weight.mul_(LOGIT_STD / cfg.hidden**0.5)  # in place: no second V x H buffer
    targets = torch.randint(cfg.vocab, (cfg.tokens,), generator=gen)
    grad = torch.randn(cfg.tokens, generator=gen)
    return hidden.requires_grad_(True), weight.requires_grad_(True), targets, grad


def _warm_up(cfg: LogprobsBenchConfig, hidden: Tensor, weight: Tensor, targets: Tensor) -> None:
    """Run both paths once on a small slice so one-time library setup is not timed."""
    n, v = min(cfg.tokens, 16), min(cfg.vocab, 1024)
    h = hidden[:n].detach().requires_grad_(True)
    w = weight[:v].detach().requires_grad_(True)
    t = targets[:n] % v
    for fn in PATHS.values():
        logp, _ = fn(h, w, t, chunk_size=min(cfg.chunk_size, 8))
        logp.sum().backward()


def _step(
    fn: Callable[..., tuple[Tensor, Tensor | None]],
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    grad: Tensor,
    chunk_size: int,
) -> tuple[Tensor, Tensor | None]:
    """One measured unit: logp and entropy, then backward of ``grad . logp``."""
    logp, entropy = fn(hidden, weight, targets, chunk_size=chunk_size, with_entropy=True)
    logp.backward(grad)
    return logp.detach(), entropy


def run_logprobs_bench(cfg: LogprobsBenchConfig, *, show: bool = True) -> dict[str, Any]:
    """Time and peak memory of both paths, interleaved; print a table and return the results."""
    hidden, weight, targets, grad = _inputs(cfg)
    _warm_up(cfg, hidden, weight, targets)
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    peaks: dict[str, list[int]] = {p: [] for p in PATHS}
    outputs: dict[str, tuple[Tensor, Tensor, Tensor]] = {}
    names = list(PATHS)
    for rnd in range(cfg.repeats):
        for name in names[rnd % 2:] + names[: rnd % 2]:
            hidden.grad = weight.grad = None  # both paths start with no gradient buffers
            step = partial(_step, PATHS[name], hidden, weight, targets, grad, cfg.chunk_size)
            (logp, entropy), peak, seconds = measure(step)
            times[name].append(seconds)
            peaks[name].append(peak)
            outputs[name] = (logp, entropy, hidden.grad)
    hidden.grad = weight.grad = None
    result = _summary(cfg, times, peaks, outputs)
    if show:
        print_logprobs_report(result)
    return result


def _summary(
    cfg: LogprobsBenchConfig,
    times: dict[str, list[float]],
    peaks: dict[str, list[int]],
    outputs: dict[str, tuple[Tensor, Tensor, Tensor]],
) -> dict[str, Any]:
    paths = {
        name: {
            "median_s": statistics.median(times[name]),
            "min_s": min(times[name]),
            "times_s": times[name],
            "peak_bytes": max(peaks[name]),
        }
        for name in PATHS
    }
    memory_ratio = paths["chunked"]["peak_bytes"] / max(paths["naive"]["peak_bytes"], 1)
    diffs = {
        key: float((a.float() - b.float()).abs().max())
        for key, a, b in zip(
            ("logp", "entropy", "grad_hidden"), outputs["chunked"], outputs["naive"], strict=True
        )
    }
    return {
        "config": asdict(cfg),
        "env": {"torch": torch.__version__, "threads": torch.get_num_threads()},
        "logits_bytes": cfg.tokens * cfg.vocab * 4,  # one float32 [N, V] tensor, for scale
        "paths": paths,
        "memory_ratio": memory_ratio,
        "time_ratio": paths["chunked"]["median_s"] / paths["naive"]["median_s"],
        "max_abs_diff": diffs,
        "acceptance": [{
            "name": f"chunked peak memory <= {MEMORY_RATIO_MAX:.0%} of naive",
            "value": memory_ratio,
            "passed": memory_ratio <= MEMORY_RATIO_MAX,
        }],
    }


def print_logprobs_report(result: dict[str, Any]) -> None:
    """The two paths side by side as a rich table, then the PASS/FAIL line."""
    cfg, paths = result["config"], result["paths"]
    console = Console()
    console.print(
        f"log-probs + entropy, forward + backward: N={cfg['tokens']:,} tokens, "
        f"V={cfg['vocab']:,}, H={cfg['hidden']:,}, {cfg['dtype']}, chunk={cfg['chunk_size']}; "
        f"median of {cfg['repeats']}; torch {result['env']['torch']}, "
        f"{result['env']['threads']} threads",
        highlight=False,
    )
    table = Table()
    for i, head in enumerate(
        ("path", "median s", "min s", "peak MiB", "peak / [N,V] fp32 logits")
    ):
        table.add_column(head, justify="left" if i == 0 else "right")
    for name, p in paths.items():
        table.add_row(
            name, f"{p['median_s']:.2f}", f"{p['min_s']:.2f}", f"{p['peak_bytes'] / 2**20:,.0f}",
            f"{p['peak_bytes'] / result['logits_bytes']:.2f}",
        )
    table.add_row(
        "chunked / naive", f"{result['time_ratio']:.2f}", "", f"{result['memory_ratio']:.3f}", ""
    )
    console.print(table)
    diffs = ", ".join(f"{k} {v:.1e}" for k, v in result["max_abs_diff"].items())
    console.print(f"max |chunked - naive|: {diffs}", highlight=False)
    for check in result["acceptance"]:
        verdict = "PASS" if check["passed"] else "FAIL"
        console.print(
            f"{verdict}  {check['name']}: {check['value']:.3f}",
            style="green" if check["passed"] else "red", highlight=False,
        )
