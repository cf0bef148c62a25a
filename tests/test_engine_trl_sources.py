"""engine=trl under the two off-policy sources that swap the behaviour policy (issue 38):
`staleness` (TRL's generation samples with the weights of d rollouts ago) and `sampler_dtype`
(with a bf16 copy of them). In both, the rollout's old log-probs are the behaviour policy's as
the native engine computes them, the trained weights come back bit for bit after the rollout,
and the first update has the native engine's loss on the same batch (off-policy from it)."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

pytest.importorskip("trl")

from test_engine_trl import G, K, P, generation_batch, make_trainer, small, tiny_qwen3
from test_engine_trl_reuse import native_loss
from train_helpers import sharpened_tiny_policy

from repro.engines.registry import train
from repro.engines.trl_args import check_sources
from repro.results import TRAIN_LOG, read_table
from repro.training.checkpoint import STATE_FILE, RunState
from repro.training.config import TrainConfig
from repro.training.logprobs import response_logprobs


def logprobs_of(model, part) -> torch.Tensor:
    """The native engine's behaviour log-probs (float32, at T = 1) of `part`'s completions."""
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    resp = torch.cat([torch.zeros_like(part["prompt_mask"]), part["completion_mask"]], 1).bool()
    with torch.no_grad():
        logp = response_logprobs(model, ids, attn, resp, with_entropy=False)[0]
    return logp[:, -part["completion_ids"].size(1):].float()


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def next_rollout(trainer, tok, monkeypatch) -> list[tuple[torch.dtype, torch.Tensor]]:
    """The trainer's next rollout (after its K updates); returns what `generate` ran with:
    (parameter dtype, the embedding weights) per call."""
    seen, generate = [], trainer.model.generate

    def spy(*args, **kwargs):
        weight = trainer.model.get_input_embeddings().weight
        seen.append((weight.dtype, weight.detach().clone()))
        return generate(*args, **kwargs)

    monkeypatch.setattr(trainer.model, "generate", spy)
    trainer._step = K  # the first micro-step of the second rollout
    trainer._prepare_inputs(generation_batch(tok))
    return seen


def first_update(trainer, tok, logp_old):
    """The rollout's first update: the trainer's loss, and the native engine's (policy_loss on
    the project's log-probs against `logp_old`) with its metrics."""
    part = trainer._buffered_inputs[0]
    rows = torch.isin(trainer._rollout["group"], torch.unique(part["group"]))
    mine = trainer._compute_loss(trainer.model, part)
    ref, metrics = native_loss(trainer, tok, part, logp_old[rows])
    return float(mine.detach()), float(ref.detach()), metrics


@pytest.mark.parametrize("algorithm", ["dfpo", "gspo"])
def test_stale_rollout_comes_from_the_weights_of_d_rollouts_ago(algorithm, tmp_path,
                                                                 monkeypatch):
    trainer, tok = make_trainer(tmp_path, algorithm, staleness=1)
    start = snapshot(trainer.model)  # rollout 1 was sampled by the start (nothing behind yet)
    assert len(trainer.lagged) == 1
    assert all(torch.equal(trainer.lagged[0][k], v) for k, v in start.items())
    opt = torch.optim.SGD(trainer.model.parameters(), lr=0.5)
    for step in range(K):  # rollout 1's K updates move the weights
        trainer._step = step
        part = trainer._buffered_inputs[0] if step == 0 else trainer._prepare_inputs(None)
        opt.zero_grad()
        trainer._compute_loss(trainer.model, part).backward()
        opt.step()
    params = list(trainer.model.parameters())
    current = snapshot(trainer.model)
    seen = next_rollout(trainer, tok, monkeypatch)
    embed = "model.embed_tokens.weight"
    assert [torch.equal(w, start[embed]) for _, w in seen] == [True]  # sampled by the start
    assert not torch.equal(start[embed], current[embed])
    # the trained weights come back: the same tensors' values, the same parameter objects
    assert all(torch.equal(v, current[k]) for k, v in trainer.model.state_dict().items())
    assert [id(p) for p in trainer.model.parameters()] == [id(p) for p in params]

    roll = trainer._rollout
    mask = roll["completion_mask"].bool()
    behind = copy.deepcopy(trainer.model)
    behind.load_state_dict(start)
    want = logprobs_of(behind, roll)
    assert torch.equal(roll["old_per_token_logps"][mask], want[mask])
    now = logprobs_of(trainer.model, roll)
    assert float((now - want).abs()[mask].max()) > 1e-4  # not the current policy's
    mine, ref, metrics = first_update(trainer, tok, want)
    assert abs(mine - ref) < 1e-6, (mine, ref)
    assert metrics["w_dev"] > 1e-4  # off-policy from the rollout's first update


def test_bf16_sampler_samples_and_scores_with_a_bf16_copy(tmp_path, monkeypatch):
    trainer, tok = make_trainer(tmp_path, "dfpo", sampler_dtype="bfloat16")
    torch.manual_seed(0)
    fresh = tiny_qwen3()[0].double()  # make_trainer's policy, built again
    # the float64 masters are untouched by the bf16 rollout
    assert all(p.dtype == torch.float64 for p in trainer.model.parameters())
    assert all(torch.equal(v, fresh.state_dict()[k])
               for k, v in trainer.model.state_dict().items())
    roll = trainer._rollout
    mask = roll["completion_mask"].bool()
    sampler = copy.deepcopy(fresh).to(torch.bfloat16).eval()  # the native engine's bf16 copy
    want = logprobs_of(sampler, roll)
    assert torch.equal(roll["old_per_token_logps"][mask], want[mask])
    assert float((logprobs_of(fresh, roll) - want).abs()[mask].max()) > 1e-4
    mine, ref, metrics = first_update(trainer, tok, want)
    assert abs(mine - ref) < 1e-6, (mine, ref)
    assert metrics["w_dev"] > 1e-4  # s != 1 from the first update
    assert [dtype for dtype, _ in next_rollout(trainer, tok, monkeypatch)] == [torch.bfloat16]
    assert all(p.dtype == torch.float64 for p in trainer.model.parameters())


@pytest.mark.parametrize(("key", "value"), [("staleness", 1), ("sampler_dtype", "bfloat16")])
def test_refused_with_vllm_and_on_several_processes(key, value):
    with pytest.raises(ValueError, match=f"TrainConfig.{key} ") as err:
        TrainConfig(model="m", engine="trl", trl_args={"use_vllm": True}, **{key: value})
    assert "\n" not in str(err.value)
    cfg = TrainConfig(model="m", engine="trl", prompts_per_step=P, group_size=G, minibatches=1,
                      **{key: value})
    check_sources(cfg, 1)
    with pytest.raises(ValueError, match=f"TrainConfig.{key}=.* num_processes=2"):
        check_sources(cfg, 2)


@pytest.mark.slow
def test_a_stale_bf16_run_logs_off_policy_steps_and_checkpoints_the_lag(tmp_path, hashed):
    """`repro train engine=trl staleness=2 sampler_dtype=bfloat16` at K = 1: w_dev > 0 from
    the first update (the bf16 sampler); the checkpoint carries the last 2 policies' weights
    (RunState.lagged), and a run resumed from it finishes the run."""
    policy = sharpened_tiny_policy(tmp_path / "tiny")
    kw = small(policy, minibatches=1, staleness=2, sampler_dtype="bfloat16", steps=3,
               checkpoint_every=2)
    train(TrainConfig(**kw), tmp_path / "run")
    rows = read_table(tmp_path / "run" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["w_dev"] > 0 and r["s_spread_product"] > 0 for r in rows)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002"
    lagged = RunState(**torch.load(ckpt / STATE_FILE, weights_only=False)["state"]).lagged
    assert len(lagged) == 2 and not torch.equal(*(w["model.embed_tokens.weight"] for w in lagged))
    shutil.copytree(ckpt, tmp_path / "resumed" / "checkpoints" / "step_000002")
    train(TrainConfig(**kw), tmp_path / "resumed", resume=True)
    rows = read_table(tmp_path / "resumed" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3]
