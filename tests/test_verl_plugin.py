"""The verl plugin as verl runs it: loaded the way docs/integrations.md says, its overrides
checked against verl's own config, the uid route through verl's real `ppo_loss`, and every
refusal (one line naming the verl key, before the loss computes).

Skipped without verl; .ci/run runs them in its verl venv (REPRO_REQUIRE_VERL=1).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from verl_batches import actor, call, require_verl, verl_batch

require_verl()
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from repro.integrations import verl as plugin  # noqa: E402
from repro.integrations.verl_check import check_run, compose, main  # noqa: E402
from repro.integrations.verl_config import (  # noqa: E402
    MODES,
    PLUGIN,
    REGISTERED,
    PluginConfigError,
    objective_config,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "integrations.md"


def doc_overrides() -> list[str]:
    """The `overrides=( ... )` array of the doc's verl section, as bash would split it."""
    verl = DOC.read_text().split("## verl", 1)[1].split("\n## ", 1)[0]
    body = re.search(r"^overrides=\($(.*?)^\)$", verl, re.S | re.M)
    assert body, f"{DOC}: no overrides=( ... ) array in the verl section"
    return shlex.split(os.path.expandvars(body.group(1)), comments=True)


def setting(overrides: list[str], key: str) -> str:
    (value,) = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return value


def test_verls_clip_bounds_set_each_objectives_clip_fields():
    """clip_ratio_low/high reach the fields the objective marks `clip` (none for DFPO)."""
    bounds = {"clip_ratio": 0.3, "clip_ratio_low": 0.1, "clip_ratio_high": 0.2}
    for mode in sorted(set(MODES) - {"grpo_fix"}):  # grpo_fix: one symmetric bound
        cfg = objective_config(mode, bounds, "token-mean")
        marked = {f.metadata["clip"]: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                  if "clip" in f.metadata}
        assert marked in ({}, {"low": 0.1, "high": 0.2}), mode
    cfg = objective_config("grpo_fix", {"clip_ratio": 0.3}, "token-mean")
    assert cfg.eps == 0.3


def test_the_docs_command_is_verls_and_passes_the_check():
    overrides = doc_overrides()
    assert not [o for o in overrides if o[0] in "+~"]  # every key is one verl's config has
    cfg = compose(overrides)  # hydra refuses a key that verl's ppo_trainer config lacks
    assert check_run(cfg).startswith("ok: loss_mode=dfpo_min is DFPOConfig(")
    assert setting(overrides, "actor_rollout_ref.model.external_lib") == PLUGIN
    assert setting(overrides, "actor_rollout_ref.actor.policy_loss.loss_mode") in REGISTERED
    text = DOC.read_text()
    for command in ("python -m repro.integrations.verl", "python -m verl.trainer.main_ppo"):
        assert f'{command} "${{overrides[@]}}"' in text, command


LOAD = """
import json, sys
mode, route = sys.argv[1], sys.argv[2]
if route == "external_lib":  # as verl's worker: its module first, then the model config's lib
    import verl.workers.engine_workers as workers
    from verl.utils.import_utils import import_external_libs
    import_external_libs(sys.argv[3])
else:  # VERL_USE_EXTERNAL_MODULES: loaded with verl itself
    import verl.workers.engine_workers as workers
from verl.trainer.ppo.core_algos import get_policy_loss_fn
import repro.integrations.verl as plugin
print(json.dumps({"fn": get_policy_loss_fn(mode).__name__,
                  "uid_route": workers.ppo_loss is plugin.ppo_loss_with_groups}))
"""


@pytest.mark.parametrize("route", ["external_lib", "VERL_USE_EXTERNAL_MODULES"])
def test_verls_lookup_finds_the_mode_after_loading_as_the_doc_says(route):
    overrides = doc_overrides()
    mode = setting(overrides, "actor_rollout_ref.actor.policy_loss.loss_mode")
    lib = setting(overrides, "actor_rollout_ref.model.external_lib")
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    if route != "external_lib":
        env["VERL_USE_EXTERNAL_MODULES"] = lib
    out = subprocess.run([sys.executable, "-c", LOAD, mode, route, lib], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"fn": f"repro_{mode}", "uid_route": True}, out.stderr[-2000:]


def one_line_error(argv: list[str], capsys) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


REFUSED = {  # override -> the key the one-line error names
    "trainer.balance_batch=True": "trainer.balance_batch=True",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean": "agg_mode=seq-mean-token-mean",
    "algorithm.rollout_correction.rollout_is=token": "rollout_correction.rollout_is=token",
    "actor_rollout_ref.actor.shuffle=True": "actor_rollout_ref.actor.shuffle=True",
    "actor_rollout_ref.actor.use_dynamic_bsz=True": "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12": "ppo_micro_batch_size_per_gpu=12",
    "algorithm.adv_estimator=gae": "algorithm.adv_estimator=gae",
    "actor_rollout_ref.actor.loss_agg_mode=token-sum": "loss_agg_mode=token-sum",
    "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla": "policy_loss.loss_mode=vanilla",
    "actor_rollout_ref.model.external_lib=null": "external_lib=repro.integrations.verl",
    # verl's trainer replaces the loss mode, or adds a loss to it
    "algorithm.rollout_correction.bypass_mode=true": "rollout_correction.bypass_mode=True",
    "distillation.enabled=true": "distillation.enabled=True",
    # estimators whose advantages are not centred per group (found by calling them)
    "algorithm.adv_estimator=reinforce_plus_plus": "adv_estimator=reinforce_plus_plus gives",
    "algorithm.adv_estimator=reinforce_plus_plus_baseline":
        "adv_estimator=reinforce_plus_plus_baseline gives",
    # a key verl does not read, which a DFPO setting put there would silently be
    "+actor_rollout_ref.actor.policy_loss.transform=orth_proj":
        "actor_rollout_ref.actor.policy_loss.transform: no such key (valid: loss_mode,",
}


@pytest.mark.parametrize("override", sorted(REFUSED))
def test_the_check_refuses_in_one_line(override, capsys, monkeypatch):
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    assert REFUSED[override] in one_line_error([*doc_overrides(), override], capsys)


def test_the_check_refuses_grpo_fix_with_two_clip_bounds(capsys):
    argv = [*doc_overrides(), "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_fix",
            "actor_rollout_ref.actor.clip_ratio_high=0.28"]
    assert "clip_ratio_low=0.2 != clip_ratio_high=0.28" in one_line_error(argv, capsys)
    assert main(argv[:-1]) == 0
    assert "GRPOFixConfig(" in capsys.readouterr().out


def test_the_check_command_prints_one_line_and_no_traceback():
    out = subprocess.run([sys.executable, "-m", PLUGIN, *doc_overrides(),
                          "trainer.balance_batch=True"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 1
    assert out.stderr.startswith("error: trainer.balance_batch=True"), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


@pytest.fixture
def no_compute(monkeypatch):
    """A refusal must come before the loss computes: computing fails the test."""
    monkeypatch.setattr(plugin, "policy_loss", lambda *a: pytest.fail("the loss was computed"))


def refusal(mode: str, batch, cfg, agg: str = "token-mean", **kw) -> str:
    with pytest.raises(PluginConfigError) as err:
        call(get_policy_loss_fn(mode), batch, cfg, agg, **kw)
    assert "\n" not in str(err.value)
    return str(err.value)


def reordered(batch, order):
    return dataclasses.replace(batch, logp=batch.logp[order], old=batch.old[order],
                               advantages=batch.advantages[order], mask=batch.mask[order],
                               tokens=batch.tokens[order])


@pytest.mark.usefixtures("no_compute")
def test_the_loss_refuses_before_computing():
    batch, cfg = verl_batch(0), actor()
    assert "loss_agg_mode=seq-mean-token-mean" in refusal("dfpo_min", batch, cfg,
                                                          "seq-mean-token-mean")
    assert "loss_agg_mode=token-sum" in refusal("grpo_fix", batch, cfg, "token-sum")
    token_weights = torch.rand(batch.logp.shape, dtype=torch.float64) * batch.mask
    assert "rollout_is=token" in refusal("dfpo_orth", batch, cfg, weights=token_weights)
    seq_weights = torch.ones_like(batch.logp) * batch.mask
    assert "rollout_is=sequence" in refusal("grpo_fix", batch, cfg, weights=seq_weights)
    for field in ("shuffle", "use_dynamic_bsz"):
        assert f"actor.{field}=True" in refusal("dfpo_min", batch, actor(**{field: True}))
    assert "ppo_micro_batch_size_per_gpu=6" in refusal(
        "dfpo_min", batch, actor(ppo_micro_batch_size_per_gpu=6))
    assert "not whole groups of actor_rollout_ref.rollout.n=5" in refusal(
        "dfpo_min", batch, actor(n=5, ppo_micro_batch_size_per_gpu=10))
    ramp = batch.advantages + 0.1 * torch.arange(batch.logp.shape[1]) * batch.mask
    assert "algorithm.adv_estimator" in refusal(
        "dfpo_min", dataclasses.replace(batch, advantages=ramp), cfg)
    # trainer.balance_batch, which the loss cannot see: its reordering of the rows is refused
    message = refusal("dfpo_min", reordered(batch, torch.randperm(12, generator=torch.Generator()
                                                                  .manual_seed(0))), cfg)
    assert "trainer.balance_batch=True" in message and "not one centred group" in message
    # advantages not centred per group: the loss cannot tell this from a reordering, and says so
    shifted = dataclasses.replace(batch, advantages=(batch.advantages + 0.5) * batch.mask)
    message = refusal("dfpo_min", shifted, cfg)
    assert "algorithm.adv_estimator does not centre" in message


def micro_batch(batch, rows: list[int]):
    """The TensorDict verl's engine hands ppo_loss for these rows (left-right padded, as
    `_update_actor` builds it, plus the non-tensor entries the engine adds), and the flat
    log-probs of the model output: prompt tokens then response tokens, row after row."""
    idx = torch.tensor(rows)
    mask, prompt = batch.mask[idx], 3
    attention = torch.cat([torch.ones(len(rows), prompt, dtype=torch.long), mask.long()], 1)
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(len(rows), prompt, dtype=torch.long),
                 "responses": batch.tokens[idx], "attention_mask": attention,
                 "response_mask": mask.long(), "old_log_probs": batch.old[idx],
                 "advantages": batch.advantages[idx]},
        non_tensors={"uid": np.array([f"prompt-{int(g)}" for g in batch.group[idx]], dtype=object)},
    ).to_tensordict()
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()),
                         global_batch_size=len(rows))
    full = torch.zeros(len(rows), prompt + mask.shape[1], dtype=torch.float64)
    full[:, prompt - 1:-1] = batch.logp.detach()[idx]  # log pi of token t sits at t - 1
    flat = full[attention.bool()].requires_grad_(True)
    return data, flat


def verl_ppo_loss(mode: str, batch, rows: list[int]):
    """(loss, metrics, d loss / d logp [rows, T]) through the wrapped ppo_loss, as a worker."""
    data, flat = micro_batch(batch, rows)
    cfg = dataclasses.replace(actor(), policy_loss=dataclasses.replace(
        actor().policy_loss, loss_mode=mode))
    loss, metrics = plugin.ppo_loss_with_groups(cfg, {"log_probs": flat}, data)
    (grad,) = torch.autograd.grad(loss, flat)
    full = torch.zeros(len(rows), 3 + batch.mask.shape[1], dtype=torch.float64)
    full[data["attention_mask"].bool()] = grad
    return loss.detach(), metrics, full[:, 2:-1]


@pytest.mark.parametrize("mode", ["dfpo_min", "dfpo_orth_prod", "grpo_fix"])
def test_the_uid_route_through_verls_ppo_loss(mode):
    batch = verl_batch(1)
    in_order = list(range(12))
    loss, metrics, grad = verl_ppo_loss(mode, batch, in_order)
    expected, expected_grad, _ = call(get_policy_loss_fn(mode), batch, actor(), "token-mean")
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-18)
    values = {key: m.aggregate() for key, m in metrics.items()}
    assert values["actor/dfpo/residual_full"] < 1e-9
    # equal coefficients per unit advantage: Min-Replace and GRPO-fix; Orth-Proj cancels without
    if MODES[mode][1].get("transform") != "orth_proj":
        assert values["actor/dfpo/asym"] < 1e-9
    else:
        assert values["actor/dfpo/asym"] > 1e-3
    assert values["actor/dfpo/shared_frac"] > 0 and "actor/pg_clipfrac" in values
    # groups interleaved (a reordering that keeps them whole): the same loss from their uids
    mixed = [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    loss_mixed, _, grad_mixed = verl_ppo_loss(mode, batch, mixed)
    torch.testing.assert_close(loss_mixed, loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad_mixed, grad[mixed], rtol=1e-12, atol=1e-18)


def test_the_row_route_refuses_the_order_that_the_uid_route_reads(no_compute):
    batch = verl_batch(1)
    mixed = [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    assert "not one centred group" in refusal("dfpo_min", reordered(batch, mixed), actor())


def test_the_uid_route_refuses_a_cut_group(no_compute):
    with pytest.raises(PluginConfigError, match=r"a group \(uid\) has 2 of its "
                                                r"actor_rollout_ref.rollout.n=4 rows"):
        verl_ppo_loss("dfpo_min", verl_batch(1), [0, 1, 2, 3, 4, 5])


def test_the_uid_route_blames_the_estimator_for_uncentred_groups(no_compute):
    """Whole groups whose advantages do not sum to 0: the estimator, not balance_batch."""
    batch = verl_batch(1)
    shifted = dataclasses.replace(batch, advantages=(batch.advantages + 0.5) * batch.mask)
    with pytest.raises(PluginConfigError) as err:
        verl_ppo_loss("dfpo_min", shifted, list(range(12)))
    assert "algorithm.adv_estimator does not centre" in str(err.value)
    assert "balance_batch" not in str(err.value)
