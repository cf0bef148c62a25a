"""Trainer options no other test sets: the compute-matching stop (`token_budget`), the k3 KL to
the initial policy (`kl_coef > 0`), the sampler's own log-probs (`behaviour_logprobs: engine`)
and the off-policy dose (`behaviour_temperature`)."""

from __future__ import annotations

import json

from test_train import small, tiny_model  # noqa: F401  (fixtures; `hashed` is conftest.py's)
from train_helpers import comparable

from repro.engines.registry import train
from repro.results import TRAIN_LOG, read_table
from repro.training.config import TrainConfig


def log_of(out) -> list[dict]:
    return read_table(out / "train_log.parquet", TRAIN_LOG).to_pylist()


def test_token_budget_stops_at_the_first_step_that_reaches_it(tiny_model, tmp_path, hashed):  # noqa: F811
    budget = 300  # a step generates at most P x G x max_new_tokens = 4 x 4 x 12 = 192 tokens
    cfg = TrainConfig(**small(tiny_model, steps=50, token_budget=budget,
                              checkpoint_fractions=[0.5, 1.0]))
    train(cfg, tmp_path)
    rows = log_of(tmp_path)
    cum = [r["gen_tokens_cum"] for r in rows]
    assert 2 <= len(rows) < 50
    assert cum[-1] >= budget > cum[-2], cum  # stopped on the step that crossed the budget
    half = next(r["step"] for r in rows if r["gen_tokens_cum"] >= budget / 2)
    steps = json.loads((tmp_path / "manifest.json").read_text())["fraction_steps"]
    assert steps == {"0.5": half, "1.0": rows[-1]["step"]}, steps  # fractions of the tokens


def test_kl_coef_adds_the_k3_penalty_to_the_loss(tiny_model, tmp_path, hashed):  # noqa: F811
    """Same rollouts (step 1 samples the same model); the policy equals the reference on the first
    update (k3 and its gradient are 0 there), so the second update's loss is the plain loss plus
    kl_coef * k3 > 0: the logged mean loss is larger, and training diverges from there."""
    runs = {}
    for coef in (0.0, 0.5):
        out = tmp_path / f"kl{coef}"
        train(TrainConfig(**small(tiny_model, steps=2, kl_coef=coef)), out)
        runs[coef] = log_of(out)
    plain, kl = runs[0.0][0], runs[0.5][0]
    assert kl["reward_mean"] == plain["reward_mean"] and kl["gen_tokens"] == plain["gen_tokens"]
    assert kl["loss"] > plain["loss"]
    assert kl["flops_cum"] > plain["flops_cum"]  # the reference model's forward is counted
    assert runs[0.5][1]["loss"] != runs[0.0][1]["loss"]


def test_engine_logprobs_make_the_first_update_off_policy(tiny_model, tmp_path, hashed):  # noqa: F811
    """With K = 1 and the trainer's own logp_old, s = 1 exactly. The sampler's log-probs are
    taken instead with `engine`: the HF engine scores the same distribution through its KV cache,
    so s differs from 1 only at rounding level (measured ~5e-9 in ppo_kl) but is not exactly 1."""
    runs = {}
    for mode in ("trainer", "engine"):
        out = tmp_path / mode
        train(TrainConfig(**small(tiny_model, steps=1, minibatches=1, algorithm="gspo",
                                  behaviour_logprobs=mode)), out)
        runs[mode] = log_of(out)[0]
    trainer, engine = runs["trainer"], runs["engine"]
    assert trainer["ppo_kl"] == 0.0 and trainer["w_min"] == trainer["w_max"] == 1.0
    assert engine["ppo_kl"] != 0.0 and engine["w_max"] > engine["w_min"]
    assert abs(engine["ppo_kl"]) < 1e-4  # same model, same distribution: a numerical mismatch


def test_behaviour_temperature_doses_the_first_update_off_policy(tiny_model, tmp_path, hashed):  # noqa: F811
    """K = 1: without a dose s = 1 exactly and DFPO's transform does nothing; T_b = T is no dose,
    bit for bit; T_b = 1.5 samples from and scores logp_old at the hotter policy while the loss
    scores at T = 1: s != 1 from the first update, far more spread under the product reading,
    the transform acts (w_shift > 0), and the sampled-token KL(pi_Tb || pi_T) is positive."""
    runs = {}
    for name, t_b in (("none", None), ("same", 1.0), ("hot", 1.5)):
        out = tmp_path / name
        train(TrainConfig(**small(tiny_model, steps=1, minibatches=1,
                                  behaviour_temperature=t_b)), out)
        runs[name] = comparable(log_of(out))[0]
    none, same, hot = runs["none"], runs["same"], runs["hot"]
    assert none == same
    assert none["s_spread"] == none["s_spread_product"] == none["w_shift"] == none["ppo_kl"] == 0
    assert hot["s_spread"] > 1e-3 and hot["s_spread_product"] > 3 * hot["s_spread"]
    assert hot["w_shift"] > 0 and hot["ppo_kl"] > 0
    assert hot["gen_tokens"] != none["gen_tokens"]  # other samples: the sampler ran at T_b


def test_behaviour_temperature_is_refused_outside_the_native_engine(tiny_model):  # noqa: F811
    import pytest

    with pytest.raises(ValueError, match=r"TrainConfig.behaviour_temperature is a native-engine"):
        TrainConfig(**small(tiny_model, engine="trl", behaviour_temperature=1.2))
    with pytest.raises(ValueError, match=r"TrainConfig.behaviour_temperature must be > 0"):
        TrainConfig(**small(tiny_model, behaviour_temperature=0.0))


def test_the_objective_is_built_once_and_handed_to_the_loss(monkeypatch):
    """TrainConfig builds its objective's dataclass once; `objective` is that object (no dict
    round trip or rebuild on the way to the engines), equal to a fresh make_config; to_dict
    writes the overrides as given (a run's config.yaml)."""
    from repro.objectives import make_config
    from repro.training import config as config_module

    built = []
    monkeypatch.setattr(config_module, "make_config",
                        lambda *a, **kw: built.append(a) or make_config(*a, **kw))
    cfg = TrainConfig(model="m", algorithm="dfpo", engine="trl",
                      objective={"transform": "orth_proj", "sequence_ratio": "product"})
    first = cfg.objective
    assert len(built) == 1
    assert first == make_config("dfpo", transform="orth_proj", sequence_ratio="product")
    assert first.sequence_ratio == "product"
    assert cfg.to_dict()["objective"] == {"transform": "orth_proj", "sequence_ratio": "product"}
    again = TrainConfig(**cfg.to_dict())
    assert again == cfg and again.to_dict() == cfg.to_dict()
