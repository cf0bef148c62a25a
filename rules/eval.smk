# Evaluation of checkpoints: one job per (run, budget fraction) covers every benchmark, so the
# model (or the vLLM engine) is loaded once.


rule evaluate:
    """avg@k of the checkpoint saved at `frac` of the run's budget."""
    input:
        policy=f"{RUN_DIR}/policy/frac={{frac}}",
    output:
        problems=per_benchmark(EVAL_DIR, "problems.parquet"),
        samples=per_benchmark(EVAL_DIR, "samples.parquet"),
    log:
        f"{LOG_DIR}/evaluate/{RUN}/frac={{frac}}.log",
    benchmark:
        f"{BENCH_DIR}/evaluate/{RUN}/frac={{frac}}.jsonl"
    params:
        out=EVAL_DIR,
        options=eval_options(),
        code=EVAL_CODE,
    threads: 1
    resources:
        mem_mb=4000,
        **eval_resources(),
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --model {input.policy} --out {params.out}"
        " --checkpoint frac={wildcards.frac} --seed {wildcards.seed} --workers {threads}"
        " {params.options} > {log} 2>&1"


rule evaluate_init:
    """avg@k of the policy RL starts from (the SFT warm start, or the hub model), at eval seed
    `seed`: the same sampling seed as that seed's runs, so every checkpoint of a run and its
    start draw common random numbers (same batches, same generator seeds) and differ in pairs."""
    input:
        start=start_inputs,
    output:
        problems=per_benchmark(INIT_DIR, "problems.parquet"),
        samples=per_benchmark(INIT_DIR, "samples.parquet"),
    log:
        f"{LOG_DIR}/evaluate_init/model={{model}}/seed={{seed}}.log",
    benchmark:
        f"{BENCH_DIR}/evaluate_init/model={{model}}/seed={{seed}}.jsonl"
    params:
        out=INIT_DIR,
        policy=start_policy_of,
        options=eval_options(),
        code=EVAL_CODE,
    threads: 1
    resources:
        mem_mb=4000,
        **eval_resources(),
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --model {params.policy} --out {params.out}"
        " --checkpoint init --seed {wildcards.seed} --workers {threads} {params.options} > {log} 2>&1"
