# Evaluation of checkpoints: one job per (run, budget fraction) covers every benchmark, so the
# model (or the vLLM engine) is loaded once. Each job runs `repro eval --config` on its resolved
# EvalConfig (resolved.yaml, written by the rules below as run_config writes a run's config).


rule eval_config:
    """One checkpoint evaluation's resolved EvalConfig; the params trigger rewrites it (and so
    reruns the evaluation) only when one of its values changes."""
    output:
        f"{layout.eval_dir}/resolved.yaml",
    log:
        f"{layout.log_dir}/eval_config/{RUN}/frac={{frac}}.log",
    params:
        cfg=jobs.eval_config,
    run:
        write_yaml(output[0], params.cfg)
        Path(log[0]).write_text(f"wrote {output[0]}\n")


rule init_eval_config:
    """The start's evaluation config at one run seed (see eval_config)."""
    output:
        f"{layout.init_dir}/resolved.yaml",
    log:
        f"{layout.log_dir}/eval_config/model={{model}}/seed={{seed}}.log",
    params:
        cfg=jobs.init_eval_config,
    run:
        write_yaml(output[0], params.cfg)
        Path(log[0]).write_text(f"wrote {output[0]}\n")


rule evaluate:
    """avg@k of the checkpoint saved at `frac` of the run's budget."""
    input:
        cfg=f"{layout.eval_dir}/resolved.yaml",
        policy=layout.policy_dir,
    output:
        problems=jobs.per_benchmark(layout.eval_dir, "problems.parquet"),
        samples=jobs.per_benchmark(layout.eval_dir, "samples.parquet"),
    log:
        f"{layout.log_dir}/evaluate/{RUN}/frac={{frac}}.log",
    benchmark:
        f"{layout.bench_dir}/evaluate/{RUN}/frac={{frac}}.jsonl"
    params:
        code=CODE["eval"],
    threads: EVAL_THREADS
    resources:
        mem_mb=4000,
        **eval_resources(),
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --config {input.cfg} > {log} 2>&1"


rule evaluate_init:
    """avg@k of the policy RL starts from (the SFT warm start, or the hub model), at eval seed
    `seed`: the same sampling seed as that seed's runs, so every checkpoint of a run and its
    start draw common random numbers (same batches, same generator seeds) and differ in pairs."""
    input:
        cfg=f"{layout.init_dir}/resolved.yaml",
        start=jobs.start_inputs,
    output:
        problems=jobs.per_benchmark(layout.init_dir, "problems.parquet"),
        samples=jobs.per_benchmark(layout.init_dir, "samples.parquet"),
    log:
        f"{layout.log_dir}/evaluate_init/model={{model}}/seed={{seed}}.log",
    benchmark:
        f"{layout.bench_dir}/evaluate_init/model={{model}}/seed={{seed}}.jsonl"
    params:
        code=CODE["eval"],
    threads: EVAL_THREADS
    resources:
        mem_mb=4000,
        **eval_resources(),
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --config {input.cfg} > {log} 2>&1"
