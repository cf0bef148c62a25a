"""`repro theory`: output contract, determinism, and the cancellation mechanism on the table."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

import repro
from repro.objectives import Minibatch, group_advantages, make_config, policy_loss
from repro.results import THEORY
from repro.theory.config import TheoryConfig
from repro.theory.experiment import ARMS, run_theory, train_on_batch
from repro.theory.policy import (
    EOS,
    FORM_A,
    FORM_B,
    TEMPLATE,
    TEMPLATE_CONTEXTS,
    Rollout,
    TabularPolicy,
)
from repro.theory.probes import kl_sum, probe

SMALL = TheoryConfig(steps=3, n_seeds=2)

# one group, every member emits the whole template; answers differ (lengths 4..6)
SHARED_GROUP = [
    TEMPLATE + FORM_A,
    TEMPLATE + FORM_A,
    TEMPLATE + FORM_B,
    (*TEMPLATE, 7, EOS),
    (*TEMPLATE, EOS),
    (*TEMPLATE, 6, 6, 6),
]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("theory")
    run_theory(SMALL, out)
    return out


def test_parquet_contract(small_run: Path) -> None:
    table = pq.read_table(small_run / "theory.parquet")
    assert table.schema.equals(THEORY)
    for label in ARMS:
        rows = table.filter(pc.equal(table["algorithm"], label))
        assert rows.num_rows == SMALL.steps * SMALL.n_seeds, label
    for name in THEORY.names[3:]:
        assert all(math.isfinite(v) for v in table[name].to_pylist()), name
    for name in ("kl_template", "kl_tax"):
        assert min(table[name].to_pylist()) >= 0, name
    meta = table.schema.metadata
    assert json.loads(meta[b"config"]) == dataclasses.asdict(SMALL)
    assert meta[b"repro_version"].decode() == repro.__version__
    assert set(json.loads(meta[b"algorithms"])) == set(ARMS)


def test_figure_files(small_run: Path) -> None:
    assert (small_run / "theory.png").stat().st_size > 0
    pdf = (small_run / "theory.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    assert b"/Type3" not in pdf
    assert not list(small_run.glob(".*.tmp")), "temp files left behind"


def test_same_seed_same_data(tmp_path: Path) -> None:
    cfg = TheoryConfig(steps=2, n_seeds=1, seed=5)
    run_theory(cfg, tmp_path / "a")
    run_theory(cfg, tmp_path / "b")
    a = pq.read_table(tmp_path / "a" / "theory.parquet")
    b = pq.read_table(tmp_path / "b" / "theory.parquet")
    assert a.equals(b, check_metadata=True)


def test_initial_policy_is_as_documented() -> None:
    probes = probe(TabularPolicy(template_prob=0.97))
    assert probes["logodds"] == pytest.approx(0.0, abs=1e-12)
    assert probes["p_template"] == pytest.approx(0.97**3)
    assert probes["p_correct"] == pytest.approx(0.97**3 * 0.3)
    rollout = Rollout.from_sequences(SHARED_GROUP, [0] * len(SHARED_GROUP))
    assert rollout.reward().tolist() == [1, 1, 1, 0, 0, 0]


def _second_update_grad(label: str) -> tuple[torch.Tensor, float]:
    """Exact gradient of the loss w.r.t. the table on update 2 of a batch (so s != 1).

    Returns the gradient and max |log s_i| at that update.
    """
    name, overrides = ARMS[label]
    cfg = make_config(name, **overrides)
    policy = TabularPolicy(template_prob=0.97)
    rollout = Rollout.from_sequences(SHARED_GROUP, [0] * len(SHARED_GROUP))
    adv, _ = group_advantages(rollout.reward(), rollout.group)
    logp_old = policy.logp(rollout).detach()
    # small lr keeps |log s| below GSPO's 3e-4 clip, so GSPO's gradient is not clipped to 0
    train_on_batch(policy, cfg, rollout, adv, updates=1, lr=1e-3)
    batch = Minibatch(policy.logp(rollout), logp_old, rollout.mask, adv, rollout.group)
    loss, _ = policy_loss(cfg, batch)
    (grad,) = torch.autograd.grad(loss, policy.logits)
    return grad, float(batch.seq_log_ratio().detach().abs().max())


@pytest.mark.parametrize("label", ["dfpo_min", "dfpo_orth", "grpo_fix"])
def test_shared_template_gets_no_gradient(label: str) -> None:
    grad, max_log_s = _second_update_grad(label)
    assert max_log_s > 1e-6, "the batch must be off-policy on update 2"
    scale = float(grad.norm())
    assert scale > 0
    assert float(grad[TEMPLATE_CONTEXTS].norm()) <= 1e-6 * scale


def test_gspo_moves_the_shared_template() -> None:
    grad, max_log_s = _second_update_grad("gspo")
    assert 1e-6 < max_log_s < 3e-4, "GSPO must be off-policy but inside its clip range"
    assert float(grad[TEMPLATE_CONTEXTS].norm()) > 1e-3 * float(grad.norm())


def test_kl_tax_is_the_whole_template_step_when_all_share() -> None:
    """With every member on the template, the entire template update is residual: the probe's
    KL of the residual-only step must equal the measured KL of the real SGD steps."""
    policy = TabularPolicy(template_prob=0.97)
    rollout = Rollout.from_sequences(SHARED_GROUP, [0] * len(SHARED_GROUP))
    adv, _ = group_advantages(rollout.reward(), rollout.group)
    before = policy.log_probs_at(TEMPLATE_CONTEXTS)
    out = train_on_batch(policy, make_config("gspo"), rollout, adv, updates=2, lr=1.0)
    measured = kl_sum(policy.log_probs_at(TEMPLATE_CONTEXTS), before)
    assert measured > 0
    assert out["kl_tax"] == pytest.approx(measured, rel=1e-9)
    assert out["template_residual"] > 0


@pytest.mark.parametrize(
    ("name", "value"),
    [("steps", 0), ("n_seeds", 0), ("group_size", 1), ("updates", 0), ("lr", 0.0),
     ("lr", float("nan")), ("template_prob", 1.0), ("seed", -1)],
)
def test_bad_config_names_the_field(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"TheoryConfig\.{name} "):
        TheoryConfig(**{name: value})


def test_every_config_field_has_help() -> None:
    for f in dataclasses.fields(TheoryConfig):
        assert f.metadata.get("help"), f.name
