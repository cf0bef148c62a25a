"""The workflow's output layout, in one place: the rules use these patterns, never their own
literals. An experiment's own outputs live under config `results`; SFT models, the paper
reference and the theory experiment do not depend on the experiment and stay under results/.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN = "algo={algo}/model={model}/group_size={group_size}/seed={seed}"
INIT = "algo=init/model={model}/seed={seed}/frac=0.0"
MODEL_DIR = "results/models/model={model}/sft"
INIT_MODEL_DIR = "results/models/model={model}/init"  # source init: a random model of `config`
PAPER_REFERENCE = "results/paper/reference.parquet"
THEORY_DIR = "results/theory"
# What `repro tables` and `repro figures` write (repro.reporting's TABLES and FIGURES, plus
# paper; tests/test_pipeline_jobs.py holds them equal): every file a job writes is declared.
TABLES = ["main", "compute", "mechanism", "ablations", "verdict", "budget", "paper"]
FIGURES = ["reward_vs_compute", "accuracy_vs_budget", "difference_vs_budget",
           "spread_of_s_vs_step",
           "mechanism_by_algorithm", "entropy_vs_step", "logodds_drift_vs_step",
           "kl_template_vs_step", "mechanism_vs_step", "group_size_ablation"]
AGGREGATES = ["train_curves", "eval_problems", "eval_samples", "runs"]


@dataclass(frozen=True)
class Layout:
    """Folders of one experiment (config `results`), as patterns with the jobs' wildcards."""

    out: str

    @classmethod
    def of(cls, config: dict) -> Layout:
        return cls(config["results"].rstrip("/"))

    @property
    def run_dir(self) -> str:
        return f"{self.out}/runs/{RUN}"

    @property
    def scratch_dir(self) -> str:
        return f"{self.out}/scratch/{RUN}"

    @property
    def policy_dir(self) -> str:
        """One budget fraction's exported policy (the train job's output)."""
        return f"{self.run_dir}/policy/frac={{frac}}"

    @property
    def eval_dir(self) -> str:
        return f"{self.out}/eval/{RUN}/frac={{frac}}"

    @property
    def init_dir(self) -> str:
        return f"{self.out}/eval/{INIT}"

    @property
    def agg_dir(self) -> str:
        return f"{self.out}/aggregate"

    @property
    def table_dir(self) -> str:
        return f"{self.out}/tables"

    @property
    def figure_dir(self) -> str:
        return f"{self.out}/figures"

    @property
    def _key(self) -> Path:
        """The experiment's part of its log and benchmark folders: results/tiny-study ->
        tiny-study, so two experiments never overwrite each other's (the default's: none)."""
        out = Path(self.out)
        return out.relative_to("results") if out.is_relative_to("results") else Path(
            self.out.strip("/"))

    @property
    def log_dir(self) -> str:
        """Logs of the experiment's own jobs; the shared jobs (SFT, paper reference, theory) log
        under logs/."""
        return str(Path("logs") / self._key)

    @property
    def bench_dir(self) -> str:
        """Snakemake benchmarks of the experiment's own jobs (shared jobs: under benchmarks/)."""
        return str(Path("benchmarks") / self._key)

    def aggregate_files(self) -> list[str]:
        return [f"{self.agg_dir}/{name}.parquet" for name in AGGREGATES]

    @property
    def expectations_file(self) -> str:
        """The main job's last step: this run against the committed aggregate (issue 46)."""
        return f"{self.table_dir}/expectations.md"

    def table_files(self) -> list[str]:
        return [f"{self.table_dir}/{name}.{ext}" for name in TABLES for ext in ("md", "tex")]

    def figure_files(self) -> list[str]:
        return [f"{self.figure_dir}/{name}.{ext}" for name in FIGURES for ext in ("pdf", "png")]
