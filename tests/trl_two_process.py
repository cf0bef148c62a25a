"""Two-process check of engine=trl, run as
`accelerate launch --cpu --num_processes 2 tests/trl_two_process.py OUT.json` (gloo).

Each process generates for its share of the prompts; every micro-batch must hold whole groups
(checked against the prompt tokens, gathered over processes), and the loss and gradient of the
two processes together (losses summed / world size, gradients averaged as DDP does) must equal
those of one process on the gathered batch. Rank 0 writes the measured numbers to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from torch.nn.functional import pad

P, G, K = 4, 4, 2


def padded(parts: list[dict], key: str, side: str) -> torch.Tensor:
    width = max(p[key].size(1) for p in parts)
    return torch.cat([pad(p[key], (width - p[key].size(1), 0) if side == "left"
                          else (0, width - p[key].size(1))) for p in parts])


def rolled_out_trainer(model, tok, cfg, state, out: Path):
    """A ReproGRPOTrainer on `model` whose first rollout is done: each process generates for its
    contiguous share of P prompts (different samples per process), then the same small random
    step moves the policy on every process, so the updates are off-policy (s != 1) and DFPO's
    transform acts. The rollout's minibatches are in `trainer._buffered_inputs`."""
    from datasets import Dataset
    from test_engine_trl import hash_reward

    from repro.engines.trl_args import build_grpo_config
    from repro.engines.trl_trainer import ReproGRPOTrainer

    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {i} + {i}?"}],
                                       tokenize=False, add_generation_prompt=True)
               for i in range(cfg.prompts_per_step)]
    args = build_grpo_config(cfg, out=out, world_size=state.num_processes, steps=1,
                             half_precision=False, use_cpu=True)
    trainer = ReproGRPOTrainer(model=model, processing_class=tok, args=args,
                               reward_funcs=[hash_reward],
                               train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                               repro=cfg)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    n_local = cfg.prompts_per_step // state.num_processes
    mine = prompts[state.process_index * n_local:(state.process_index + 1) * n_local]
    torch.manual_seed(1 + state.process_index)  # different samples on each process
    trainer._prepare_inputs([{"prompt": p} for p in mine for _ in range(cfg.group_size)])
    policy = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        for p in policy.parameters():  # off-policy, so DFPO's transform acts
            p.add_(1e-2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7),
                                      dtype=p.dtype))
    return trainer


def main(out: Path) -> None:

    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_trl import prompt_groups

    from repro.models import TinyModelConfig, build_tiny
    from repro.objectives import Minibatch, policy_loss
    from repro.training.config import TrainConfig

    state = PartialState()
    torch.manual_seed(0)
    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    model = model.double()
    cfg = TrainConfig(model="unused", algorithm="dfpo", prompts_per_step=P, group_size=G,
                      minibatches=K, max_new_tokens=10, engine="trl")
    trainer = rolled_out_trainer(model, tok, cfg, state, out.parent)
    policy = trainer.accelerator.unwrap_model(trainer.model)
    from accelerate.utils import gather_object

    result = {"whole_groups": True, "losses_2proc": [], "losses_1proc": [], "grad_diff": []}
    params = list(policy.parameters())
    for part in trainer._buffered_inputs:
        loss = trainer._compute_loss(policy, part)
        grads = torch.autograd.grad(loss, params)
        flat = torch.cat([g.flatten() for g in grads])
        flat = trainer.accelerator.reduce(flat, "mean")  # what DDP does to the gradients
        total = trainer.accelerator.reduce(loss.detach().reshape(1), "sum") / state.num_processes
        parts = gather_object([{k: v for k, v in part.items() if isinstance(v, torch.Tensor)
                                and v.dim() and k != "num_items_in_batch"}])
        if not state.is_main_process:
            continue
        whole = {"prompt_ids": padded(parts, "prompt_ids", "left"),
                 "prompt_mask": padded(parts, "prompt_mask", "left"),
                 "completion_ids": padded(parts, "completion_ids", "right"),
                 "completion_mask": padded(parts, "completion_mask", "right")}
        truth = prompt_groups(whole)
        group = torch.cat([p["group"] for p in parts])
        same = torch.equal(group[:, None] == group[None], truth[:, None] == truth[None])
        counts = torch.unique(group, return_counts=True)[1]
        result["whole_groups"] &= bool(same and (counts == G).all()
                                       and all(len(set(p["group"].tolist())) * G == len(p["group"])
                                               for p in parts))
        ids = torch.cat([whole["prompt_ids"], whole["completion_ids"]], 1)
        attn = torch.cat([whole["prompt_mask"], whole["completion_mask"]], 1)
        width = whole["completion_ids"].size(1)
        logp = trainer._get_per_token_logps_and_entropies(policy, ids, attn, width)[0]
        result["logp_dtype"] = str(logp.dtype).removeprefix("torch.")  # sets the tolerance
        old = padded(parts, "old_per_token_logps", "right") if "old_per_token_logps" in parts[0] \
            else logp.detach()
        ref, _ = policy_loss(trainer.loss_cfg, Minibatch(
            logp, old, whole["completion_mask"].bool(),
            torch.cat([p["advantages"] for p in parts]), truth))
        ref_flat = torch.cat([g.flatten() for g in torch.autograd.grad(ref, params)])
        result["losses_2proc"].append(float(total))
        result["losses_1proc"].append(float(ref))
        result["grad_diff"].append(float((flat - ref_flat).abs().max()))
        result["grad_max"] = max(result.get("grad_max", 0.0), float(ref_flat.abs().max()))
    if state.is_main_process:
        result["num_processes"] = state.num_processes
        result["backend"] = str(state.backend)
        out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
