"""Policy -> colocated vLLM weight sync on CPU (issue 17, defect 7).

TRL 1.16's colocate sync pushes one tensor at a time through `model.load_weights`, which finds
each parameter's `weight_loader`. vLLM's CPU backend repacks linear weights into oneDNN kernels
after loading (the parameters are emptied, `cpu_linear` holds the packed copy), so that sync
fails at the first linear layer (`'Parameter' object has no attribute 'weight_loader'`), stock
TRL included. vLLM's own in-place reload handles the repacking: it restores each layer to its
checkpoint layout, loads, and re-runs the layer's post-load processing. Two things it leaves:
- a tied LM head shares the embedding's weight but keeps its own packed copy, which the reload
  does not refresh (the checkpoint has no `lm_head.weight`), so the head is re-processed here
  (without it, tests/test_vllm_colocate.py measures log-probs off by ~0.6 after 3 steps);
- the prefix cache still holds KV blocks of the old weights (reset, as TRL does).
Where the backend keeps torch's linear instead (measured on an AVX2-only AMD EPYC, 2026-12-02:
no layer repacked), TRL's own sync works too; this one is correct on both kinds of CPU.

Used on vLLM's CPU platform only (`install_cpu_sync`): GPU runs keep TRL's own sync.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor


def model_runner(llm: Any) -> Any:
    """The in-process model runner of a colocated `vllm.LLM` (TRL reaches it the same way)."""
    return llm.llm_engine.model_executor.driver_worker.model_runner


def refresh_packed_head(model: Any) -> None:
    """Re-pack the LM head from its (tied, already reloaded) weight."""
    head = model.lm_head
    head.quant_method.process_weights_after_loading(head)


def sync_cpu_weights(llm: Any, named_params: Iterable[tuple[str, Tensor]]) -> None:
    """Load the policy's parameters (HF names, checkpoint layout) into a colocated CPU vLLM."""
    runner = model_runner(llm)
    runner.reload_weights(weights_iterator=iter(named_params), is_checkpoint_format=True)
    refresh_packed_head(runner.get_model())
    llm.reset_prefix_cache()


def install_cpu_sync(generation: Any) -> None:
    """Replace TRL's colocate sync by `sync_cpu_weights` where vLLM runs on CPU.
    `generation`: the trainer's `trl.generation.vllm_generation.VLLMGeneration`."""
    from vllm.platforms import current_platform

    if generation.mode == "colocate" and current_platform.is_cpu():
        generation.sync_weights = lambda: sync_cpu_weights(generation.llm,
                                                           generation._iter_named_params())
