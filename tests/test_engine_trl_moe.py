"""engine=trl on a Mixture-of-Experts policy (tiny random-init Qwen3-MoE): the overridden
`_compute_loss` keeps transformers' router load-balancing loss as TRL adds it, coef x aux on
top of the objective's loss (Qwen3-Next-80B-A3B trains with coef 0.001)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from test_engine_trl import grads, make_trainer, reference_loss, trl_logprobs
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from repro.models import build_tokenizer

COEF = 0.05  # larger than the 80B's 0.001 so the term stands well above float noise


def tiny_moe():
    tok = build_tokenizer(model_max_length=1024)
    config = Qwen3MoeConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, moe_intermediate_size=16, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1, router_aux_loss_coef=COEF,
        max_position_embeddings=1024, tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id, bos_token_id=None,
        experts_implementation="eager")  # grouped_mm has no float64 kernel
    return Qwen3MoeForCausalLM(config).eval(), tok


@pytest.mark.parametrize("algorithm", ["dfpo", "gspo"])
def test_router_aux_loss_is_kept(algorithm, tmp_path):
    trainer, tok = make_trainer(tmp_path, algorithm, build=tiny_moe)
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == COEF
    part = trainer._buffered_inputs[0]
    loss = trainer._compute_loss(trainer.model, part)
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    aux = trainer.model(input_ids=ids, attention_mask=attn, output_router_logits=True).aux_loss
    objective = reference_loss(trainer, tok, part, trl_logprobs(trainer, part))
    assert float(COEF * aux) > 1e-3  # the term is visible against the 1e-10 tolerance
    assert abs(float(loss - objective - COEF * aux)) <= 1e-10
    g_loss = grads(loss, trainer.model)
    # 1e-8 (max |grad| ~0.1): the plain forward's backward through the routers rounds
    # differently from TRL's fused one at float32 level; against the fused forward it is exact
    torch.testing.assert_close(g_loss, grads(objective + COEF * aux, trainer.model), atol=1e-8,
                               rtol=0)
    g_objective = grads(reference_loss(trainer, tok, part, trl_logprobs(trainer, part)),
                        trainer.model)
    assert float((g_loss - g_objective).abs().max()) > 1e-4  # the term moves the routers
