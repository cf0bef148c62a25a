"""Per-token log-probs and entropy of a causal LM without materialising [tokens, vocab] logits.

At Qwen3's vocabulary (151,936) and 8,192 response tokens, float32 logits alone take ~5 GB and
the naive ``log_softmax`` path keeps several such tensors alive through backward. Following the
fused linear + log-prob kernels of verl / NeMo-RL / Liger (rl_anchors.md section 4), the lm_head
matmul, logsumexp, target gather and entropy run over row chunks; backward recomputes each
chunk's logits from the saved hidden states and a per-row logsumexp, so at most a few
[chunk_size, vocab] buffers are alive at any time in either pass.

Precision: logits are computed in float32 (or float64 for float64 inputs): the hidden chunk and
the lm_head weight are upcast before the matmul, rather than rounding half-precision logits
after it. For a bf16 model this costs one float32 copy of the weight per pass (what TRL's
``cast_lm_head_to_fp32`` pays) and keeps log-probs free of bf16 rounding (~0.1 nats at logit
magnitude ~30), which would otherwise feed straight into importance ratios. Outputs are in that
float32/float64 compute dtype; gradients are returned in the inputs' dtypes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from repro.training.router import router_aux_loss


def _compute_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    return torch.promote_types(torch.promote_types(hidden.dtype, weight.dtype), torch.float32)


def _chunk_logits(hidden_c: Tensor, weight_acc: Tensor, temperature: float) -> Tensor:
    """[C, V] logits / temperature of one row chunk, in weight_acc's (compute) dtype."""
    logits = hidden_c.to(weight_acc.dtype) @ weight_acc.T
    return logits.div_(temperature) if temperature != 1.0 else logits


# The per-chunk work lives in functions so that a chunk's [C, V] buffers are freed on return,
# before the next chunk allocates its own (a loop body would keep them alive one step longer).


def _forward_chunk(
    hidden_c: Tensor, weight_acc: Tensor, targets_c: Tensor, temperature: float,
    with_entropy: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(logsumexp, logp of targets, entropy | None)`` of one chunk; two [C, V] buffers."""
    z = _chunk_logits(hidden_c, weight_acc, temperature)
    peak = z.amax(dim=-1, keepdim=True)
    z.sub_(peak)  # z <= 0: exp cannot overflow
    e = torch.exp(z)
    total = e.sum(dim=-1)
    log_total = total.log()
    logp = z.gather(-1, targets_c[:, None])[:, 0] - log_total
    # H = -sum p log p with p = e / total and log p = z - log_total
    entropy = log_total - e.mul_(z).sum(dim=-1) / total if with_entropy else None
    return peak[:, 0] + log_total, logp, entropy


def _backward_chunk(
    hidden_c: Tensor, weight_acc: Tensor, targets_c: Tensor, lse_c: Tensor, g_c: Tensor,
    temperature: float, grad_hidden_c: Tensor | None, grad_weight: Tensor | None,
) -> None:
    """Write d(g . logp)/d hidden_c into grad_hidden_c, add d/dW into grad_weight; one [C, V]."""
    p = _chunk_logits(hidden_c, weight_acc, temperature).sub_(lse_c[:, None]).exp_()
    grad_logits = p.mul_(-g_c[:, None]).scatter_add_(1, targets_c[:, None], g_c[:, None])
    if grad_hidden_c is not None:
        grad_hidden_c.copy_(grad_logits @ weight_acc)
    if grad_weight is not None:
        grad_weight.addmm_(grad_logits.T, hidden_c.to(weight_acc.dtype))


class _ChunkedLogprobs(torch.autograd.Function):
    """logp = log softmax(h W^T / T)[target] by row chunks; entropy alongside, without grad."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        chunk_size: int,
        temperature: float,
        with_entropy: bool,
    ) -> tuple[Tensor, Tensor | None]:
        acc = _compute_dtype(hidden, weight)
        weight_acc = weight.to(acc)  # no copy when weight is already in the compute dtype
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=acc)
        lse = hidden.new_empty(n, dtype=acc)
        entropy = hidden.new_empty(n, dtype=acc) if with_entropy else None
        for s in range(0, n, chunk_size):
            rows = slice(s, s + chunk_size)
            lse[rows], logp[rows], entropy_c = _forward_chunk(
                hidden[rows], weight_acc, targets[rows], temperature, with_entropy
            )
            if entropy is not None:
                entropy[rows] = entropy_c
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: FunctionCtx, grad_logp: Tensor, _grad_entropy: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        weight_acc = weight.to(lse.dtype)
        # d logp / d logits = (onehot(target) - softmax) / T: fold 1/T into the row weights.
        g = grad_logp.to(lse.dtype) / temperature
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros_like(weight_acc) if need_weight else None
        for s in range(0, hidden.shape[0], chunk_size):
            rows = slice(s, s + chunk_size)
            _backward_chunk(
                hidden[rows], weight_acc, targets[rows], lse[rows], g[rows], temperature,
                None if grad_hidden is None else grad_hidden[rows], grad_weight,
            )
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def _check_args(
    hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, temperature: float
) -> None:
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden must be [N, H] and weight [V, H], got {tuple(hidden.shape)} and "
            f"{tuple(weight.shape)}"
        )
    if targets.shape != (hidden.shape[0],) or targets.dtype != torch.long:
        raise ValueError(
            f"targets must be a long tensor of shape [{hidden.shape[0]}], got "
            f"{targets.dtype} {tuple(targets.shape)}"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
            and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """``(logp [N], entropy [N] | None)`` of ``softmax(hidden @ weight.T / temperature)``.

    ``logp[i] = log p(targets[i])`` is differentiable w.r.t. ``hidden`` and ``weight``; the
    entropy carries no gradient (RL losses here use it as a diagnostic). Rows are processed
    ``chunk_size`` at a time in forward and backward, so peak extra memory is a few
    [chunk_size, V] buffers instead of several [N, V] ones. The lm_head has no bias (Qwen3).
    """
    _check_args(hidden, weight, targets, chunk_size, temperature)
    return _ChunkedLogprobs.apply(
        hidden, weight, targets, chunk_size, float(temperature), with_entropy
    )


def naive_token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Full-logits reference for `token_logprobs_and_entropy` (tests and benchmark).

    ``chunk_size`` is accepted and ignored so that the two functions are interchangeable.
    """
    _check_args(hidden, weight, targets, chunk_size, temperature)
    acc = _compute_dtype(hidden, weight)
    logp_all = torch.log_softmax(hidden.to(acc) @ weight.to(acc).T / temperature, dim=-1)
    logp = logp_all.gather(-1, targets[:, None])[:, 0]
    if not with_entropy:
        return logp, None
    with torch.no_grad():
        entropy = -logp_all.exp().mul_(logp_all).sum(dim=-1)
    return logp, entropy


def response_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """`response_logprobs_and_aux` without the router loss: ``(logp, entropy | None)``."""
    return response_logprobs_and_aux(model, input_ids, attention_mask, response_mask,
                                     chunk_size=chunk_size, temperature=temperature,
                                     with_entropy=with_entropy)[:2]


def response_logprobs_and_aux(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = True,
    router_aux: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(logp [B, L], entropy [B, L] | None)`` of the tokens where ``response_mask`` is True.

    ``logp[b, t] = log pi(input_ids[b, t] | input_ids[b, :t])``, zero where the mask is False,
    differentiable w.r.t. the model's parameters. Only masked positions go through the lm_head
    (prompt and padding cost no vocab-sized work). Position ids are ``cumsum(attention_mask) - 1``
    as in ``generate``, so left- and right-padded rows score exactly like the unpadded sequence.
    Works for HF causal LMs whose logits are a plain bias-free linear map of the decoder's
    ``last_hidden_state`` (Qwen, Llama, Mistral; not models with logit soft-capping or scaling).
    With `router_aux` (an MoE policy), the same forward's router load-balancing loss over the
    attended tokens (`repro.training.router`) comes third; else None.
    """
    if not (input_ids.shape == attention_mask.shape == response_mask.shape
            and input_ids.dim() == 2):
        raise ValueError(
            "input_ids, attention_mask and response_mask must share one [B, L] shape, got "
            f"{tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, "
            f"{tuple(response_mask.shape)}"
        )
    if response_mask.dtype != torch.bool:
        raise ValueError(f"response_mask must be bool, got {response_mask.dtype}")
    attended = attention_mask.bool()
    # A scored token needs itself and its predecessor to be real (non-padding) tokens.
    if bool(response_mask[:, 0].any() | (response_mask & ~attended).any()
            | (response_mask[:, 1:] & ~attended[:, :-1]).any()):
        raise ValueError(
            "response_mask may only be True at attended positions t >= 1 whose previous "
            "position is attended as well"
        )
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("response_logprobs supports bias-free lm_heads only")
    position_ids = (attended.long().cumsum(-1) - 1).clamp_(min=0)
    out = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        **({"output_router_logits": True} if router_aux else {}))
    hidden = out.last_hidden_state
    aux = router_aux_loss(model, out.router_logits, attention_mask) if router_aux else None
    scored = response_mask[:, 1:]
    logp_sel, entropy_sel = token_logprobs_and_entropy(
        hidden[:, :-1][scored],  # hidden state t-1 predicts token t
        head.weight,
        input_ids[:, 1:][scored],
        chunk_size=chunk_size,
        temperature=temperature,
        with_entropy=with_entropy,
    )
    zeros = logp_sel.new_zeros(input_ids.shape)
    # masked_scatter fills in row-major order, the order boolean indexing selected in.
    logp = zeros.masked_scatter(response_mask, logp_sel)
    entropy = None if entropy_sel is None else zeros.masked_scatter(response_mask, entropy_sel)
    return logp, entropy, aux
