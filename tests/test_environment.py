"""Issue 22: every manifest and the aggregate record what the jobs ran on (packages, torch build,
the CPU kernels ATen picked, threads, CPU model), and the tables' footers show it.

The record must be real: it equals what torch and the machine report in this process, and a
process started under `ATEN_CPU_CAPABILITY=avx2` records AVX2.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pyarrow
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from test_faults_outputs import recorded_eval, recorded_run
from test_reporting import write_train
from typer.testing import CliRunner

from repro.cli import app
from repro.results import manifest as mf
from repro.results.environment import environment, summary

ROOT = Path(__file__).resolve().parents[1]
CPUINFO = Path("/proc/cpuinfo")


def test_the_record_is_what_torch_and_the_machine_report():
    env = environment()
    assert env["packages"]["torch"] == torch.__version__ == env["torch"]["version"]
    assert env["packages"]["transformers"] == transformers.__version__
    assert env["packages"]["pyarrow"] == pyarrow.__version__
    assert env["torch"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["torch"]["threads"] == torch.get_num_threads()
    assert env["torch"]["git_version"] == torch.version.git_version
    assert env["python"] == platform.python_version() and env["cpu_count"] == os.cpu_count()
    if CPUINFO.is_file():
        assert env["cpu_model"] and env["cpu_model"] in CPUINFO.read_text()
    line = summary(env)
    assert torch.__version__ in line and env["torch"]["cpu_capability"] in line


@pytest.mark.skipif(not CPUINFO.is_file() or " avx2" not in CPUINFO.read_text(),
                    reason="needs an x86 CPU with AVX2 (ATEN_CPU_CAPABILITY=avx2)")
def test_a_process_under_avx2_records_avx2_and_its_threads():
    code = "import json, torch; from repro.results.environment import environment; " \
           "print(json.dumps(environment()))"
    env = os.environ | {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    record = json.loads(out)
    assert record["torch"]["cpu_capability"] == "AVX2"
    assert record["torch"]["threads"] == 1
    assert record["env"]["ATEN_CPU_CAPABILITY"] == "avx2"


def test_manifests_the_aggregate_and_the_tables_carry_the_environment(tmp_path):
    here = environment()
    files = [recorded_run(tmp_path / "a"), recorded_eval(tmp_path / "a")]
    for path in files:
        assert json.loads((path.parent / mf.MANIFEST).read_text())["environment"] == here
        assert mf.environment_of(path) == here
    old = write_train(tmp_path / "a", "gspo", 7, [0.5])  # written before the record existed
    manifest = mf.write_manifest(old.parent, [old.name])
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"environment": None}))

    out = tmp_path / "aggregate"
    inputs = [*files, old]
    result = CliRunner().invoke(app, ["aggregate", "--out", str(out), *map(str, inputs)])
    assert result.exit_code == 0, result.output
    for name in ("runs", "train_curves", "eval_problems", "eval_samples"):
        meta = pq.read_schema(out / f"{name}.parquet").metadata
        assert json.loads(meta[b"environment"]) == [{"jobs": 2, "environment": here},
                                                   {"jobs": 1, "environment": None}]
    assert json.loads((out / mf.MANIFEST).read_text())["environment"] == here

    result = CliRunner().invoke(app, ["tables", "--aggregate", str(out),
                                      "--out", str(tmp_path / "tables")])
    assert result.exit_code == 0, result.output
    for name in ("main.md", "main.tex", "compute.md"):
        text = (tmp_path / "tables" / name).read_text()
        assert f"CPU kernels {here['torch']['cpu_capability']}" in text, text[-800:]
        assert "Environment (2 jobs)" in text and "Environment (1 job): not recorded" in text


def test_a_job_without_torch_records_its_packages_but_not_torchs_kernels():
    code = ("import json, sys; from repro.results.environment import environment, summary; "
            "env = environment(); assert 'torch' not in sys.modules; "
            "print(json.dumps([env, summary(env)]))")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    record, line = json.loads(out)
    assert record["torch"] is None and record["packages"]["torch"] == torch.__version__
    assert line.startswith("torch not imported, transformers ")
