"""`repro theory`: the learning tax and the log-odds drift, exactly, on a tabular policy.

Each algorithm trains the same fresh TabularPolicy (repro.theory.policy) from the same seed with
the same budget (compute-matched): per step, `groups` x `group_size` responses are sampled from
the current policy, rewarded, turned into group advantages (`group_advantages`), logp_old is
taken once (detached), then `updates` (K) plain-SGD steps follow on that same batch with the
algorithm's `policy_loss`, so the sequence ratios s != 1 from the second update on.

Decisions (why):
- Plain SGD (TabularPolicy.sgd_step), not Adam: Adam normalises each coordinate, so it would
  blow a residual of 1e-9 on a cancelled template logit up to a full-size step; with SGD the
  step is the gradient, and the residual's own step (kl_tax) can be computed exactly.
- Loss configs are the package defaults (GSPO clips s to [1 - 3e-4, 1 + 4e-4], which on
  updates 2..K clips most sequences at this lr: that is GSPO as specified, recorded as
  clip_frac). The configs are stored in the Parquet metadata ("algorithms").
- Metrics are exact (read off the table, repro.theory.probes): per step, kl_template = sum over
  the 3 template contexts of KL(pi_step(.|h) || pi_step-1(.|h)) and its cumulative sum;
  logodds_drift = log P(A|x)/P(B|x) minus its initial value (Corollary 3.2; the template factor
  cancels in the ratio); p_correct (= expected reward), p_template, next-token entropy at the
  answer context.
- kl_template also contains legitimate learning: responses that leave the template earn 0, so
  a group with a deviating member pushes the template up. Only nodes shared by a whole group are
  reward-irrelevant, so the tax of Proposition 3.1 is also measured on its own: kl_tax = the
  template KL between the step's start and the start plus the SGD steps that the non-cancelled
  shared-node residual alone makes over the K updates (per step, and kl_tax_cum).
  template_residual is that residual's share, sum_g |sum_i c_i| / sum_g sum_i |c_i| (mean over
  the K updates), from one autograd call on policy_loss per update. clip_frac and
  zero_adv_frac are batch diagnostics.
- Seeds are seed, seed + 1, ..., seed + n_seeds - 1; the Parquet has one row per
  algorithm x seed x step (step 1..steps, values after that step's K updates).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch import Tensor

from repro import __version__
from repro.atomic import atomic_file
from repro.catalogue import objective_of
from repro.objectives import (
    LossConfig,
    Minibatch,
    algorithm_names,
    group_advantages,
    make_config,
    policy_loss,
)
from repro.results import THEORY
from repro.theory.config import TheoryConfig
from repro.theory.policy import TEMPLATE_CONTEXTS, Rollout, TabularPolicy
from repro.theory.probes import kl_sum, probe, residual_step, shared_template_net

# label -> (algorithm, config overrides); everything else is the package default. Every
# registered algorithm is an arm with its defaults (so a new one joins with no edit here), DFPO
# once per transform of the paper (Eq. 17 and 18): the run catalogue's labels for them.
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (name, {}) for name in algorithm_names() if name != "dfpo"},
    **{label: objective_of(label) for label in ("dfpo_min", "dfpo_orth")},
}

def train_on_batch(
    policy: TabularPolicy, cfg: LossConfig, rollout: Rollout, adv: Tensor, updates: int, lr: float
) -> dict[str, float]:
    """K plain-SGD updates of `policy_loss` on one rollout batch (logp_old fixed at its start).

    Returns kl_tax: KL(pi_start + residual steps || pi_start) at the template contexts, the
    Proposition 3.1 tax of this rollout batch (comparable to kl_template of the step); and the
    means over the updates of template_residual and clip_frac.
    """
    logp_old = policy.logp(rollout).detach()
    z_start = policy.logits[TEMPLATE_CONTEXTS].detach().clone()
    drift = torch.zeros_like(z_start)
    out = {"template_residual": 0.0, "clip_frac": 0.0}
    for _ in range(updates):
        logp = policy.logp(rollout)
        logp.retain_grad()
        batch = Minibatch(logp, logp_old, rollout.mask, adv, rollout.group)
        loss, metrics = policy_loss(cfg, batch)
        loss.backward()
        net, share = shared_template_net(rollout, -logp.grad)
        drift += residual_step(policy, net, lr)
        policy.sgd_step(lr)
        out["template_residual"] += share / updates
        out["clip_frac"] += metrics["clip_frac"] / updates
    before = torch.log_softmax(z_start, dim=-1)
    out["kl_tax"] = kl_sum(torch.log_softmax(z_start + drift, dim=-1), before)
    return out


def run_arm(cfg: TheoryConfig, label: str, seed: int) -> list[dict[str, Any]]:
    """Train one algorithm from scratch for cfg.steps; one exact-metrics row per step."""
    name, overrides = ARMS[label]
    loss_cfg = make_config(name, **overrides)
    policy = TabularPolicy(cfg.template_prob)
    gen = torch.Generator().manual_seed(seed)
    prev = policy.log_probs_at(TEMPLATE_CONTEXTS)
    start = probe(policy)["logodds"]
    rows: list[dict[str, Any]] = []
    kl_cum = tax_cum = 0.0
    for step in range(1, cfg.steps + 1):
        rollout = policy.sample(cfg.groups, cfg.group_size, gen)
        adv, adv_metrics = group_advantages(rollout.reward(), rollout.group)
        update = train_on_batch(policy, loss_cfg, rollout, adv, cfg.updates, cfg.lr)
        now = policy.log_probs_at(TEMPLATE_CONTEXTS)
        kl = kl_sum(now, prev)
        kl_cum, tax_cum, prev = kl_cum + kl, tax_cum + update["kl_tax"], now
        probes = probe(policy)
        rows.append({
            "algorithm": label, "seed": seed, "step": step,
            "kl_template": kl, "kl_template_cum": kl_cum, "kl_tax_cum": tax_cum,
            "logodds_drift": probes["logodds"] - start, **probes, **update,
            "zero_adv_frac": adv_metrics["zero_adv_frac"],
        })
    return rows


def run_theory(cfg: TheoryConfig, out: Path) -> pa.Table:
    """Run every algorithm over the seeds; write theory.parquet and the figure; print a summary."""
    from repro.theory.figure import plot_theory

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: intra-op threads only add contention
    try:
        rows = [
            row
            for label in ARMS
            for seed in range(cfg.seed, cfg.seed + cfg.n_seeds)
            for row in run_arm(cfg, label, seed)
        ]
    finally:
        torch.set_num_threads(threads)
    table = pa.Table.from_pylist(rows, schema=THEORY).replace_schema_metadata(_metadata(cfg))
    out.mkdir(parents=True, exist_ok=True)
    atomic_file(out / "theory.parquet", lambda tmp: pq.write_table(table, tmp))
    plot_theory(table, out)
    print(summary(table))
    return table


def _metadata(cfg: TheoryConfig) -> dict[str, str]:
    algorithms = {
        label: {"algorithm": name, **dataclasses.asdict(make_config(name, **overrides))}
        for label, (name, overrides) in ARMS.items()
    }
    return {
        "config": json.dumps(dataclasses.asdict(cfg)),
        "algorithms": json.dumps(algorithms),
        "repro_version": __version__,
    }


def summary(table: pa.Table) -> str:
    """Per algorithm, mean (sd) over seeds: final-step metrics, then run means of diagnostics."""
    final_cols = ("kl_template_cum", "kl_tax_cum", "|logodds_drift|", "logodds_drift", "p_correct")
    run_cols = ("template_residual", "clip_frac")
    lines = [f"{'algorithm':<18}" + "".join(f"{c:>20}" for c in final_cols + run_cols)]
    table = table.append_column("|logodds_drift|", pc.abs(table["logodds_drift"]))
    last = pc.max(table["step"])
    for label in ARMS:
        run = table.filter(pc.equal(table["algorithm"], label))
        final = run.filter(pc.equal(run["step"], last))
        per_seed = run.group_by("seed").aggregate([(c, "mean") for c in run_cols])
        values = [final[c].to_pylist() for c in final_cols]
        values += [per_seed[f"{c}_mean"].to_pylist() for c in run_cols]
        lines.append(f"{label:<18}" + "".join(f"{_mean_sd(v):>20}" for v in values))
    return "\n".join(lines)


def _mean_sd(x: list[float]) -> str:
    sd = statistics.stdev(x) if len(x) > 1 else 0.0
    return f"{statistics.fmean(x):.4g} ({sd:.2g})"
