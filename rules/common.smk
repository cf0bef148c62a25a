# Parse time: the config checks, in order, then the names the rules use. The logic lives in
# repro/pipeline (tested by tests/test_pipeline_*.py); no rules here.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from repro.atomic import write_yaml
from repro.pipeline.checks import at_parse_time, check_selections, refuse, schema_refusal
from repro.pipeline.jobs import EVAL_THREADS, Jobs
from repro.pipeline.layout import (FIGURES, INIT_MODEL_DIR, MODEL_DIR, PAPER_REFERENCE, RUN,
                                   TABLES, THEORY_DIR)
from repro.pipeline.sources import job_digests
from repro.plan import plan_jobs
from repro.results.committed import committed_id
from repro.results.manifest import quarantine

try:
    validate(config, "../config/schema.yaml", set_default=True)
except WorkflowError as err:
    refuse(schema_refusal(str(err)))
at_parse_time(check_selections, config)

jobs = Jobs(config)
layout = jobs.layout
if jobs.missing_pins:  # a dry run plans the DAG (a fresh clone has no lock); a real run stops first
    print(f"config: warning: {jobs.missing_pins} (a dry run plans the DAG; a real run refuses "
          "before any job)", file=sys.stderr)
at_parse_time(jobs.check)  # dataclass blocks, SFT bases, ablation group sizes
# The memory planner over the GPU jobs (`repro plan`): a job that cannot fit its GPUs is refused
# now, in one line naming the key to change; the plans give evaluation walltimes (launch.smk).
PLAN = at_parse_time(plan_jobs, config)

# A damaged output (truncated, garbage, torn copy) is moved aside to NAME.corrupt here, with one
# line saying why, so Snakemake sees it missing and reruns exactly the job that wrote it and the
# jobs downstream. Unchanged files that verified before are not hashed again (stat cache).
for line in quarantine(jobs.verified_outputs(), Path(".snakemake") / "repro-verified.json"):
    print(line, file=sys.stderr)
at_parse_time(jobs.check_run_configs)  # a value out of range fails now, naming the run

# Per `repro` command, a digest of the package files it imports (params: an edit reruns exactly
# the jobs that run it; a fresh clone reruns nothing).
CODE = job_digests(workflow.basedir)
