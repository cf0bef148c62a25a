# RL training: one job per run (algorithm, model, group size, seed).


rule train:
    """Train from the run's resolved config, with the engine it names (train.engine), on the
    nodes and GPUs of config hardware.train (launch.smk: train_resources, train_launcher). The resumable state
    lives in results/scratch/ (not an output, so it survives Snakemake's clean-up of a failed
    job): a restarted job continues from its newest checkpoint, unless the config or the code
    digest changed."""
    input:
        cfg=f"{RUN_DIR}/config.yaml",
        start=start_inputs,
    output:
        log=f"{RUN_DIR}/train_log.parquet",
        manifest=f"{RUN_DIR}/manifest.json",
        policies=[directory(f"{RUN_DIR}/policy/frac={frac}") for frac in FRACTIONS],
    log:
        f"{LOG_DIR}/train/{RUN}.log",
    benchmark:
        f"{BENCH_DIR}/train/{RUN}.jsonl"
    params:
        scratch=SCRATCH_DIR,
        out=subpath(output.log, parent=True),
        code=TRAIN_CODE,
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
        "{params.launch} -m repro train --config {input.cfg} --out {params.scratch} --resume"
        " --fingerprint {params.code} --label {wildcards.algo} --threads {params.threads}"
        " --export {params.out} > {log} 2>&1"
