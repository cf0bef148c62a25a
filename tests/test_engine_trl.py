"""engine=trl (ReproGRPOTrainer on TRL 1.16, CPU, HF generate): loss and gradient equal
`policy_loss` on log-probs from the project's own `response_logprobs` (float64), whole groups in
every minibatch checked against the prompts, refused options, the pinned private API, and a
short run's outputs (native log schema, cancellation, exports, resume)."""

from __future__ import annotations

import functools
import inspect
import math

import pytest
import torch

trl = pytest.importorskip("trl")

import train_helpers  # noqa: E402
from train_helpers import hashed_rewards, sharpened_tiny_policy  # noqa: E402

from repro.engines.registry import train  # noqa: E402
from repro.engines.trl_args import build_grpo_config, check_grpo_args  # noqa: E402
from repro.engines.trl_dfpo import whole_groups  # noqa: E402
from repro.engines.trl_trainer import ReproGRPOTrainer  # noqa: E402
from repro.models import TinyModelConfig, build_tiny, load  # noqa: E402
from repro.objectives import (  # noqa: E402
    AdvantageConfig,
    Minibatch,
    algorithm_names,
    group_advantages,
    policy_loss,
)
from repro.results import TRAIN_LOG, read_table  # noqa: E402
from repro.training.config import TrainConfig  # noqa: E402
from repro.training.export import export_run  # noqa: E402
from repro.training.logprobs import response_logprobs  # noqa: E402
from repro.training.trl_options import OWNED, REFUSED  # noqa: E402

P, G, K = 4, 4, 2
# every registered algorithm with its defaults (DFPO: min_replace), DFPO's projection and the
# group-mean control (issue 38)
ALGORITHMS = [(name, {}) for name in algorithm_names()] + [
    ("dfpo", {"transform": "orth_proj"}),
    ("dfpo", {"transform": "orth_proj", "sequence_ratio": "product"}),
    ("dfpo", {"transform": "group_mean", "sequence_ratio": "product"})]


def hash_reward(prompts, completions, **_):
    return hashed_rewards(None, [(None, c) for c in completions])


def make_trainer(tmp_path, algorithm="dfpo", objective=None, temperature=1.0, seed=0, accum=1,
                 build=None, epochs=1, **source):
    """A float64 random tiny policy (diverse completions, so rewards differ) in the trainer,
    after its first rollout; `build` returns another (model, tokenizer) (default: the tiny
    Qwen3); `source`: more TrainConfig fields (staleness, sampler_dtype)."""
    torch.manual_seed(0)
    model, tok = (build or tiny_qwen3)()
    model = model.double()
    cfg = TrainConfig(model="unused", algorithm=algorithm, objective=objective or {},
                      prompts_per_step=P, group_size=G, minibatches=K, max_new_tokens=10,
                      temperature=temperature, engine="trl", seed=seed, epochs=epochs,
                      trl_args={"gradient_accumulation_steps": accum} if accum > 1 else {},
                      **source)
    from datasets import Dataset

    prompts = [row["prompt"] for row in generation_batch(tok)[::G]]
    args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                             use_cpu=True)
    trainer = ReproGRPOTrainer(model=model, processing_class=tok, args=args,
                               reward_funcs=[hash_reward],
                               train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                               repro=cfg)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, outside it here
    trainer._prepare_inputs(generation_batch(tok))
    return trainer, tok


def generation_batch(tok) -> list[dict[str, str]]:
    """P chat prompts, each G times in a row (TRL's RepeatSampler order): one rollout's inputs."""
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {i} + {i}?"}],
                                       tokenize=False, add_generation_prompt=True)
               for i in range(P)]
    return [{"prompt": p} for p in prompts for _ in range(G)]


def tiny_qwen3():
    return build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))


def prompt_groups(part) -> torch.Tensor:
    """Group ids from the prompts themselves (rows with equal prompt tokens), not the trainer's."""
    rows = [tuple(ids[m.bool()].tolist())
            for ids, m in zip(part["prompt_ids"], part["prompt_mask"], strict=True)]
    index = {r: i for i, r in enumerate(dict.fromkeys(rows))}
    return torch.tensor([index[r] for r in rows])


def trl_logprobs(trainer, part):
    """TRL's fused-head log-probs of the completion tokens (float32 kernel, logits / T)."""
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    return trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn,
                                                      part["completion_ids"].size(1))[0]


def native_logprobs(trainer, part, temperature):
    """The project's `response_logprobs` (the native engine's path) on the same rows."""
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    resp = torch.cat([torch.zeros_like(part["prompt_mask"]), part["completion_mask"]], 1).bool()
    logp, _ = response_logprobs(trainer.model, ids, attn, resp, temperature=temperature,
                                with_entropy=False)
    return logp[:, -part["completion_ids"].size(1):]


def reference_loss(trainer, tok, part, logp):
    """policy_loss on `logp`, with groups read from the prompts and advantages recomputed from
    the graded completion texts (independent of the trainer's bookkeeping)."""
    mask = part["completion_mask"].bool()
    texts = tok.batch_decode(part["completion_ids"].masked_fill(~mask, tok.pad_token_id),
                             skip_special_tokens=True)
    group = prompt_groups(part)
    adv, _ = group_advantages(torch.tensor(hash_reward(None, texts)), group, AdvantageConfig())
    old = part.get("old_per_token_logps")
    logp_old = logp.detach() if old is None else old
    return policy_loss(trainer.loss_cfg, Minibatch(logp, logp_old, mask, adv, group))[0]


def grads(loss, model):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()),
                                                                allow_unused=False)])


@pytest.mark.parametrize(("algorithm", "objective"), ALGORITHMS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_loss_and_gradient_equal_policy_loss(algorithm, objective, temperature, tmp_path):
    """The trainer's loss and parameter gradient equal policy_loss's on the same batch (1e-10;
    float64 model; TRL's log-prob kernel itself runs in float32). TRL scores logits / T, and
    its log-probs agree with response_logprobs at the same T to float32 precision."""
    trainer, tok = make_trainer(tmp_path, algorithm, objective, temperature)
    with torch.no_grad():  # move the policy so the updates are off-policy (s != 1)
        for p in trainer.model.parameters():
            p.add_(1e-2 * torch.randn_like(p))
    signal = 0.0
    for part in trainer._buffered_inputs:
        mine = trainer._compute_loss(trainer.model, part)
        ref = reference_loss(trainer, tok, part, trl_logprobs(trainer, part))
        assert abs(float(mine.detach() - ref.detach())) <= 1e-10, (float(mine), float(ref))
        g_ref = grads(ref, trainer.model)
        torch.testing.assert_close(grads(mine, trainer.model), g_ref, atol=1e-10, rtol=0)
        signal = max(signal, float(g_ref.abs().max()))
        native = native_logprobs(trainer, part, temperature)
        mask = part["completion_mask"].bool()
        assert float((native - trl_logprobs(trainer, part)).abs()[mask].max()) < 2e-5
        native_loss = reference_loss(trainer, tok, part, native)
        assert abs(float(native_loss.detach() - mine.detach())) < 1e-5
    assert signal > 1e-3  # rewards differed within a group: the comparison had a gradient


def test_every_minibatch_holds_whole_groups_checked_against_prompts(tmp_path):
    trainer, _ = make_trainer(tmp_path)
    parts = trainer._buffered_inputs
    assert len(parts) == K
    seen = []
    for part in parts:
        truth = prompt_groups(part)
        ids = part["group"]
        # same partition: equal trainer ids <=> equal prompts, and G rows per group
        assert torch.equal(ids[:, None] == ids[None], truth[:, None] == truth[None])
        assert torch.equal(torch.unique(ids, return_counts=True)[1], torch.full((P // K,), G))
        seen += torch.unique(ids).tolist()
    assert sorted(seen) == list(range(P))
    again, _ = make_trainer(tmp_path)  # the group permutation is a function of (seed, step)
    assert [p["group"].tolist() for p in again._buffered_inputs] == [p["group"].tolist()
                                                                      for p in parts]


@pytest.mark.parametrize(("algorithm", "objective"), [
    ("dfpo", {}), ("gspo", {}), ("dfpo", {"sequence_ratio": "product"})])
def test_groups_split_over_micro_steps_give_the_whole_minibatch_gradient(algorithm, objective,
                                                                         tmp_path):
    """Gradient accumulation A=4 cuts each minibatch (2 groups of 4) into 2-row micro-steps:
    every group is split. The summed micro-step gradients equal policy_loss's on the whole
    minibatch; for DFPO thanks to the pre-pass weights (without them it refuses), under
    either reading of s."""
    accum = 4
    trainer, tok = make_trainer(tmp_path, algorithm, objective, accum=accum)
    with torch.no_grad():  # update 2 off-policy: the pre-pass sees s != 1
        for p in trainer.model.parameters():
            p.add_(1e-2 * torch.randn_like(p))
    micro = []
    for step in range(accum, 2 * accum):  # the micro-steps of minibatch 2
        trainer._step = step
        micro.append(trainer._prepare_inputs(None))
    assert all(not whole_groups(m["group"], G) for m in micro)
    assert (algorithm == "dfpo") == (micro[0]["seq_weight"] is not None)
    total = sum(grads(trainer._compute_loss(trainer.model, m), trainer.model) for m in micro)
    whole = trainer._buffered_inputs[1]
    ref = reference_loss(trainer, tok, whole, trl_logprobs(trainer, whole))
    g_ref = grads(ref, trainer.model)
    assert float(g_ref.abs().max()) > 1e-3
    # 1e-7, not 1e-10: TRL's float32 log-prob kernel rounds differently on 2-row and 8-row
    # batches (the exact float64 identity is tests/test_engine_core.py's); transforming the
    # half-groups instead would differ by ~1e-3 there.
    torch.testing.assert_close(total, g_ref, atol=1e-7, rtol=0)
    if algorithm == "dfpo":
        with pytest.raises(RuntimeError, match="partial groups"):
            trainer._compute_loss(trainer.model, micro[0] | {"seq_weight": None})


def test_a_partial_group_in_a_minibatch_is_refused(tmp_path):
    trainer, _ = make_trainer(tmp_path)
    part = dict(trainer._buffered_inputs[0])
    part = {k: v[1:] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == P * G // K else v
            for k, v in part.items()}
    with pytest.raises(RuntimeError, match="partial groups"):
        trainer._compute_loss(trainer.model, part)


BAD = {"vllm_importance_sampling_correction": True, "use_liger_kernel": True,
       "top_entropy_quantile": 0.5, "off_policy_mask_threshold": 0.5,
       "mask_truncated_completions": True, "delta": 2.0, "entropy_coef": 0.1,
       "use_adaptive_entropy": True, "bf16": True, "fp16": True,
       "sync_ref_model": True, "min_p": 0.1, "repetition_penalty": 1.1,
       "generation_kwargs": {"do_sample": False}}


def test_every_refused_option_is_named():
    assert set(BAD) == set(REFUSED)
    for key, value in BAD.items():
        with pytest.raises(ValueError, match=f"trl_args.{key}="):
            TrainConfig(model="m", engine="trl", trl_args={key: value})
    for key in ("lr_scheduler_type", "seed", "temperature"):
        assert key in OWNED
        with pytest.raises(ValueError, match=f"trl_args.{key} is set from TrainConfig"):
            TrainConfig(model="m", engine="trl", trl_args={key: "x"})
    with pytest.raises(ValueError, match="trl_args needs engine=trl"):
        TrainConfig(model="m", trl_args={"use_vllm": True})
    with pytest.raises(ValueError, match=r"TrainConfig.engine"):
        TrainConfig(model="m", engine="verl")
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        TrainConfig(model="m", engine="trl", behaviour_logprobs="engine")


@pytest.mark.parametrize("key", ["lr_scheduler_type", "shuffle_dataset", *sorted(BAD)])
def test_the_trainer_refuses_a_grpo_config_that_changes_the_objective(key, tmp_path):
    """Direct users of ReproGRPOTrainer are guarded too (use_cpu: bf16 autocast on CPU)."""
    cfg = TrainConfig(model="m", engine="trl", prompts_per_step=P, group_size=G, minibatches=K)
    args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                             use_cpu=True)
    bad = {"lr_scheduler_type": "linear", "shuffle_dataset": True} | BAD
    object.__setattr__(args, key, bad[key])
    with pytest.raises(ValueError, match=f"GRPOConfig.{key}="):
        check_grpo_args(args)


@pytest.mark.parametrize(("trl_args", "want"), [
    ({}, {"use_vllm": False}),
    ({"use_vllm": True, "vllm_mode": "colocate"},
     {"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": True}),
    ({"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False},
     {"vllm_enable_sleep_mode": False}),
    ({"use_vllm": True, "vllm_mode": "server", "vllm_server_host": "node7"},
     {"vllm_mode": "server", "vllm_server_host": "node7", "vllm_enable_sleep_mode": False}),
])
def test_rollout_options_map_onto_grpo_config(trl_args, want, tmp_path, monkeypatch):
    """Config only, on a platform with vLLM's sleep mode (a GPU); tests/test_vllm_rollout_args.py
    covers the CPU side and the missing vllm_mode."""
    monkeypatch.setattr("repro.engines.trl_args.sleep_mode_available", lambda: True)
    cfg = TrainConfig(model="m", engine="trl", trl_args=trl_args)
    args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                             use_cpu=True)
    assert {k: getattr(args, k) for k in want} == want
    assert args.vllm_importance_sampling_correction is False
    assert args.steps_per_generation == cfg.minibatches and args.max_steps == cfg.minibatches
    assert args.per_device_train_batch_size == cfg.prompts_per_step * cfg.group_size // 4


def test_layout_that_splits_groups_over_processes_is_refused(tmp_path):
    cfg = TrainConfig(model="m", engine="trl", prompts_per_step=4, group_size=G, minibatches=4)
    with pytest.raises(ValueError, match="prompts_per_step/minibatches"):
        build_grpo_config(cfg, out=tmp_path, world_size=2, steps=1, half_precision=False,
                          use_cpu=True)


# Signatures of the TRL private methods the subclass overrides or calls, as in trl 1.16.0: an
# upgrade that changes any of them fails here instead of silently mis-training.
SIGNATURES = {
    "_calculate_rewards": "(self, inputs, prompts, completions, completion_ids_list)",
    "_generate_and_score_completions": "(self, inputs: list[dict[str, torch.Tensor | typing.Any]])"
                                       " -> dict[str, torch.Tensor | typing.Any]",
    "_prepare_inputs": "(self, generation_batch: dict[str, torch.Tensor | typing.Any])"
                       " -> dict[str, torch.Tensor | typing.Any]",
    "_compute_loss": "(self, model, inputs)",
    "_get_per_token_logps_and_entropies": (
        "(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, "
        "compute_entropy=False, compute_aux_loss=False, pixel_values=None, image_grid_thw=None, "
        "num_images=None, pixel_attention_mask=None, spatial_shapes=None, num_tiles=None, "
        "image_sizes=None, token_type_ids=None, mm_token_type_ids=None, image_position_ids=None)"
        " -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]"),
    "get_decay_parameter_names": "(self, model: torch.nn.modules.module.Module) -> list[str]",
}


def test_trl_private_api_snapshot():
    assert trl.__version__ == "1.16.0"
    for name, want in SIGNATURES.items():
        assert str(inspect.signature(getattr(trl.GRPOTrainer, name))) == want, name
    # attributes the subclass reads
    src = inspect.getsource(trl.GRPOTrainer)
    for attr in ("self._buffered_inputs", "self._step", "self.eos_token_ids",
                 "self.current_gradient_accumulation_steps", "loss_is_scaled_for_ga = True"):
        assert attr in src, attr


# --- a short run through `repro train engine=trl` --------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    return sharpened_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny")


small = functools.partial(train_helpers.small, steps=3, prompts_per_step=P, group_size=G,
                          minibatches=K, checkpoint_fractions=[0.5, 1.0], engine="trl")


@pytest.mark.slow
def test_run_log_cancellation_exports_and_resume(tiny_policy, tmp_path, hashed):
    logs = {}
    for name, kw in [("dfpo", {}), ("gspo", {"objective": {"eps_low": 0.2, "eps_high": 0.2}})]:
        train(TrainConfig(**small(tiny_policy, algorithm=name, steps=4, **kw)), tmp_path / name)
        logs[name] = read_table(tmp_path / name / "train_log.parquet", TRAIN_LOG).to_pylist()
        assert [r["step"] for r in logs[name]] == [1, 2, 3, 4]
    for key in ("asym", "residual_full"):
        dfpo = [r[key] for r in logs["dfpo"] if not math.isnan(r[key])]
        gspo = [r[key] for r in logs["gspo"] if not math.isnan(r[key])]
        assert dfpo and gspo, f"no step had shared nodes for {key}"
        assert max(dfpo) <= 1e-6 and max(gspo) > 1e-3, (key, dfpo, gspo)
    assert any(r["grad_norm"] > 0 for r in logs["dfpo"])
    assert all(math.isfinite(r["logodds_drift"]) for r in logs["dfpo"])  # probes ran

    dest = export_run(tmp_path / "dfpo", tmp_path / "export")
    for frac in ("0.5", "1.0"):
        model, tok = load(dest / "policy" / f"frac={frac}")
        ids = tok("Hello", return_tensors="pt").input_ids
        assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3

    # resume: drop the last checkpoint and the manifest, continue from step 2
    import shutil

    run = tmp_path / "dfpo"
    shutil.rmtree(run / "checkpoints" / "step_000004")
    (run / "manifest.json").unlink()
    train(TrainConfig(**small(tiny_policy, algorithm="dfpo", steps=4)), run, resume=True)
    resumed = read_table(run / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    nan_as_none = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                   for r in (*resumed[:2], *logs["dfpo"][:2])]  # NaN != NaN: the task's absent
    assert nan_as_none[:2] == nan_as_none[2:]  # preamble columns; the log up to the checkpoint
    #                                            is kept as written
    assert resumed[-1]["gen_tokens_cum"] == sum(r["gen_tokens"] for r in resumed)


@pytest.mark.slow
def test_two_processes_keep_groups_whole_and_match_one_process(tmp_path):
    """2 CPU processes over gloo. `accelerate launch --cpu` starts a single process (its simple
    launcher; multi-CPU needs MPI), so the processes come from torchrun, which accelerate reads
    as MULTI_CPU with ACCELERATE_USE_CPU=true."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "two.json"
    here = Path(__file__).parent
    env = os.environ | {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(29500 + os.getpid() % 1000), str(here / "trl_two_process.py"),
         str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["num_processes"] == 2 and result["backend"] == "gloo"
    assert result["whole_groups"]
    # The two computations differ only in batching (padding widths, reduction order), so only
    # in rounding: each float op errs by eps of what it sums, and along a gradient a few dozen
    # such errors add up. 64 eps of the scale (the loss's summands are ratio x unit-variance
    # advantage, O(1); the gradient's is its largest entry) bounds that on any CPU kernels
    # (AVX512 and AVX2 give 1.9e-9 here, an AVX512 Xeon 1.12e-8; 64 eps x grad_max = 7.4e-7),
    # while a real mismatch (a split group, a wrong scale) is of the order of the values.
    tol = 64 * torch.finfo(getattr(torch, result["logp_dtype"])).eps  # TRL's kernel: float32
    for two, one in zip(result["losses_2proc"], result["losses_1proc"], strict=True):
        assert abs(two - one) <= tol * max(1.0, abs(one))
    assert max(result["grad_diff"]) <= tol * result["grad_max"] < 1e-3 < result["grad_max"]
