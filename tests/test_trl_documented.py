"""docs/integrations.md's TRL section as a TRL user meets it: the install block (TRL, then the
project with --no-deps), the commands that make the tiny model and run the script, and the
script itself, all as printed. In the main venv it runs the commands and script; `.ci/run` runs
it again in a venv built by the install block alone (REPRO_TRL_ONLY=1), where the pipeline's own
dependencies must be absent. Imports nothing beyond TRL's dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from doc_block import doc_block  # noqa: E402

DOC = ROOT / "docs" / "integrations.md"
PIPELINE_ONLY = ("snakemake", "matplotlib", "math_verify")  # the project's, not TRL's


def trl_section() -> str:
    text = (ROOT / "docs" / "integrations.md").read_text()
    return text.split("\n## TRL\n", 1)[1].split("\n## ", 1)[0]


def doc_script() -> str:
    """The first python block of docs/integrations.md's TRL section, as a user copies it."""
    return re.search(r"```python\n(.*?)```", trl_section(), re.S).group(1)


def doc_commands() -> str:
    """The bash block of the TRL section that makes the tiny model and runs the script."""
    return re.search(r"```bash\n(python -m repro.models.tiny .*?)```", trl_section(), re.S).group(1)


@pytest.mark.slow
def test_the_documented_script_trains_two_steps_unmodified(tmp_path):
    """The doc's commands and script, run as printed, offline: the tiny model the project
    writes, then two steps through DFPOTrainer, whose objective and cancellation metrics land
    in TRL's log history; the second update of the rollout is off-policy (K = 2), so s spreads
    there and not in the first. No transformers deprecation warning reaches the user."""
    (tmp_path / "dfpo_demo.py").write_text(doc_script())
    env = {k: v for k, v in os.environ.items() if k != "MODEL"} | {
        "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", doc_commands()], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FutureWarning" not in proc.stderr, proc.stderr[-3000:]
    state = json.loads((tmp_path / "dfpo-demo" / "trainer_state.json").read_text())
    steps = [row for row in state["log_history"] if "objective/loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert {"cancellation/asym", "cancellation/freq_energy", "entropy"} <= set(row)
        assert row["loss"] == pytest.approx(row["objective/loss"], rel=1e-6)  # TRL logs our loss
    assert steps[0]["objective/s_spread"] == 0.0 < steps[1]["objective/s_spread"]


def test_the_install_block_pins_what_the_trl_extra_pins():
    """One source for the versions: the doc's `pip install` names exactly the `trl` extra."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["trl"]
    lines = doc_block(DOC, "trl-install").splitlines()
    assert lines[0].startswith("pip install ")
    assert re.findall(r'"([^"]+)"', lines[0]) == extra
    assert lines[1] == "pip install --no-deps -e ."


@pytest.mark.skipif(not os.environ.get("REPRO_TRL_ONLY"), reason="only in .ci/run's TRL venv")
def test_the_trl_install_leaves_the_pipeline_out():
    present = [m for m in PIPELINE_ONLY if importlib.util.find_spec(m) is not None]
    assert not present, f"the TRL install pulled the pipeline's {present}"
