"""SFT warm start: assistant-only loss, learning, determinism, atomic outputs, config errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest
import torch
from typer.testing import CliRunner

from repro.cli import app
from repro.models import TinyModelConfig, build_tiny, load
from repro.tasks import synthetic_demonstrations
from repro.training.sft import (
    IGNORE,
    METRICS_FILE,
    GateMissed,
    SFTConfig,
    _train,
    allocate,
    collate,
    encode_demo,
    run_sft,
    sft_step,
)
from repro.training.sft_schedule import floor_factor, grouped_batches, lr_factor, plain_batches

MICRO = TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=16, intermediate_size=64)


def micro_cfg(**overrides: object) -> SFTConfig:
    base = {"model": MICRO, "n_demos": 16, "steps": 3, "batch_size": 4, "warmup": 1,
            "eval_n": 0}
    return SFTConfig(**(base | overrides))


@pytest.fixture(scope="module")
def tok():
    return build_tiny(MICRO)[1]


def test_labels_cover_exactly_the_assistant_reply_and_eos(tok):
    demo = synthetic_demonstrations("synth-aime", "train", 1, 0)[0]
    ids, labels = encode_demo(tok, demo["messages"], 1024)
    prompt = tok.apply_chat_template(demo["messages"][:-1], add_generation_prompt=True,
                                     tokenize=False)
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert len(ids) == len(labels)
    assert labels[:n_prompt] == [IGNORE] * n_prompt
    assert labels[n_prompt:] == ids[n_prompt:]
    reply = demo["messages"][-1]["content"]
    assert tok.decode(ids[n_prompt:]) == reply + tok.eos_token
    assert ids[-1] == tok.eos_token_id
    # the tokens are what generation sees: the templated chat up to the closing <|im_end|>
    full = tok.apply_chat_template(demo["messages"], tokenize=False)
    assert full.startswith(tok.decode(ids))


def test_too_long_demos_are_dropped_and_padding_is_masked(tok):
    demos = synthetic_demonstrations("synth-hmmt", "train", 2, 0)
    assert encode_demo(tok, demos[0]["messages"], 20) is None
    a, b = (encode_demo(tok, d["messages"], 1024) for d in demos)
    batch = collate([a, b], tok.pad_token_id)
    width = max(len(a[0]), len(b[0]))
    assert batch["input_ids"].shape == (2, width)
    for row, (ids, _) in enumerate((a, b)):
        assert batch["attention_mask"][row].sum() == len(ids)
        assert (batch["labels"][row, len(ids):] == IGNORE).all()


def test_loss_decreases_on_a_fixed_batch(tok):
    model, _ = build_tiny(MICRO)
    model.train()
    demos = synthetic_demonstrations("synth-aime", "train", 2, 0)
    batch = collate([encode_demo(tok, d["messages"], 1024) for d in demos], tok.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = [sft_step(model, optimizer, batch, grad_clip=1.0) for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0]


def test_schedule_warms_up_then_decays():
    factors = [lr_factor(s, 2, 10) for s in range(10)]
    assert factors[:2] == [0.5, 1.0]
    assert all(x >= y for x, y in itertools.pairwise(factors[1:]))
    assert factors[-1] > 0.1


def test_allocate_sums_to_n_by_weight():
    assert allocate({"a": 1.0, "b": 1.0}, 5) in ({"a": 3, "b": 2}, {"a": 2, "b": 3})
    assert allocate({"a": 3.0, "b": 1.0}, 8) == {"a": 6, "b": 2}


def test_run_writes_a_loadable_model_and_metrics(tmp_path):
    out = tmp_path / "sft"
    metrics = run_sft(micro_cfg(tasks={"synth-aime": 1.0, "synth-hmmt": 1.0}, eval_n=4,
                                eval_max_new_tokens=8), out)
    model, tok = load(out)
    assert tok.chat_template is not None
    assert model.config.hidden_size == MICRO.hidden_size
    saved = json.loads((out / METRICS_FILE).read_text())
    assert saved["n_demos"] == 16 and saved["demo_forms"] == {"A": 8, "B": 8}
    assert len(saved["loss"]["curve"]) == 3 and saved["tokens_per_s"] > 0
    reward = saved["train_reward"]
    assert reward["n"] == 4 and set(reward["per_task"]) == {"synth-aime", "synth-hmmt"}
    assert 0.0 <= reward["mean"] <= 1.0 and sum(reward["forms"].values()) == 4
    assert saved["config"]["model"]["hidden_size"] == MICRO.hidden_size
    assert metrics["loss"] == saved["loss"]
    assert not [p for p in tmp_path.iterdir() if p.name != "sft"]  # no temp dirs left behind


def test_refuses_to_replace_a_foreign_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not an SFT output"):
        run_sft(micro_cfg(), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_same_seed_gives_identical_weights_and_fine_tunes_a_saved_model(tmp_path):
    run_sft(micro_cfg(), tmp_path / "a")
    run_sft(micro_cfg(), tmp_path / "b")
    run_sft(micro_cfg(seed=1), tmp_path / "c")
    weights = {k: load(tmp_path / k)[0].state_dict() for k in "abc"}
    assert all(torch.equal(v, weights["b"][n]) for n, v in weights["a"].items())
    assert not all(torch.equal(v, weights["c"][n]) for n, v in weights["a"].items())
    run_sft(micro_cfg(model=str(tmp_path / "a"), steps=1, warmup=0), tmp_path / "d")
    tuned = load(tmp_path / "d")[0].state_dict()
    assert not all(torch.equal(v, tuned[n]) for n, v in weights["a"].items())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tasks", {}),
        ("tasks", {"synth-nope": 1.0}),
        ("tasks", {"synth-aime": 0.0}),
        ("model", 3),
        ("n_demos", 0),
        ("n_demos", 10**7),
        ("steps", 0),
        ("batch_size", 1.5),
        ("lr", 0.0),
        ("warmup", 10**6),
        ("weight_decay", -1.0),
        ("grad_clip", float("nan")),
        ("max_len", 10**6),
        ("seed", -1),
        ("eval_n", -1),
        ("eval_temperature", -0.5),
        ("eval_max_new_tokens", 0),
        ("group_by_length", 1),
        ("gate_reward", 1.5),
        ("max_steps", 2),
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SFTConfig\.{field} "):
        SFTConfig(**{field: value})


def test_model_given_as_a_mapping_becomes_a_tiny_config():
    assert SFTConfig(model={"hidden_size": 32}).model == TinyModelConfig(hidden_size=32)


def test_a_gate_needs_the_estimate():
    with pytest.raises(ValueError, match=r"SFTConfig\.eval_n .*gate_reward"):
        SFTConfig(gate_reward=0.2, eval_n=0)


def test_the_floor_schedule_is_the_cosine_then_its_floor():
    assert [floor_factor(s, 2, 10) for s in range(10)] == [lr_factor(s, 2, 10) for s in range(10)]
    assert floor_factor(10, 2, 10) == floor_factor(500, 2, 10) == lr_factor(9, 2, 10)


def test_grouped_batches_see_every_demo_once_per_epoch_with_little_padding():
    """A mix like the old stage 1's: ~3.5% long demos (synth-lcb) among ~200-token ones; plain
    batches of 8 pad a quarter of the batches to the long width, grouped ones almost none."""
    rng = random.Random(0)
    lengths = [rng.randint(160, 210) if rng.random() > 0.035 else rng.randint(700, 815)
               for _ in range(2000)]

    def real_share(epoch: list[list[int]]) -> float:
        return (sum(lengths[i] for b in epoch for i in b)
                / sum(len(b) * max(lengths[i] for i in b) for b in epoch))

    grouped = grouped_batches(lengths, 8, seed=3)
    epoch = [next(grouped) for _ in range(len(lengths) // 8)]
    assert sorted(i for b in epoch for i in b) == list(range(len(lengths)))
    plain = plain_batches(len(lengths), 8, seed=3)
    assert real_share(epoch) > 0.9 > 0.75 > real_share([next(plain) for _ in epoch])
    assert epoch != [next(grouped) for _ in epoch]  # the next epoch is reshuffled


def _toy_examples(tok, n=8):
    demos = synthetic_demonstrations("synth-aime", "train", n, 0)
    return [encode_demo(tok, d["messages"], 1024) for d in demos]


def test_a_gate_keeps_training_at_the_floor_until_the_estimate_passes(tok):
    readings = iter([0.1, 0.2, 0.5, 0.9])
    model, _ = build_tiny(MICRO)
    cfg = micro_cfg(steps=4, gate_reward=0.4, gate_every=3, max_steps=12, eval_n=4)
    out = _train(model, tok.pad_token_id, _toy_examples(tok), cfg,
                 lambda: {"mean": next(readings)})
    assert out["gate_checks"] == [[4, 0.1], [7, 0.2], [10, 0.5]]
    assert out["steps_run"] == 10 and out["gated_reward"] == {"mean": 0.5}


def test_a_gate_missed_at_the_cap_fails_and_writes_no_model(tok, tmp_path, monkeypatch):
    model, _ = build_tiny(MICRO)
    cfg = micro_cfg(steps=4, gate_reward=0.4, gate_every=2, max_steps=8, eval_n=4)
    with pytest.raises(GateMissed, match=r"best 0\.300 at step 6\) < gate_reward 0\.4"):
        _train(model, tok.pad_token_id, _toy_examples(tok), cfg,
               lambda r=iter([0.1, 0.3, 0.2]): {"mean": next(r)})  # noqa: B008 - kept across calls
    import repro.training.sft as sft

    monkeypatch.setattr(sft, "estimate_reward", lambda *a: {"mean": 0.0})
    with pytest.raises(GateMissed):
        run_sft(micro_cfg(steps=2, gate_reward=0.5, gate_every=1, max_steps=3, eval_n=2,
                          eval_max_new_tokens=2), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    micro = [f"model.{k}={v}" for k, v in dataclasses.asdict(MICRO).items()
             if v is not None]  # unset MoE fields of a dense model stay unset
    result = CliRunner().invoke(app, ["sft", "--out", str(tmp_path / "cli"), *micro,
                                      "n_demos=16", "steps=2", "warmup=1", "batch_size=4",
                                      "eval_n=2", "gate_reward=0.5", "gate_every=1",
                                      "max_steps=3"])
    assert result.exit_code == 1, result.output
    said = [line for line in result.output.replace("\r", "\n").splitlines() if "repro sft:" in line]
    assert len(said) == 1 and "SFT gate missed" in said[0]  # one line (beside the progress bar)
    assert "Traceback" not in result.output
    assert not (tmp_path / "cli").exists()


def test_eval_every_records_the_reward_curve_without_changing_training(tok):
    model, _ = build_tiny(MICRO)
    readings = iter([0.25, 0.5])

    def estimate() -> dict:  # as the real one: runs the model and draws random numbers
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
        torch.rand(16)
        return {"mean": next(readings)}

    traced = _train(model, tok.pad_token_id, _toy_examples(tok),
                    micro_cfg(steps=7, eval_every=3, eval_n=4), estimate)
    assert traced["reward_curve"] == [[3, 0.25], [6, 0.5]]  # within the schedule only
    plain, _ = build_tiny(MICRO)
    untraced = _train(plain, tok.pad_token_id, _toy_examples(tok), micro_cfg(steps=7), None)
    assert untraced["reward_curve"] == []
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.equal(a, b)  # estimates read the model; they do not move it
