"""Tests for repro.models: tiny model build/save/reload, tokenizer, loader errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from repro.models import TinyModelConfig, build_tiny, build_tokenizer, load

TEXTS = ["Hello, world!", "a  b\n\tc", "<|im_start|>user\nhi<|im_end|>\n"]


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Qwen3ForCausalLM, object, Path]:
    out = tmp_path_factory.mktemp("models") / "tiny"
    model, tok = build_tiny(TinyModelConfig(), out_dir=out)
    return model, tok, out


def _logits(model: torch.nn.Module, tok: object) -> torch.Tensor:
    batch = tok(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def test_reload_gives_identical_logits(saved_tiny: tuple) -> None:
    model, tok, out = saved_tiny
    expected = _logits(model, tok)
    auto_model = AutoModelForCausalLM.from_pretrained(out)
    auto_tok = AutoTokenizer.from_pretrained(out)
    assert torch.equal(_logits(auto_model.eval(), auto_tok), expected)
    loaded_model, loaded_tok = load(out)
    assert not loaded_model.training
    assert loaded_model.dtype == torch.float32
    assert torch.equal(_logits(loaded_model, loaded_tok), expected)


def test_reloaded_types_and_special_ids(saved_tiny: tuple) -> None:
    _, tok, out = saved_tiny
    model, loaded_tok = load(out)
    assert isinstance(model, Qwen3ForCausalLM)
    assert isinstance(model.config, Qwen3Config)
    assert model.config.vocab_size == len(tok) == len(loaded_tok)
    assert loaded_tok.pad_token == "<|endoftext|>" and loaded_tok.eos_token == "<|im_end|>"
    assert loaded_tok.bos_token is None
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    assert loaded_tok.chat_template == tok.chat_template
    assert all(loaded_tok.decode(loaded_tok.encode(t)) == t for t in TEXTS)


def test_chat_template_and_special_tokens() -> None:
    tok = build_tokenizer()
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(messages, tokenize=False)
    assert no_prompt == rendered.removesuffix("<|im_start|>assistant\n")
    for special in ("<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(tok.encode(special)) == 1, special
    # Think markers survive skip_special_tokens (as in Qwen3); control tokens do not.
    ids = tok.encode("<|im_start|><think>x</think>y<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>y"


ROUND_TRIP = [
    "",
    " ",
    "Hello,  world!",
    "  lead and trail  ",
    "a\nb\n\n\tc . ' ,",
    "x = {'k': [1, 2]};\r\n~`|",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_encode_decode_round_trip(text: str) -> None:
    tok = build_tokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_unknown_chars_map_to_unk() -> None:
    tok = build_tokenizer()
    assert tok.encode("é") == [tok.unk_token_id]


def test_seed_determinism() -> None:
    a, _ = build_tiny(TinyModelConfig(seed=0))
    b, _ = build_tiny(TinyModelConfig(seed=0))
    c, _ = build_tiny(TinyModelConfig(seed=1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_build_tiny_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny(TinyModelConfig())
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "num_key_value_heads"),
        ({"head_dim": 15}, "head_dim"),
    ],
)
def test_bad_config_names_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"TinyModelConfig\.{field}"):
        TinyModelConfig(**kwargs)


def test_load_missing_local_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        load(missing)


def test_load_unfetchable_hub_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="not-a-real-org/not-a-real-model") as info:
        load("not-a-real-org/not-a-real-model")
    assert "local path" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_atomic_save_failure_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    tok_cls = type(build_tokenizer())
    monkeypatch.setattr(tok_cls, "save_pretrained", boom)
    out = tmp_path / "tiny"
    with pytest.raises(RuntimeError, match="disk full"):
        build_tiny(TinyModelConfig(), out_dir=out)
    assert not out.exists()
    assert os.listdir(tmp_path) == []


def test_atomic_save_replaces_existing_dir(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    build_tiny(TinyModelConfig(seed=0), out_dir=out)
    model, _ = build_tiny(TinyModelConfig(seed=1), out_dir=out)
    reloaded, _ = load(out)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    assert os.listdir(tmp_path) == ["tiny"]
