"""The objectives and the cancellation diagnostics with torch alone (docs/integrations.md).

In the suite these run as tests. `.ci/run` also builds a venv that holds torch and nothing else,
installs the project there with `pip install --no-deps`, and runs this file as a script
(`python tests/test_objectives_standalone.py`): so it needs torch and the standard library only.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import torch

from repro.diagnostics import cancellation_metrics, token_coefficients
from repro.objectives import (
    TRANSFORMS,
    Minibatch,
    algorithm_names,
    cancelling_transforms,
    group_advantages,
    make_config,
    policy_loss,
)
from repro.objectives.base import SEQUENCE_RATIOS

SETTINGS = [(name, {}) for name in algorithm_names()] + [
    ("dfpo", {"transform": t, "sequence_ratio": r}) for t in TRANSFORMS for r in SEQUENCE_RATIOS]


def shared_prefix_batch(seed: int = 0, groups: int = 3, n: int = 4, length: int = 10,
                        prefix: int = 3) -> tuple[Minibatch, torch.Tensor]:
    """Groups of n responses sharing their first `prefix` tokens (equal tokens and log-probs),
    then diverging; s != 1. Returns the minibatch and the response tokens."""
    g = torch.Generator().manual_seed(seed)
    rows = groups * n
    group = torch.arange(rows) // n
    tokens = torch.randint(1, 50, (rows, length), generator=g)
    old = -torch.rand(rows, length, generator=g, dtype=torch.float64) * 3
    logp = old + 0.3 * torch.randn(rows, length, generator=g, dtype=torch.float64)
    first = group * n  # each group's first row lends its prefix to the others
    tokens[:, :prefix], old[:, :prefix] = tokens[first, :prefix], old[first, :prefix]
    logp[:, :prefix] = logp[first, :prefix]
    mask = torch.arange(length)[None, :] < torch.randint(prefix + 1, length + 1, (rows, 1),
                                                           generator=g)
    reward = torch.arange(rows).remainder(2).double()
    adv, _ = group_advantages(reward, group)
    return Minibatch(logp.requires_grad_(True), old, mask, adv, group), tokens


def test_every_algorithm_computes_its_loss():
    batch, _ = shared_prefix_batch()
    for name, overrides in SETTINGS:
        loss, metrics = policy_loss(make_config(name, **overrides), batch)
        (grad,) = torch.autograd.grad(loss, batch.logp)
        assert math.isfinite(float(loss.detach())), (name, overrides)
        assert float(grad.abs().sum()) > 0, (name, overrides)
        assert metrics["s_spread"] > 0, (name, overrides)


def test_the_cancellation_diagnostics_tell_cancelling_transforms_apart():
    batch, tokens = shared_prefix_batch()
    for transform in TRANSFORMS:
        loss, _ = policy_loss(make_config("dfpo", transform=transform), batch)
        coef = token_coefficients(loss, batch.logp)
        residual = cancellation_metrics(coef, tokens, batch.mask, batch.group, batch.advantages,
                                        vocab_size=50)["residual_full"]
        if transform in cancelling_transforms():
            assert residual < 1e-9, (transform, residual)
        else:
            assert residual > 1e-3, (transform, residual)


IMPORTED = """
import json, sys
if sys.argv[1] == "repro":
    import repro.objectives
    from repro.diagnostics import cancellation_metrics, find_shared_nodes, token_coefficients
else:
    import torch
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def top_level_modules(what: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", IMPORTED, what], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stdout))


def test_importing_them_loads_nothing_beyond_torch():
    """Beyond the standard library and the modules `import torch` itself loads, only `repro`.
    (A package that torch loads where it is installed, numpy in the main venv, passes here;
    the torch-only venv of .ci/run, where it is absent, fails on it.)"""
    extra = top_level_modules("repro") - top_level_modules("torch") - set(sys.stdlib_module_names)
    assert extra == {"repro"}, sorted(extra)


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print(f"passed: {name}")
    print(f"torch {torch.__version__}: {len(SETTINGS)} objective settings computed")
