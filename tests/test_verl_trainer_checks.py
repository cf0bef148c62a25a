"""The check command against what verl 0.9.1's trainer does around the loss
(repro/integrations/verl_check.py): advantage estimators judged by calling verl's registry,
use_prefix_grouper shown through verl's own `_balance_batch`, and the refusal messages listing
only what the mode accepts.

Skipped without verl; .ci/run runs them in its verl venv (REPRO_REQUIRE_VERL=1).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_verl_plugin import doc_overrides, one_line_error
from verl_batches import require_verl

require_verl()
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from repro.integrations.verl_check import (  # noqa: E402
    accepted_estimators,
    check_run,
    compose,
    estimator_problem,
)

PREFIX_GROUPER = "actor_rollout_ref.actor.use_prefix_grouper=True"


@pytest.fixture
def custom_estimators():
    """Two estimators registered in verl's registry the way a user registers one: the check must
    judge them by what they compute (they differ only in centring)."""

    def outcome(token_level_rewards, response_mask, index, centre):
        score = token_level_rewards.sum(-1)
        if centre:
            for uid in set(index):
                rows = torch.tensor([u == uid for u in index])
                score[rows] -= score[rows].mean()
        adv = score[:, None] * response_mask
        return adv, adv

    names = {"test_centred": True, "test_uncentred": False}
    for name, centre in names.items():
        core_algos.register_adv_est(name)(
            lambda centre=centre, **kw: outcome(kw["token_level_rewards"], kw["response_mask"],
                                                kw["index"], centre))
    yield names
    for name in names:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(name)


def test_estimators_are_judged_by_what_they_compute(custom_estimators, capsys):
    algorithm = compose(doc_overrides()).algorithm
    accepted = accepted_estimators(algorithm)
    assert "test_centred" in accepted and "test_uncentred" not in accepted
    assert {"grpo", "rloo"} <= set(accepted)
    assert not {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"} & set(accepted)
    assert main_ok([*doc_overrides(), "algorithm.adv_estimator=test_centred"])
    err = one_line_error([*doc_overrides(), "algorithm.adv_estimator=test_uncentred"], capsys)
    assert "adv_estimator=test_uncentred gives advantages that are not centred per group" in err
    # the message lists exactly the accepted estimators
    assert err.rstrip().endswith(", ".join(accepted))


def main_ok(overrides: list[str]) -> bool:
    return check_run(compose(overrides)).startswith("ok: ")


def test_an_estimator_that_cannot_be_called_is_refused():
    algorithm = compose(doc_overrides()).algorithm
    core_algos.register_adv_est("test_needs_more")(lambda *, token_level_rewards, extra: None)
    try:
        assert "could not be checked" in estimator_problem("test_needs_more", algorithm)
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("test_needs_more")


def verls_balance_batch():
    """RayPPOTrainer._balance_batch, compiled from verl's ray_trainer.py with the names that
    module imports for it (importing the module itself needs peft, torchdata, ..., which the
    CPU venv leaves out)."""
    import ast
    import inspect

    from verl.utils import seqlen_balancing

    path = Path(inspect.getfile(seqlen_balancing)).parents[1] / "trainer/ppo/ray_trainer.py"
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayPPOTrainer"]
    (fn,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_balance_batch"]
    namespace = {"torch": torch, "DataProto": DataProto, **vars(seqlen_balancing)}
    exec(compile(ast.Module([fn], []), str(path), "exec"), namespace)
    return namespace["_balance_batch"]


def balanced_uids(use_prefix_grouper: bool, groups: int = 8, n: int = 4, dp: int = 2):
    """The uid order after verl's own RayPPOTrainer._balance_batch on a batch laid out as the
    trainer lays it out (each prompt repeated n times, interleaved), split as dispatch splits
    it across dp ranks."""
    g = torch.Generator().manual_seed(0)
    rows, width = groups * n, 40
    lengths = torch.randint(4, width + 1, (rows,), generator=g)
    attention = (torch.arange(width)[None, :] < lengths[:, None]).long()
    uids = np.array([f"uid-{i // n}" for i in range(rows)], dtype=object)
    batch = DataProto.from_dict(tensors={"attention_mask": attention},
                                non_tensors={"uid": uids})
    trainer = SimpleNamespace(use_prefix_grouper=use_prefix_grouper, actor_rollout_wg=None,
                              _get_dp_size=lambda wg, role: dp)
    verls_balance_batch()(trainer, batch, metrics={})
    return [list(part) for part in np.split(batch.non_tensor_batch["uid"], dp)]


def whole_and_contiguous(ranks: list[list[str]], n: int = 4) -> bool:
    """Every rank holds whole groups of n rows, each contiguous (so micro-batches of a multiple
    of n rows hold whole groups)."""
    for uids in ranks:
        blocks = [uids[k:k + n] for k in range(0, len(uids), n)]
        if any(len(set(b)) != 1 for b in blocks) or len({b[0] for b in blocks}) != len(blocks):
            return False
    return True


def test_prefix_grouper_balancing_keeps_groups_through_verls_code():
    assert whole_and_contiguous(balanced_uids(use_prefix_grouper=True))
    assert not whole_and_contiguous(balanced_uids(use_prefix_grouper=False))  # the plain one cuts


def test_the_check_follows_verls_balancing(capsys):
    on = [*doc_overrides(), "trainer.balance_batch=True"]
    assert "trainer.balance_batch=True" in one_line_error(on, capsys)
    assert main_ok([*on, PREFIX_GROUPER])
    assert main_ok([*doc_overrides(), PREFIX_GROUPER])  # without balancing it changes no row


@pytest.mark.parametrize("mode", ["dfpo_min", "dfpo_orth_prod", "grpo_fix"])
def test_agg_refusals_list_only_what_the_mode_takes(mode, capsys):
    argv = [*doc_overrides(), f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}",
            "actor_rollout_ref.actor.loss_agg_mode=token-sum"]
    err = one_line_error(argv, capsys)
    listed = err.split(" takes one of ", 1)[1].strip().split(", ")
    for agg in listed:  # every listed mode passes the check
        assert main_ok([*argv[:-1], f"actor_rollout_ref.actor.loss_agg_mode={agg}"]), agg
    assert ("seq-mean-token-mean" in listed) == (mode == "grpo_fix")


def test_the_docs_list_the_estimators_that_pass():
    """docs/integrations.md names the estimators the check accepts in verl 0.9.1: the list is
    the check's own answer on the documented overrides."""
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "integrations.md")
                    .read_text().split())
    listed = text.split("In verl 0.9.1 those are ", 1)[1].split(";", 1)[0]
    names = [n.strip("` ,.") for n in listed.replace(" and ", ", ").split(",")]
    assert names == accepted_estimators(compose(doc_overrides()).algorithm)
