"""The registry is the one list of algorithms: a new algorithm file registers itself with no other
edit (`repro train --help`, `policy_loss`, the config checks, a dry run of the workflow), and the
algorithm says whether it couples a group's members. Group-independent algorithms accept a
minibatch that cuts groups (verl and TRL micro-batches do); group-coupled ones refuse it by name.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_reference_parity import tensors, verl_gspo_token, verl_vanilla_token_mean
from test_workflow import copy_workflow, jobs_planned, ok, snakemake

from repro.objectives import (
    TRANSFORMS,
    Groups,
    Minibatch,
    Normalisers,
    algorithm_names,
    apply_transform,
    cancelling_transforms,
    get_algorithm,
    group_advantages,
    make_config,
    policy_loss,
)

# rows of tensors()'s batch (groups: row % 2): group 0 keeps one row, group 1 three
CUT = torch.tensor([0, 1, 3, 5])
REST = torch.tensor([2, 4, 6, 7])
INDEPENDENT = [n for n in algorithm_names() if not get_algorithm(n).couples_groups]
COUPLED = [n for n in algorithm_names() if get_algorithm(n).couples_groups]


def grpo_fix_formula(logp, old, adv, mask, eps):
    """sg[clip(r, 1-eps, 1+eps)] A log pi, token-mean; value sum of the coefficients."""
    coef = torch.exp(logp - old).detach().clamp(1 - eps, 1 + eps) * adv[:, None]
    per_tok = -coef * torch.exp(logp - logp.detach())
    return (per_tok * mask).sum() / mask.sum()


FORMULAS = {  # name -> (config overrides, formula(logp, old, adv, mask) -> loss)
    "grpo": ({}, lambda *t: verl_vanilla_token_mean(*t, 0.2, 0.27)),
    "gspo": ({"eps_low": 0.05, "eps_high": 0.06}, lambda *t: verl_gspo_token(*t, 0.05, 0.06)),
    "grpo_fix": ({}, lambda *t: grpo_fix_formula(*t, 0.2)),
}


def cut(rows: torch.Tensor, seed: int = 0):
    """The rows `rows` of a batch whose advantages were centred over whole groups."""
    base, old, mask, group, adv = tensors(seed)
    return base[rows].clone().requires_grad_(True), old[rows], mask[rows], group[rows], adv[rows]


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_a_minibatch_that_cuts_a_group_gives_the_formula(name):
    overrides, formula = FORMULAS[name]
    cfg = make_config(name, **overrides)
    signal = 0.0
    for seed in range(3):
        logp, old, mask, group, adv = cut(CUT, seed)
        assert Groups.from_ids(group, min_size=1).sizes.min() == 1  # a group with one row here
        loss, metrics = policy_loss(cfg, Minibatch(logp, old, mask, adv, group))
        ref_logp = logp.detach().clone().requires_grad_(True)
        ref = formula(ref_logp, old, adv, mask)
        torch.testing.assert_close(loss, ref, atol=1e-12, rtol=1e-10)
        (g,) = torch.autograd.grad(loss, logp)
        (g_ref,) = torch.autograd.grad(ref, ref_logp)
        torch.testing.assert_close(g, g_ref, atol=1e-12, rtol=1e-10)
        signal += float(g.abs().sum())
        assert all(math.isfinite(v) for k, v in metrics.items() if k != "w_shift"), metrics
    assert signal > 0


@pytest.mark.parametrize("name", INDEPENDENT)
def test_pieces_that_cut_groups_sum_to_the_whole_minibatch(name):
    """Every group-independent algorithm: two pieces cutting every group, normalised by the
    whole minibatch's counts, give its loss and gradient."""
    cfg = make_config(name)
    base, old, mask, group, adv = tensors(1)
    logp = base.clone().requires_grad_(True)
    whole, _ = policy_loss(cfg, Minibatch(logp, old, mask, adv, group))
    (g_whole,) = torch.autograd.grad(whole, logp)
    norm = Normalisers(num_tokens=float(mask.sum()), num_seqs=float((mask.sum(-1) > 0).sum()))
    total = sum(policy_loss(cfg, Minibatch(logp[r], old[r], mask[r], adv[r], group[r]), norm)[0]
                for r in (CUT, REST))
    (g_parts,) = torch.autograd.grad(total, logp)
    torch.testing.assert_close(total, whole, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(g_parts, g_whole, atol=1e-12, rtol=1e-10)
    assert float(g_whole.abs().max()) > 0


@pytest.mark.parametrize("name", COUPLED)
def test_a_group_coupled_algorithm_refuses_a_cut_group_by_name(name):
    assert "dfpo" in COUPLED
    logp, old, mask, group, adv = cut(CUT)
    with pytest.raises(ValueError, match=rf"^{name} couples the members of a group.*fewer than 2"):
        policy_loss(make_config(name), Minibatch(logp, old, mask, adv, group))


def test_the_spread_of_s_is_over_the_members_present_and_nan_without_a_pair():
    cfg = make_config("gspo")
    logp, old, mask, group, adv = cut(CUT)
    _, metrics = policy_loss(cfg, Minibatch(logp, old, mask, adv, group))
    s = torch.exp((((logp - old) * mask).sum(-1) / mask.sum(-1)).detach())[1:]  # group 1's rows
    assert metrics["s_spread"] == pytest.approx(float((s.max() - s.min()) / s.mean()), rel=1e-12)
    assert metrics["s_spread"] > 0
    logp, old, mask, group, adv = cut(torch.tensor([0, 1]))  # one row of each group
    _, metrics = policy_loss(cfg, Minibatch(logp, old, mask, adv, group))
    assert math.isnan(metrics["s_spread"]) and math.isnan(metrics["s_spread_product"])
    assert math.isfinite(metrics["ppo_kl"]) and math.isfinite(metrics["clip_frac"])


def test_the_cancels_flag_of_every_transform_is_true():
    """Registered `cancels=True` zeroes sum_i A_i w~_i; the others leave it non-zero here."""
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    w = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.7, 1.1], dtype=torch.float64)
    adv, _ = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), group)
    groups = Groups.from_ids(group)
    for name in TRANSFORMS:
        residual = float(groups.sum(apply_transform(name, w, adv.double(), groups)
                                    * adv.double()).abs().max())
        assert (residual < 1e-12) == (name in cancelling_transforms()), (name, residual)


def test_every_registry_refuses_an_unknown_name_and_a_second_entry_in_one_line():
    """Algorithms, transforms and sources share repro.registry.Registry: one message each."""
    from repro.objectives.registry import register_algorithm
    from repro.objectives.transforms import register_transform
    from repro.training.sources import Source, get_source, register_source

    for lookup, kind in ((get_algorithm, "algorithm"), (get_source, "source"),
                         (lambda name: apply_transform(name, None, None, None), "transform")):
        with pytest.raises(ValueError, match=rf"^unknown {kind} 'nope'; known: \['"):
            lookup("nope")
    dfpo = get_algorithm("dfpo")
    register_algorithm(dfpo.config_cls, group_weights=dfpo.group_weights)(dfpo.loss_fn)  # again
    with pytest.raises(ValueError, match=r"^algorithm 'dfpo' is already registered$"):
        register_algorithm(dfpo.config_cls)(lambda cfg, batch, norm=None: None)
    with pytest.raises(ValueError, match=r"^transform 'identity' is already registered$"):
        register_transform("identity", cancels=False)(lambda w, adv, groups: w)
    reuse = get_source("reuse")
    with pytest.raises(ValueError, match=r"^source 'reuse' is already registered$"):
        register_source(Source("reuse", {"epochs": 3}, reuse.engines, "another"))


THROWAWAY = '''
"""A throwaway objective (tests/test_registry.py): REINFORCE with a scale."""

from dataclasses import dataclass, field

import torch

from repro.objectives.aggregation import aggregate
from repro.objectives.base import LossConfig
from repro.objectives.metrics import common_metrics
from repro.objectives.registry import register_algorithm


@dataclass
class ThrowawayConfig(LossConfig):
    name = "throwaway"

    scale: float = field(default=1.0, metadata={"help": "Multiplies the loss."})


@register_algorithm(ThrowawayConfig)
def throwaway_loss(cfg, batch, norm=None):
    adv = batch.advantages.to(batch.dtype)[:, None]
    loss = aggregate(-cfg.scale * adv * batch.unit(), batch.mask, cfg, norm)
    return loss, common_metrics(batch, batch.unit().detach(), torch.zeros_like(batch.mask))
'''

CHECKS = '''
import torch

from repro.objectives import Minibatch, make_config, policy_loss
from repro.training.config import load_train_config

logp = -torch.rand(3, 5, dtype=torch.float64, requires_grad=True)
mask = torch.ones(3, 5, dtype=torch.bool)
adv = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
group = torch.tensor([0, 0, 1])  # group 1 cut to one row: the throwaway couples nothing
loss, _ = policy_loss(make_config("throwaway", scale=2.0),
                      Minibatch(logp, logp.detach(), mask, adv, group))
assert abs(float(loss) - (-2.0 * float(adv.sum()) * 5 / 15)) < 1e-12, float(loss)
cfg = load_train_config(None, ["model=m", "algorithm=throwaway", "objective.scale=2.0"])
assert cfg.objective.scale == 2.0
try:
    load_train_config(None, ["model=m", "algorithm=throwaway", "objective.bogus=1"])
except ValueError as err:
    print("refused:", err)
'''


@pytest.mark.slow
def test_a_new_algorithm_file_or_benchmark_spec_is_the_only_edit(tmp_path):
    """One file with one @register_algorithm in a copy of the workflow: `repro train --help`
    lists it, policy_loss and the train config check take it, and a dry run plans its runs
    from one catalogue entry of a config overlay (no edit of schema, rules or any list); one
    spec YAML is a benchmark the registry lists and a dry run evaluates."""
    wd = copy_workflow(tmp_path / "wf")
    (wd / "repro" / "objectives" / "throwaway.py").write_text(THROWAWAY.lstrip())
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(wd)}

    def python(*args: str) -> str:
        proc = subprocess.run([sys.executable, *args], cwd=wd, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert "throwaway" in python("-m", "repro", "train", "--help")
    checked = python("-c", textwrap.dedent(CHECKS))
    assert "refused:" in checked and "ThrowawayConfig" in checked and "bogus" in checked

    # A benchmark is one spec YAML too: the registry lists it, the workflow evaluates it.
    spec = (wd / "repro" / "benchmarks" / "specs" / "synth-rule.yaml").read_text()
    (wd / "repro" / "benchmarks" / "specs" / "synth-throwaway.yaml").write_text(
        spec.replace("name: synth-rule", "name: synth-throwaway"))
    assert "synth-throwaway" in python("-c", "from repro.benchmarks import benchmark_names; "
                                             "print(benchmark_names())")

    # One dry run (one workflow parse) plans both: the algorithm's runs, the benchmark's evals.
    overlay = tmp_path / "throwaway.yaml"
    overlay.write_text("algorithms: {throwaway: {algorithm: throwaway, objective: {scale: 2.0}}}\n"
                       "run: {algorithms: [gspo, throwaway]}\n"
                       "eval: {benchmarks: [synth-rule, synth-throwaway]}\n")
    out = ok(snakemake("-n", "--nolock", "--cores", "1", "--configfile", str(overlay), cwd=wd), wd)
    assert "algo=throwaway/model=tiny/group_size=8/seed=0/train_log.parquet" in out
    assert jobs_planned(out).get("train", 0) >= 2
    assert jobs_planned(out).get("evaluate", 0) >= 2
    assert "benchmark=synth-throwaway/problems.parquet" in out

    overlay.write_text("algorithms: {bad: {algorithm: not_registered}}\n")  # the registry says no
    proc = snakemake("-n", "--nolock", "--configfile", str(overlay), cwd=wd)
    assert proc.returncode != 0
    assert "config algorithms.bad.algorithm: unknown algorithm 'not_registered'" in proc.stderr


def test_the_schema_keeps_no_list_of_algorithms():
    """The catalogue's `algorithm` is checked against the registry at parse time (the test
    above); a copied enum in config/schema.yaml would drift from it."""
    import yaml

    schema = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "schema.yaml")
                            .read_text())
    entry = schema["properties"]["algorithms"]["additionalProperties"]["properties"]["algorithm"]
    assert "enum" not in entry and "registry" in entry["description"]
