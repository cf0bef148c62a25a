"""The verl policy-loss plugin (repro/integrations/verl.py) against verl's own code.

Runs where verl is installed: .ci/run builds .venv-verl (constraints/verl.txt) and runs this file
there with REPRO_REQUIRE_VERL=1, where a missing verl fails instead of skipping. Parity: the
suite's GRPO, GSPO and GRPO-fix under verl's registry give verl's `vanilla`, `gspo` and `cispo`
loss and gradient on the same batches, for each aggregation mode (docs/integrations.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

try:
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig
except ImportError as err:
    if os.environ.get("REPRO_REQUIRE_VERL") == "1":
        raise
    pytest.skip(f"verl is not installed ({err}); .ci/run runs this file in .venv-verl",
                allow_module_level=True)

import repro.integrations.verl as plugin
from repro.objectives import AGG_MODES, Minibatch, make_config, policy_loss

ROOT = Path(__file__).resolve().parents[1]
N = 4  # responses per prompt (actor_rollout_ref.rollout.n)


def actor_config(n: int = N, low: float = 0.2, high: float = 0.28, **kw) -> FSDPActorConfig:
    return FSDPActorConfig(strategy="fsdp", rollout_n=n, ppo_micro_batch_size_per_gpu=8,
                           clip_ratio_low=low, clip_ratio_high=high, **kw)


def make_batch(seed: int, groups: int = 2, length: int = 10, spread: float = 0.2,
               shared: int = 0) -> dict[str, torch.Tensor]:
    """verl's policy-loss inputs in float64: `groups` groups of N rows in row order, with
    group-centred advantages broadcast over each response; the first `shared` tokens of every
    member of a group are one shared prefix (same log-probs under both policies)."""
    gen = torch.Generator().manual_seed(seed)
    rows = groups * N
    lengths = torch.randint(max(3, shared + 1), length + 1, (rows,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    old = -2 * torch.rand(rows, length, generator=gen, dtype=torch.float64) - 0.05
    new = old + spread * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    first = torch.arange(rows) // N * N  # first row of each row's group
    new[:, :shared], old[:, :shared] = new[first, :shared], old[first, :shared]
    reward = torch.rand(rows, generator=gen, dtype=torch.float64).view(groups, N)
    adv = ((reward - reward.mean(1, keepdim=True)) / reward.std(1, keepdim=True)).view(rows)
    return {"old_log_prob": old, "log_prob": new, "response_mask": mask,
            "advantages": adv[:, None] * mask}


def run(mode: str, batch: dict, agg: str, config, **extra):
    """(loss, d loss / d log_prob, metrics) of verl loss mode `mode` through verl's registry."""
    logp = batch["log_prob"].clone().requires_grad_(True)
    fn = core_algos.get_policy_loss_fn(mode)
    loss, metrics = fn(old_log_prob=batch["old_log_prob"], log_prob=logp,
                       advantages=batch["advantages"], response_mask=batch["response_mask"],
                       loss_agg_mode=agg, config=config, rollout_is_weights=None, **extra)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


def test_module_import_registers_every_mode():
    for mode in plugin.LOSS_MODES:
        fn = core_algos.get_policy_loss_fn(mode)
        assert isinstance(fn, partial) and fn.func is plugin.verl_loss and fn.args == (mode,)


def test_verl_imports_the_plugin_from_its_env_var():
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as r\n"
            "print(sorted(k for k in r if k.startswith('dfpo')))")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "repro.integrations.verl"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.split("\n")[-2] == str(sorted(m for m in plugin.LOSS_MODES
                                                     if m.startswith("dfpo")))


PAIRS = [("repro_grpo", "vanilla", {}), ("repro_gspo", "gspo", {"low": 0.02, "high": 0.03}),
         ("grpo_fix", "cispo", {"low": 0.15, "high": 0.15})]
GLOBAL = {"dp_size": 2, "batch_num_tokens": 97, "global_batch_size": 13}


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize(("ours", "theirs", "clip"), PAIRS)
@pytest.mark.parametrize("info", [{}, GLOBAL], ids=["local", "global_batch_info"])
def test_parity_with_verl(ours, theirs, clip, agg, info):
    clipped = 0.0
    for seed in range(4):
        batch = make_batch(seed)
        config = actor_config(global_batch_info=dict(info), **clip)
        loss, grad, metrics = run(ours, batch, agg, config)
        ref_loss, ref_grad, ref_metrics = run(theirs, batch, agg, config)
        dl, dg = float((loss - ref_loss).abs()), float((grad - ref_grad).abs().max())
        print(f"{ours} vs {theirs} {agg} {info or ''} seed {seed}: |d loss| {dl:.2e}, "
              f"max |d grad| {dg:.2e}")
        assert float(grad.abs().max()) > 0
        assert dg <= 1e-12 * float(ref_grad.abs().max())
        if theirs != "cispo":  # cispo's loss value is sg[w] A log pi, GRPO-fix's sg[w] A
            assert dl <= 1e-12 * float(ref_loss.abs()) + 1e-15
        for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
            assert metrics[key] == pytest.approx(ref_metrics[key], abs=1e-12), key
        clipped += ref_metrics["actor/pg_clipfrac"]
    assert clipped > 0, "the batches must reach the clip range, else parity says little"


DFPO_MODES = [m for m in plugin.LOSS_MODES if m.startswith("dfpo")]
CANCELLING_AGG = [a for a in AGG_MODES if a != "seq-mean-token-mean"]


@pytest.mark.parametrize("agg", CANCELLING_AGG)
@pytest.mark.parametrize("mode", DFPO_MODES)
def test_dfpo_modes_are_the_suites_policy_loss(mode, agg):
    batch = make_batch(7)
    loss, grad, metrics = run(mode, batch, agg, actor_config())
    mask = batch["response_mask"]
    logp = batch["log_prob"].clone().requires_grad_(True)
    cfg = make_config("dfpo", loss_agg_mode=agg, **plugin.LOSS_MODES[mode][1])
    ref, ref_metrics = policy_loss(cfg, Minibatch(
        logp=logp, logp_old=batch["old_log_prob"], mask=mask,
        advantages=batch["advantages"][:, 0], group=torch.arange(mask.shape[0]) // N))
    (ref_grad,) = torch.autograd.grad(ref, logp)
    assert torch.equal(loss, ref.detach()) and torch.equal(grad, ref_grad)
    assert metrics["dfpo/s_spread"] == ref_metrics["s_spread"] > 0
    assert metrics["dfpo/w_shift"] == ref_metrics["w_shift"] > 0  # the transform acted


def shared_residual(grad: torch.Tensor, shared: int) -> float:
    """max over groups and shared positions of |sum_i g| / sum_i |g| (0 = the copies cancel)."""
    g = grad[:, :shared].reshape(-1, N, shared)
    return float((g.sum(1).abs() / g.abs().sum(1)).max())


@pytest.mark.parametrize("agg", CANCELLING_AGG)
@pytest.mark.parametrize("mode", [*DFPO_MODES, "grpo_fix"])
def test_shared_tokens_cancel(mode, agg):
    batch = make_batch(3, groups=3, shared=2)
    _, grad, _ = run(mode, batch, agg, actor_config(low=0.2, high=0.2))
    assert shared_residual(grad, 2) < 1e-12


def test_the_cancellation_check_sees_gspo_not_cancel():
    batch = make_batch(3, groups=3, shared=2)
    _, grad, _ = run("repro_gspo", batch, "token-mean", actor_config(low=0.02, high=0.03))
    assert shared_residual(grad, 2) > 1e-3


REFUSALS = [
    ("dfpo_min", {"groups": 1}, {"n": 6}, "token-mean", r"^a DFPO loss needs whole groups.*"
     r"rollout\.n=6 \(set trainer\.balance_batch=False"),
    ("dfpo_orth", {}, {}, "seq-mean-token-mean",
     r"^loss_mode=dfpo_orth refuses actor_rollout_ref\.actor\.loss_agg_mode=seq-mean-token-mean"),
    ("grpo_fix", {}, {"low": 0.2, "high": 0.28}, "token-mean",
     r"^loss_mode=grpo_fix clips symmetrically: set actor_rollout_ref\.actor\.clip_ratio_low"),
    ("repro_grpo", {}, {}, "token-sum", r"loss_agg_mode must be one of .*got 'token-sum'"),
]


@pytest.mark.parametrize(("mode", "shape", "cfg", "agg", "match"), REFUSALS)
def test_refusals_are_one_line(mode, shape, cfg, agg, match):
    with pytest.raises(ValueError, match=match) as err:
        run(mode, make_batch(0, **shape), agg, actor_config(**cfg))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("mode", ["dfpo_min", "repro_grpo"])
def test_rollout_is_weights_and_token_advantages_are_refused(mode):
    batch = make_batch(0)
    weights = torch.ones_like(batch["log_prob"])
    with pytest.raises(ValueError, match=r"^loss_mode=\w+ refuses rollout_is_weights") as err:
        plugin.verl_loss(mode, **batch, config=actor_config(), rollout_is_weights=weights)
    assert "\n" not in str(err.value)
    batch["advantages"] = batch["advantages"] * torch.linspace(1, 2, batch["log_prob"].shape[1])
    with pytest.raises(ValueError, match=r"algorithm\.adv_estimator=grpo") as err:
        run(mode, batch, "token-mean", actor_config())
    assert "\n" not in str(err.value)


def test_the_documented_command_uses_verl_keys():
    """Every override of docs/integrations.md's verl command is a key of verl's shipped
    config, and the loss_mode it names is registered."""
    import yaml

    text = (ROOT / "docs" / "integrations.md").read_text()
    block = re.search(r"```bash\n(python -m verl\.trainer\.main_ppo.*?)```", text, re.S).group(1)
    overrides = dict(re.findall(r"([\w.]+)=(\S+)", block))
    shipped = yaml.safe_load((Path(core_algos.__file__).parents[1] / "config"
                              / "_generated_ppo_trainer.yaml").read_text())
    for key in overrides:
        node = shipped
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not in verl's config"
            node = node[part]
    assert overrides["actor_rollout_ref.model.external_lib"] == plugin.__name__
    core_algos.get_policy_loss_fn(overrides["actor_rollout_ref.actor.policy_loss.loss_mode"])
    assert overrides["trainer.balance_batch"] == "False"
    assert len(overrides) >= 10


def verl_worker_loss(mode: str, batch: dict, info: dict):
    """(loss, d loss / d log_prob, metrics) through verl's actor loss `ppo_loss`
    (verl.workers.utils.losses), the worker's call site: it takes the model's log-probs
    unpadded (prompt and response of each row packed back to back, response token t at
    offset prompt_len - 1 + t), fills `global_batch_info` and calls the registered loss."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config.actor import PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    mask = batch["response_mask"]
    rows, length = mask.shape
    prompt = 3
    logp = batch["log_prob"].clone().requires_grad_(True)
    pad = logp.new_zeros(prompt)
    packed = torch.cat([torch.cat([pad[:prompt - 1], logp[i, :int(mask[i].sum())], pad[:1]])
                        for i in range(rows)])
    data = TensorDict({
        "prompts": torch.ones(rows, prompt, dtype=torch.long),
        "responses": torch.ones(rows, length, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(rows, prompt, dtype=torch.long), mask.long()], 1),
        "response_mask": mask, "old_log_probs": batch["old_log_prob"],
        "advantages": batch["advantages"]}, batch_size=[rows])
    tu.assign_non_tensor(data, dp_size=info.get("dp_size", 1),
                         batch_num_tokens=info.get("batch_num_tokens"),
                         global_batch_size=info.get("global_batch_size"))
    config = actor_config(policy_loss=PolicyLossConfig(loss_mode=mode))
    loss, metrics = ppo_loss(config, {"log_probs": packed}, data)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


@pytest.mark.parametrize("info", [{}, GLOBAL], ids=["local", "global_batch_info"])
def test_verls_worker_loss_calls_the_plugin(info):
    """Through verl's own actor loss: repro_grpo gives vanilla's loss and gradient, and
    dfpo_min what the registered function gives on the padded tensors."""
    batch = make_batch(5)
    loss, grad, metrics = verl_worker_loss("repro_grpo", batch, info)
    ref_loss, ref_grad, _ = verl_worker_loss("vanilla", batch, info)
    assert torch.allclose(loss, ref_loss, rtol=1e-12) and torch.allclose(grad, ref_grad,
                                                                         rtol=1e-12, atol=0)
    assert float(grad.abs().max()) > 0
    loss, grad, metrics = verl_worker_loss("dfpo_min", batch, info)
    direct_loss, direct_grad, _ = run("dfpo_min", batch, "token-mean",
                                      actor_config(global_batch_info=dict(info)))
    assert torch.equal(loss, direct_loss) and torch.equal(grad, direct_grad)
    assert {"actor/pg_loss", "actor/pg_clipfrac", "dfpo/s_spread"} <= set(metrics)
