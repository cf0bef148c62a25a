"""Both engines on the tiny MoE architectures (issue 42): an RL step of every objective on
Qwen3-MoE and Qwen3-Next, the router load-balancing loss equal in the native and TRL engines on
the same batch and kept out of the objective's diagnostics, SIGKILL and resume, export, reload
and evaluation."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import train_helpers
from train_helpers import comparable, kill_and_resume

from repro.engines.registry import train
from repro.models import TinyModelConfig, build_tiny, load
from repro.results import TRAIN_LOG, read_table
from repro.training.config import ENGINES, TrainConfig
from repro.training.logprobs import response_logprobs_and_aux
from repro.training.router import router_aux_coef

ARCHS = {"qwen3_moe": {"architecture": "qwen3_moe"},
         "qwen3_next": {"architecture": "qwen3_next", "num_hidden_layers": 4}}
OBJECTIVES = [("grpo", {}), ("gspo", {}), ("dfpo", {"transform": "min_replace"}),
              ("dfpo", {"transform": "orth_proj"})]


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    for arch, kw in ARCHS.items():
        build_tiny(TinyModelConfig(**kw), root / arch)
    return root


small = functools.partial(train_helpers.small, max_new_tokens=10)


def rows_of(out):
    return read_table(out / "train_log.parquet", TRAIN_LOG).to_pylist()


def router_weights(folder):
    model = load(folder)[0]
    return torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                      if n.endswith("mlp.gate.weight")])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize(("algorithm", "objective"), OBJECTIVES)
def test_rl_steps_log_the_router_loss_and_move_the_routers(algorithm, objective, arch, engine,
                                                           policies, tmp_path, hashed):
    """Every objective trains on both architectures in both engines; aux_loss is logged per
    step (transformers' loss is top_k = 2 under perfect balance, here near it) and the routers
    move."""
    final = train(TrainConfig(**small(policies / arch, algorithm=algorithm, objective=objective,
                                      engine=engine)), tmp_path)
    rows = rows_of(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(1.0 <= r["aux_loss"] < 8.0 for r in rows), [r["aux_loss"] for r in rows]
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in rows)
    assert not torch.equal(router_weights(final), router_weights(policies / arch))


def test_dense_policy_logs_no_router_loss_and_refuses_a_coefficient(tmp_path, hashed):
    dense = tmp_path / "dense"
    build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64), dense)
    train(TrainConfig(**small(dense, steps=1)), tmp_path / "run")
    assert math.isnan(rows_of(tmp_path / "run")[0]["aux_loss"])
    with pytest.raises(ValueError, match=r"router_aux_loss_coef=0.5 but Qwen3ForCausalLM is "
                                         r"not a Mixture-of-Experts model"):
        train(TrainConfig(**small(dense, steps=1, router_aux_loss_coef=0.5)), tmp_path / "x")


def trl_trainer(tmp_path, arch):
    """test_engine_trl's float64 trainer around the tiny MoE (eager experts: grouped_mm has no
    float64 kernel), its first minibatch prepared."""
    pytest.importorskip("trl")
    from test_engine_trl import make_trainer

    def build():
        model, tok = build_tiny(TinyModelConfig(**ARCHS[arch]))
        model.set_experts_implementation("eager")
        return model, tok

    return make_trainer(tmp_path, "dfpo", build=build)


class Sink:
    def __init__(self):
        self.updates = []

    def update(self, metrics, **_):
        self.updates.append(metrics)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_aux_loss_equal_in_both_engines_on_the_same_batch(arch, tmp_path):
    """The native engine's router loss (its decoder forward + transformers' function) equals
    the one TRL's forward returns and the TRL engine logs, on the same rows; both engines take
    the coefficient from the model config by the same rule."""
    trainer, _ = trl_trainer(tmp_path, arch)
    part = trainer._buffered_inputs[0]
    part["completion_mask"][::2, -3:] = 0  # right padding, as after an early EOS
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    resp = torch.cat([torch.zeros_like(part["prompt_mask"]), part["completion_mask"]], 1).bool()
    trl_aux = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attn, part["completion_ids"].size(1), compute_aux_loss=True)[2]
    native_aux = response_logprobs_and_aux(trainer.model, ids, attn, resp, router_aux=True)[2]
    assert float(trl_aux) > 1.0  # ~top_k = 2 near balance: a real value, not a zero
    torch.testing.assert_close(native_aux, trl_aux, atol=1e-9, rtol=0)
    trainer.sink = Sink()
    trainer._compute_loss(trainer.model, part)
    assert trainer.sink.updates[0]["aux_loss"] == pytest.approx(float(native_aux), abs=1e-9)
    assert trainer.aux_loss_enabled
    assert router_aux_coef(trainer.model, None) == trainer.router_aux_loss_coef == 0.001


def test_router_loss_is_outside_the_objective_and_its_diagnostics(policies, hashed):
    """Native engine, one update on one scored rollout with the router loss off and at 0.5:
    the objective's loss and every diagnostic (the cancellation residual included) are equal,
    the update is not."""
    from repro.engines.native import rollout_stage, step_context, update_stage

    results = []
    for coef in (0.0, 0.5):
        cfg = TrainConfig(**small(policies / "qwen3_next", minibatches=1,
                                  router_aux_loss_coef=coef))
        torch.manual_seed(0)
        ctx, _ = step_context(cfg, cfg.model)
        scored = rollout_stage(ctx, 1)
        metrics = update_stage(ctx, 1, scored)[0]
        params = torch.cat([p.detach().flatten() for p in ctx.model.parameters()])
        ctx.rewarder.close()
        results.append((metrics, params))
    (off, p_off), (on, p_on) = results
    assert math.isnan(off["aux_loss"]) and on["aux_loss"] > 1.0
    same = {k for k in off if k not in ("aux_loss", "grad_norm")}
    assert "residual_full" in same and "loss" in same
    assert {k: off[k] for k in same} == pytest.approx({k: on[k] for k in same}, nan_ok=True)
    assert on["grad_norm"] != off["grad_norm"] and not torch.equal(p_on, p_off)


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_sigkill_and_resume_equals_an_uninterrupted_run(arch, policies, tmp_path):
    """test_train's SIGKILL test on the MoE architectures: bit-identical logs after a resume
    (router loss included)."""
    whole, resumed = kill_and_resume(small(policies / arch, steps=6, checkpoint_every=2),
                                     tmp_path)
    assert [r["step"] for r in resumed] == list(range(1, 7))
    assert comparable(resumed) == comparable(whole)
    assert all(r["aux_loss"] > 1.0 for r in resumed)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("arch", list(ARCHS))
def test_export_reloads_and_evaluates(arch, engine, policies, tmp_path, hashed):
    """Each budget-fraction policy of an exported MoE run reloads as its architecture with the
    final weights (1.0) and goes through `repro eval`'s runner with the real grader."""
    from repro.evaluation.config import EvalConfig
    from repro.evaluation.runner import run_eval
    from repro.results import EVAL_PROBLEMS
    from repro.training.export import export_run

    cfg = TrainConfig(**small(policies / arch, steps=2, engine=engine,
                              checkpoint_fractions=[0.5, 1.0]))
    train(cfg, tmp_path / "scratch")
    dest = export_run(tmp_path / "scratch", tmp_path / "run")
    start = load(policies / arch)[0]
    final = dict(load(tmp_path / "scratch" / "final")[0].named_parameters())
    for frac in ("0.5", "1.0"):
        policy, _ = load(dest / "policy" / f"frac={frac}")
        assert type(policy) is type(start) and policy.dtype == torch.float32
        same = all(torch.equal(p, final[n]) for n, p in policy.named_parameters())
        assert same == (frac == "1.0")
    paths = run_eval(EvalConfig(model=str(dest / "policy" / "frac=1.0"), benchmarks=["synth-rule"],
                                out=tmp_path / "eval", k=2, limit=4, engine="hf",
                                sampling={"max_new_tokens": 16}))["synth-rule"]
    problems = read_table(paths["problems"], EVAL_PROBLEMS).to_pylist()
    assert len(problems) == 4 and all(r["grader_errors"] == 0 for r in problems)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_sft_adds_the_router_loss_and_trains_the_routers(arch, tmp_path):
    """`repro sft` on the MoE architectures: its step loss is transformers' CE plus coef x aux,
    and a short run writes a policy of the same class whose routers moved."""
    from repro.tasks import synthetic_demonstrations
    from repro.training.sft import SFTConfig, collate, encode_demo, run_sft, sft_step

    model, tok = build_tiny(TinyModelConfig(**ARCHS[arch]))
    demos = synthetic_demonstrations("synth-rule", "train", 4, 0)
    batch = collate([encode_demo(tok, d["messages"], 1024) for d in demos], tok.pad_token_id)
    with torch.no_grad():
        ce = model(**batch).loss
        aux = model(**batch, output_router_logits=True).aux_loss
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    expected = float(ce + model.config.router_aux_loss_coef * aux)
    assert sft_step(model, opt, batch, 1.0) == pytest.approx(expected, rel=1e-6)
    assert float(model.config.router_aux_loss_coef * aux) > 1e-3  # visible against rel 1e-6

    cfg = SFTConfig(model=TinyModelConfig(**ARCHS[arch]), tasks={"synth-rule": 1.0}, n_demos=16,
                    steps=4, batch_size=4, warmup=1, eval_n=0)
    run_sft(cfg, tmp_path / "sft")
    trained = load(tmp_path / "sft")[0]
    assert type(trained) is type(model)
    assert not torch.equal(router_weights(tmp_path / "sft"),
                           torch.cat([p.detach().flatten() for n, p in
                                      build_tiny(cfg.model)[0].named_parameters()
                                      if n.endswith("mlp.gate.weight")]))


def test_one_key_sets_the_coefficient_in_both_engines(policies, tmp_path):
    """TrainConfig.router_aux_loss_coef reaches TRL as its GRPOConfig field (trl_args may not
    set it) and the native engine through `router_aux_coef`, which reads it as TRL does."""
    pytest.importorskip("trl")
    from repro.engines.trl_args import build_grpo_config

    with pytest.raises(ValueError, match=r"trl_args\.router_aux_loss_coef is set from "):
        TrainConfig(model="m", engine="trl", trl_args={"router_aux_loss_coef": 0.0})
    model = load(policies / "qwen3_moe")[0]
    for value, want in ((None, 0.001), (0.0, 0.0), (0.25, 0.25)):
        cfg = TrainConfig(model="m", engine="trl", router_aux_loss_coef=value)
        args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                                 use_cpu=True)
        assert args.router_aux_loss_coef == value
        assert router_aux_coef(model, value) == want
