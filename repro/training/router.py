"""The router load-balancing loss of Mixture-of-Experts policies (Qwen3-MoE, Qwen3-Next), as
both engines add it: `coef x aux`, on top of the objective's loss and outside it.

The loss is transformers' own (`load_balancing_loss_func` of the model's family, the function
its ForCausalLM forward calls with `output_router_logits=True`, and so the `aux_loss` TRL reads),
over the attended tokens of the forward's batch. The coefficient follows TRL's rule (GRPOTrainer
1.16): the TrainConfig value if set, else the model config's `router_aux_loss_coef`; the loss is
on when the config declares `output_router_logits` (an MoE) and the coefficient is not 0. It
enters neither the objective's metrics nor the cancellation diagnostics (c = -dL/dlogp of the
objective's loss alone): it is logged apart, as `aux_loss`.
"""

from __future__ import annotations

import sys
from typing import Any

from torch import Tensor


def router_aux_coef(model: Any, override: float | None) -> float:
    """The coefficient of `coef x aux` for this policy (0.0: no router loss), TRL's rule."""
    text = model.config.get_text_config()
    moe = hasattr(text, "output_router_logits")
    if override and not moe:
        raise ValueError(f"TrainConfig.router_aux_loss_coef={override} but "
                         f"{type(model).__name__} is not a Mixture-of-Experts model")
    coef = getattr(text, "router_aux_loss_coef", 0.0) if override is None else override
    return float(coef) if moe else 0.0


def router_aux_loss(model: Any, router_logits: tuple[Tensor, ...],
                    attention_mask: Tensor) -> Tensor:
    """transformers' load-balancing loss of the model's family over the attended tokens (the
    module of the model's class, or of a base class when FSDP2 wrapped it, defines it)."""
    text = model.config.get_text_config()
    for cls in type(model).__mro__:
        func = getattr(sys.modules.get(cls.__module__), "load_balancing_loss_func", None)
        if func is not None:
            return func(router_logits, text.num_experts, text.num_experts_per_tok,
                        attention_mask)
    raise TypeError(f"{type(model).__name__}: no load_balancing_loss_func in its module")
