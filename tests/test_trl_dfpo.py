"""DFPOTrainer as a TRL user meets it (repro.integrations.trl, docs/integrations.md section TRL):
on an on-policy batch it updates exactly as TRL's own GRPOTrainer with loss_type="dapo", its
refusals are one line before the model loads, it warns when s is identically 1, and the
documented script runs unmodified."""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")

from test_engine_trl import grads, tiny_qwen3  # noqa: E402

from repro.engines.trl_dfpo import check_dfpo_args  # noqa: E402
from repro.integrations.trl import DFPOTrainer  # noqa: E402
from repro.objectives import make_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
G, ACCUM, ROWS = 4, 4, 2  # 2 groups of 4, 4 micro-steps of 2 rows: every group is split


def ranked(completions, **_):
    """Rewards 0..G-1 within each group: every advantage is non-zero."""
    return [float(i % G) for i in range(len(completions))]


def grpo_args(tmp_path, **kw):
    """One rollout of 8 rows, one optimizer step of ACCUM micro-steps (K = 1: on-policy)."""
    fields = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": ROWS,
              "gradient_accumulation_steps": ACCUM, "steps_per_generation": ACCUM,
              "num_generations": G, "max_completion_length": 10, "use_cpu": True, "bf16": False,
              "gradient_checkpointing": False, "report_to": [], "disable_tqdm": True}
    return trl.GRPOConfig(**(fields | kw))


def micro_steps(trainer, batch) -> list[dict]:
    """The trainer's own `_prepare_inputs` over one optimizer step, its rollout being `batch`."""
    trainer._generate_and_score_completions = lambda inputs: dict(batch)
    trainer._buffered_inputs = None
    out = []
    for step in range(ACCUM):
        trainer._step = step
        out.append(trainer._prepare_inputs(None))
    return out


def step_loss_and_gradient(trainer, parts) -> tuple[float, torch.Tensor]:
    losses = [trainer._compute_loss(trainer.model, part) for part in parts]
    return (sum(float(v.detach()) for v in losses),
            sum(grads(v, trainer.model) for v in losses))


@pytest.fixture(scope="module")
def on_policy(tmp_path_factory):
    """A DFPOTrainer (DFPO, min_replace) and the float64 policy's copy, and one rollout of theirs
    with response lengths 2..9 (so that the normalisers of the loss types differ)."""
    tmp = tmp_path_factory.mktemp("on_policy")
    torch.manual_seed(0)
    model, tok = tiny_qwen3()
    model = model.double()
    twin = copy.deepcopy(model)  # TRL patches the model's LM head in place
    from datasets import Dataset

    prompts = [f"What is {i} + {i}?" for i in range(2)]
    with pytest.warns(UserWarning, match=r"on-policy \(s = 1\)"):
        dfpo = DFPOTrainer(model=model, reward_funcs=ranked, args=grpo_args(tmp),
                           processing_class=tok, objective=make_config("dfpo"),
                           train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]))
    dfpo.model.train()
    dfpo.current_gradient_accumulation_steps = ACCUM  # set by the training loop, outside it here
    batch = dfpo._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(G)])
    mask = batch["completion_mask"]
    length = 2 + torch.arange(mask.size(0)) * 3 % 8
    batch["completion_mask"] = mask * (torch.arange(mask.size(1)) < length[:, None])
    batch["num_items_in_batch"] = batch["completion_mask"].sum()  # what TRL's dapo divides by
    assert len(set(batch["completion_mask"].sum(-1).tolist())) > 2
    return dfpo, twin, tok, prompts, batch


def test_advantages_are_trls_own(on_policy):
    """(R - group mean) / (group std + 1e-4), GRPOConfig's default scale_rewards="group"."""
    batch = on_policy[-1]
    reward = torch.tensor([float(i % G) for i in range(2 * G)]).view(-1, G)
    want = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(batch["advantages"].double(), want.flatten().double())
    assert batch["group"].tolist() == [0] * G + [1] * G


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo"])
def test_on_policy_update_equals_grpo_trainer_with_loss_type_dapo(loss_type, on_policy, tmp_path):
    """On an on-policy optimizer step (K = 1: s = 1) DFPOTrainer's parameter gradient equals
    TRL's own GRPOTrainer's with loss_type="dapo" on the same rollout, each trainer cutting it
    into micro-steps its own way (TRL: rows shuffled one by one; DFPOTrainer: whole groups cut
    into 2-row chunks, with the pre-pass weights). Why: at s = 1 DFPO's weights are all 1
    (min_replace is the identity), so its gradient is -(1/N) sum_i A_i sum_t grad log pi with N
    the step's token count; TRL's clipped ratio surrogate has ratio 1 inside the clip range, so
    its gradient is the same sum, and "dapo" divides by num_items_in_batch (the rollout's tokens)
    / processes x accumulation / steps_per_generation = N here. The loss values agree too: the
    project writes the log-prob surrogate sg[w~] A log pi as sg[w~] A exp(log pi - sg[log pi]),
    whose value at s = 1 is the ratio surrogate's, -(1/N) sum_i A_i |y_i|. "bnpo" divides each
    micro-step by its own token count and "grpo" each sequence by its length: with unequal
    lengths both differ, which shows the comparison can fail. 1e-7: TRL's log-prob kernel runs
    in float32, and the two trainers batch different rows together."""
    dfpo, twin, tok, prompts, batch = on_policy
    from datasets import Dataset

    grpo = trl.GRPOTrainer(model=twin, reward_funcs=ranked, processing_class=tok,
                           args=grpo_args(tmp_path, loss_type=loss_type),
                           train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]))
    grpo.model.train()
    grpo.current_gradient_accumulation_steps = ACCUM
    ours = micro_steps(dfpo, batch)
    assert all(m["seq_weight"] is not None for m in ours)  # groups split: the pre-pass ran
    theirs = micro_steps(grpo, {k: v for k, v in batch.items() if k != "group"})
    loss, grad = step_loss_and_gradient(dfpo, ours)
    trl_loss, trl_grad = step_loss_and_gradient(grpo, theirs)
    scale = float(trl_grad.abs().max())
    assert scale > 1e-3
    if loss_type == "dapo":
        torch.testing.assert_close(grad, trl_grad, atol=1e-7, rtol=0)
        assert loss == pytest.approx(trl_loss, abs=1e-6)  # float32 sums of O(1) terms
        # the update's metrics reached TRL's own log, merged over the micro-steps
        assert dfpo._metrics["train"]["objective/loss"][-1] == pytest.approx(loss, abs=1e-12)
        assert dfpo._metrics["train"]["objective/w_min"][-1] == 1.0
    else:
        assert float((grad - trl_grad).abs().max()) > 1e-3 * scale


def test_each_update_of_a_rollout_gets_whole_groups(on_policy, tmp_path):
    """K = 2 updates per rollout, one group each, in the order of torch's generator (TRL's
    shuffle would scramble the rows): every update's rows answer one prompt, G of them."""
    _, twin, tok, prompts, _ = on_policy
    from datasets import Dataset

    dfpo = DFPOTrainer(model=copy.deepcopy(twin), reward_funcs=ranked, processing_class=tok,
                       args=grpo_args(tmp_path, per_device_train_batch_size=G,
                                      gradient_accumulation_steps=1, steps_per_generation=2),
                       train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]))
    dfpo.model.train()
    rollout = [{"prompt": p} for p in prompts for _ in range(G)]
    seen = []
    for step in range(2):
        dfpo._step = step
        part = dfpo._prepare_inputs(rollout)
        assert part["group"].tolist() == [part["group"][0]] * G
        assert (part["prompt_ids"] == part["prompt_ids"][0]).all()
        seen.append(int(part["group"][0]))
    assert sorted(seen) == [0, 1]


def test_a_micro_step_that_cuts_a_group_without_weights_is_one_line(on_policy):
    dfpo, _, _, _, batch = on_policy
    part = micro_steps(dfpo, batch)[0] | {"seq_weight": None}
    with pytest.raises(RuntimeError, match="partial groups") as err:
        dfpo._compute_loss(dfpo.model, part)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("fields", "kw", "named"), [
    ({"use_liger_kernel": True}, {}, "GRPOConfig.use_liger_kernel=True is refused"),
    ({"top_entropy_quantile": 0.5}, {}, "GRPOConfig.top_entropy_quantile=0.5 is refused"),
    ({"use_vllm": True}, {}, "GRPOConfig.vllm_importance_sampling_correction=True"),
    ({"loss_type": "grpo"}, {}, "GRPOConfig.loss_type='grpo' has no effect"),
    ({"epsilon_high": 0.28}, {}, "GRPOConfig.epsilon_high=0.28 has no effect"),
    ({"beta": 0.04}, {}, "GRPOConfig.use_bias_correction_kl=True is refused"),
    ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
      "steps_per_generation": 2}, {}, "x gradient_accumulation_steps = 2 rows"),
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
      "steps_per_generation": 3}, {}, "GRPOConfig.steps_per_generation=3 must be a multiple"),
    # (TRL checks the global eval batch: with 2 processes, 2 rows each pass that check)
    ({"eval_strategy": "steps", "per_device_eval_batch_size": (4, 2)}, {},
     "GRPOConfig.per_device_eval_batch_size=2"),
    ({}, {"tools": [len]}, "does not take tools"),
    ({}, {"objective": {"name": "dfpo"}}, "must be a config from"),
])
def test_refusals_are_one_line_before_the_model_loads(fields, kw, named, tmp_path):
    """The model id does not exist: the refusal, not a loading error, must come first. A pair
    (a, b) is set to a for GRPOConfig's own checks, then to b."""
    fields = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
              "steps_per_generation": 2} | fields
    args = grpo_args(tmp_path, **{k: v[0] if isinstance(v, tuple) else v
                                  for k, v in fields.items()})
    for key, value in fields.items():
        if isinstance(value, tuple):
            object.__setattr__(args, key, value[1])
    with pytest.raises(ValueError, match=re.escape(named)) as err:
        DFPOTrainer(model="no/such/model", reward_funcs=ranked, args=args, **kw)
    assert "\n" not in str(err.value)


def test_the_s_equals_one_warning_names_its_cause_only_when_it_holds(tmp_path):
    on = grpo_args(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                   steps_per_generation=1)
    with pytest.warns(UserWarning, match="steps_per_generation == gradient_accumulation_steps"):
        check_dfpo_args(on, make_config("dfpo"))
    off_policy = [(grpo_args(tmp_path, per_device_train_batch_size=4,
                             gradient_accumulation_steps=1, steps_per_generation=2), "dfpo"),
                  (grpo_args(tmp_path, per_device_train_batch_size=4, num_iterations=2,
                             gradient_accumulation_steps=1, steps_per_generation=1), "dfpo"),
                  (on, "gspo")]  # not a group transform: nothing that s = 1 would switch off
    for args, name in off_policy:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_dfpo_args(args, make_config(name))


