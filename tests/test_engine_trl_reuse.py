"""engine=trl under minibatch reuse (`epochs`, mapped to TRL's num_iterations; issue 38): TRL
scores the rollout's old log-probs once, before the first update, as the native engine's
logp_old, and every one of the epochs x K updates, with optimizer steps in between (pass 2 is
off-policy), has the loss the native engine's log-probs give under `policy_loss` on the same
batch. The run layout: num_iterations = epochs, epochs x K optimizer steps per rollout step."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from test_engine_trl import (
    K,
    P,
    hash_reward,
    make_trainer,
    native_logprobs,
    prompt_groups,
    small,
)
from train_helpers import sharpened_tiny_policy

from repro.engines.registry import train
from repro.engines.trl_args import build_grpo_config
from repro.engines.trl_trainer import ReproGRPOTrainer
from repro.objectives import AdvantageConfig, Minibatch, group_advantages, policy_loss
from repro.results import TRAIN_LOG, read_table
from repro.training.config import TrainConfig
from repro.training.minibatches import minibatch_orders

EPOCHS = 2


def native_loss(trainer, tok, part, logp_old):
    """policy_loss on the native engine's log-probs of `part` against `logp_old`, with groups
    read from the prompts and advantages from the graded completion texts."""
    mask = part["completion_mask"].bool()
    texts = tok.batch_decode(part["completion_ids"].masked_fill(~mask, tok.pad_token_id),
                             skip_special_tokens=True)
    group = prompt_groups(part)
    adv, _ = group_advantages(torch.tensor(hash_reward(None, texts)), group, AdvantageConfig())
    logp = native_logprobs(trainer, part, 1.0)
    return policy_loss(trainer.loss_cfg, Minibatch(logp, logp_old, mask, adv, group))


@pytest.mark.parametrize(("algorithm", "objective"), [
    ("dfpo", {}), ("dfpo", {"sequence_ratio": "product"}), ("gspo", {}), ("grpo", {})])
def test_reuse_gives_the_native_loss_on_every_update(algorithm, objective, tmp_path):
    trainer, tok = make_trainer(tmp_path, algorithm, objective, epochs=EPOCHS)
    assert trainer.num_iterations == EPOCHS
    rollout = trainer._rollout
    # the rollout policy's log-probs, by the native engine's path, before any update, by row
    old = native_logprobs(trainer, rollout, 1.0).detach()
    mask = rollout["completion_mask"].bool()
    assert rollout["old_per_token_logps"] is not None  # TRL scored them once, up front
    assert float((rollout["old_per_token_logps"] - old).abs()[mask].max()) < 2e-5
    n_groups = torch.unique_consecutive(rollout["group"]).numel()
    native = minibatch_orders(trainer.repro.seed, 1, n_groups, K, EPOCHS)
    opt = torch.optim.SGD(trainer.model.parameters(), lr=0.5)
    drift = []
    for step in range(EPOCHS * K):
        trainer._step = step
        part = trainer._buffered_inputs[0] if step == 0 else trainer._prepare_inputs(None)
        groups = torch.unique_consecutive(part["group"])
        assert groups.tolist() == sorted(native[step // K][step % K].tolist())  # native order
        rows = torch.isin(rollout["group"], groups)
        mine = trainer._compute_loss(trainer.model, part)
        ref, metrics = native_loss(trainer, tok, part, old[rows])
        assert abs(float(mine.detach() - ref.detach())) < 1e-5, (step, float(mine), float(ref))
        drift.append(metrics["w_dev"])
        opt.zero_grad()
        mine.backward()
        opt.step()
    assert drift[0] == 0 and min(drift[K:]) > 1e-4  # pass 2 trained off-policy
    assert trainer.rollout_step == 1  # one rollout served all epochs x K updates


def test_the_run_layout_maps_epochs_to_num_iterations(tmp_path):
    cfg = TrainConfig(model="m", engine="trl", prompts_per_step=P, group_size=4, minibatches=K,
                      epochs=EPOCHS)
    args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=3, half_precision=False,
                             use_cpu=True)
    assert args.num_iterations == EPOCHS and args.steps_per_generation == K
    assert args.max_steps == 3 * K * EPOCHS
    object.__setattr__(args, "num_iterations", 1)
    with pytest.raises(ValueError, match=r"GRPOConfig\.num_iterations=1 must be TrainConfig"):
        ReproGRPOTrainer(model=None, args=args, repro=cfg)


@pytest.mark.slow
def test_a_run_with_reuse_logs_one_row_per_rollout_step(tmp_path, hashed):
    """`repro train engine=trl epochs=2`: one log row per rollout step (its 2 x K updates
    merged), pass 2 off-policy (w_dev > 0), the token counter over the rollouts only."""
    policy = sharpened_tiny_policy(tmp_path / "tiny")
    train(TrainConfig(**small(policy, epochs=EPOCHS)), tmp_path / "run")
    rows = read_table(tmp_path / "run" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["w_dev"] > 0 and r["log_ratio_mean"] != 0 for r in rows)
    assert rows[-1]["gen_tokens_cum"] == sum(r["gen_tokens"] for r in rows)
