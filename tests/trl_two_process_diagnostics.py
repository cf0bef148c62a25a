"""Two-process check of the whole-update diagnostics under gradient accumulation, run as
`torchrun --nproc_per_node 2 tests/trl_two_process_diagnostics.py OUT.json` (gloo, CPU).

P=4 prompts, G=4, K=2 minibatches, accumulation 2: each process holds one group per update,
cut into two 2-row micro-steps. The metrics the run log gets for the update (merged over the
micro-steps) must be the same on both processes and equal `cancellation_metrics` of
`policy_loss`'s coefficients on the update gathered into one process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState

P, G, K, ACCUM = 4, 4, 2, 2
KEYS = ("asym", "residual_full", "freq_energy")


def main(out: Path) -> None:
    from accelerate.utils import gather_object

    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_trl import prompt_groups, tiny_qwen3
    from test_engine_trl_accumulation import Sink, shared_prefixes
    from trl_two_process import padded, rolled_out_trainer

    from repro.diagnostics import cancellation_metrics, token_coefficients
    from repro.engines.trl import merge_micro_steps
    from repro.engines.trl_dfpo import whole_groups
    from repro.objectives import Minibatch, policy_loss
    from repro.training.config import TrainConfig

    state = PartialState(cpu=True)  # MULTI_CPU over gloo under torchrun
    result: dict = {"num_processes": state.num_processes}
    for algorithm in ("gspo", "dfpo"):
        torch.manual_seed(0)
        model, tok = tiny_qwen3()
        model = model.double()
        cfg = TrainConfig(model="unused", algorithm=algorithm, prompts_per_step=P, group_size=G,
                          minibatches=K, max_new_tokens=10, engine="trl",
                          trl_args={"gradient_accumulation_steps": ACCUM})
        trainer = rolled_out_trainer(model, tok, cfg, state, out.parent / algorithm)
        policy = trainer.accelerator.unwrap_model(trainer.model)
        update = trainer._buffered_inputs[1]
        shared_prefixes(update)
        trainer.sink = Sink()
        split = True
        for step in range(ACCUM, 2 * ACCUM):  # the micro-steps of the second update
            trainer._step = step
            micro = trainer._prepare_inputs(None)
            split &= not whole_groups(micro["group"], G)
            trainer._compute_loss(policy, micro)
        merged = merge_micro_steps(trainer.sink.metrics)
        ranks = gather_object([{k: merged[k] for k in KEYS} | {"split": split}])
        parts = gather_object([{k: v for k, v in update.items() if isinstance(v, torch.Tensor)
                                and v.dim() and k != "num_items_in_batch"}])
        if not state.is_main_process:
            continue
        whole = {key: padded(parts, key, side) for key, side in (
            ("prompt_ids", "left"), ("prompt_mask", "left"), ("completion_ids", "right"),
            ("completion_mask", "right"), ("old_per_token_logps", "right"))}
        ids = torch.cat([whole["prompt_ids"], whole["completion_ids"]], 1)
        attn = torch.cat([whole["prompt_mask"], whole["completion_mask"]], 1)
        logp = trainer._get_per_token_logps_and_entropies(
            policy, ids, attn, whole["completion_ids"].size(1))[0]
        mask = whole["completion_mask"].bool()
        adv = torch.cat([p["advantages"] for p in parts])
        truth = prompt_groups(whole)
        loss = policy_loss(trainer.loss_cfg, Minibatch(logp, whole["old_per_token_logps"], mask,
                                                       adv, truth))[0]
        ref = cancellation_metrics(token_coefficients(loss, logp), whole["completion_ids"], mask,
                                   truth, adv, len(tok))
        result[algorithm] = {"ranks": ranks, "one_process": ref}
    if state.is_main_process:
        out.write_text(json.dumps(result))


if __name__ == "__main__":
    from repro.engines.fsdp import close_process_group

    main(Path(sys.argv[1]))
    close_process_group()
