# RL training: one job per run (algorithm, model, group size, seed), from the run's resolved
# config (rule run_config, as eval.smk's eval_config writes an evaluation's).

# One log per attempt: a retry (profile `retries`, a resubmission after scancel or a time limit)
# first moves the previous attempt's log to LOG.attempt-1 (-2, ...), so `{log}` is the latest
# attempt's and none is overwritten (tests/test_train_logs.py).
KEEP_PREVIOUS_LOG = (
    "if [ -s {log} ]; then n=1; while [ -e {log}.attempt-$n ]; do n=$((n + 1)); done;"
    " mv {log} {log}.attempt-$n; fi; "
)


rule run_config:
    """One run's resolved TrainConfig; the params trigger rewrites it (and so reruns its
    training) only when a value of that run changes."""
    output:
        f"{layout.run_dir}/config.yaml",
    log:
        f"{layout.log_dir}/run_config/{RUN}.log",
    params:
        cfg=jobs.run_config,
    run:
        write_yaml(output[0], params.cfg)
        Path(log[0]).write_text(f"wrote {output[0]}\n")


rule train:
    """Train from the run's resolved config, with the engine it names (train.engine), on the
    nodes and GPUs of config hardware.train (launch.smk: train_resources, train_launcher). The resumable state
    lives in results/scratch/ (not an output, so it survives Snakemake's clean-up of a failed
    job): a restarted job continues from its newest checkpoint, unless the config or the code
    digest changed."""
    input:
        cfg=f"{layout.run_dir}/config.yaml",
        start=jobs.start_inputs,
    output:
        log=f"{layout.run_dir}/train_log.parquet",
        manifest=f"{layout.run_dir}/manifest.json",
        policies=[directory(f"{layout.run_dir}/policy/frac={frac}") for frac in jobs.fractions],
    log:
        f"{layout.log_dir}/train/{RUN}.log",
    benchmark:
        f"{layout.bench_dir}/train/{RUN}.jsonl"
    params:
        scratch=layout.scratch_dir,
        out=subpath(output.log, parent=True),
        code=CODE["train"],
        launch=train_launcher,
        threads=train_threads,
    threads: 1
    resources:
        mem_mb=4000,
        runtime="2h",
        **train_resources(),
    conda:
        train_env
    shell:
        KEEP_PREVIOUS_LOG + "{params.launch} -m repro train --config {input.cfg} --out {params.scratch} --resume"
        " --fingerprint {params.code} --label {wildcards.algo} --threads {params.threads}"
        " --export {params.out} > {log} 2>&1"
