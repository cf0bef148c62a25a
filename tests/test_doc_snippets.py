"""Code that the docs give a user to copy runs as it is written: docs/integrations.md's "Any
PyTorch loop" block, on a batch with interleaved groups of unequal size, as its text allows.
(The TRL script of the same page: tests/test_trl_documented.py; verl's command:
tests/test_integration_verl.py.)"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def python_block(page: str, heading: str) -> str:
    """The first python block under `heading` (a '## ' heading) of docs/`page`."""
    text = (ROOT / "docs" / page).read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_any_pytorch_loop_block_runs_on_interleaved_unequal_groups():
    gen = torch.Generator().manual_seed(0)
    group = torch.tensor([0, 1, 0, 2, 1, 0, 2, 1, 0])  # interleaved, sizes 4, 3, 2
    n, t = len(group), 6
    logp = (-torch.rand(n, t, generator=gen)).requires_grad_()
    user = {"reward": torch.rand(n, generator=gen), "group": group, "logp": logp,
            "logp_old": logp.detach() + 0.1 * torch.randn(n, t, generator=gen),
            "mask": torch.rand(n, t, generator=gen) > 0.2}
    exec(python_block("integrations.md", "Any PyTorch loop"), user)
    assert math.isfinite(user["loss"].item())
    assert logp.grad is not None and logp.grad.abs().sum() > 0  # loss.backward() reached logp
    assert user["metrics"]["s_spread"] > 0  # off-policy: the weights spread, the transform acts
