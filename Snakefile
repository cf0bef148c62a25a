# dfpo-repro: the paper's tables and figures from nothing, compute-matched, at tiny CPU scale by
# default (`snakemake --cores all`) and at paper scale with a preset and the SLURM profile.
# Stages live in rules/*.smk; rules/common.smk runs the parse-time checks and names what the rules
# use (run keys, targets, output layout, source digests: repro/pipeline), rules/launch.smk the job
# environments and the train launcher.
import time

from snakemake.utils import min_version

min_version("9.20")


configfile: "config/config.yaml"


STARTED = time.time()  # onsuccess prints the summary only if this invocation wrote it


report: "rules/report/workflow.rst"


include: "rules/common.smk"
include: "rules/launch.smk"


wildcard_constraints:
    algo="|".join(sorted(config["algorithms"])),
    model="|".join(sorted(config["models"])),
    group_size=r"\d+",
    seed=r"\d+",
    frac=r"\d+\.\d+",


include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/eval.smk"
include: "rules/aggregate.smk"
include: "rules/report.smk"


onsuccess:
    # the main job's last step said where this run stands (rule expectations): said last
    summary = Path(layout.expectations_file)
    if summary.is_file() and summary.stat().st_mtime >= STARTED:
        print(f"\n{summary.read_text()}", flush=True)


onstart:
    if jobs.missing_pins:  # real runs only: a dry run without data.lock.yaml just warns
        refuse(f"config: {jobs.missing_pins}")
    # the SLURM profile: a status command that can see jobs end, and pending jobs said
    # (repro/pipeline/slurm.py)
    if workflow.executor_plugin.name == "slurm":
        from repro.pipeline.slurm import check_executor

        at_parse_time(check_executor, workflow)


localrules:
    all,
    run_config,
    eval_config,
    init_eval_config,
    aggregate,
    tables,
    figures,
    expectations,
    paper_reference,
    ablations,


rule all:
    default_target: True
    input:
        jobs.final_targets(),
