# Evaluation of checkpoints: one job per (run, budget fraction) covers every benchmark, so the
# model (or the vLLM engine) is loaded once.


rule evaluate:
    """avg@k of the checkpoint saved at `frac` of the run's budget."""
    input:
        policy=f"{layout.run_dir}/policy/frac={{frac}}",
    output:
        problems=jobs.per_benchmark(layout.eval_dir, "problems.parquet"),
        samples=jobs.per_benchmark(layout.eval_dir, "samples.parquet"),
    log:
        f"{layout.log_dir}/evaluate/{RUN}/frac={{frac}}.log",
    benchmark:
        f"{layout.bench_dir}/evaluate/{RUN}/frac={{frac}}.jsonl"
    params:
        out=layout.eval_dir,
        options=jobs.eval_options(),
        code=CODE["eval"],
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
        start=jobs.start_inputs,
    output:
        problems=jobs.per_benchmark(layout.init_dir, "problems.parquet"),
        samples=jobs.per_benchmark(layout.init_dir, "samples.parquet"),
    log:
        f"{layout.log_dir}/evaluate_init/model={{model}}/seed={{seed}}.log",
    benchmark:
        f"{layout.bench_dir}/evaluate_init/model={{model}}/seed={{seed}}.jsonl"
    params:
        out=layout.init_dir,
        policy=jobs.start_policy_of,
        options=jobs.eval_options(),
        code=CODE["eval"],
    threads: 1
    resources:
        mem_mb=4000,
        **eval_resources(),
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --model {params.policy} --out {params.out}"
        " --checkpoint init --seed {wildcards.seed} --workers {threads} {params.options} > {log} 2>&1"
