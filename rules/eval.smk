# Evaluation of checkpoints: one job per (run, budget fraction) covers every benchmark, so the
# model (or the vLLM engine) is loaded once.


rule evaluate:
    """avg@k of the checkpoint saved at `frac` of the run's budget."""
    input:
        policy="results/runs/algo={algo}/model={model}/group_size={group_size}/seed={seed}/policy/frac={frac}",
    output:
        problems=expand(
            "results/eval/algo={{algo}}/model={{model}}/group_size={{group_size}}/seed={{seed}}/frac={{frac}}/benchmark={benchmark}/problems.parquet",
            benchmark=config["eval"]["benchmarks"],
            allow_missing=True,
        ),
        samples=expand(
            "results/eval/algo={{algo}}/model={{model}}/group_size={{group_size}}/seed={{seed}}/frac={{frac}}/benchmark={benchmark}/samples.parquet",
            benchmark=config["eval"]["benchmarks"],
            allow_missing=True,
        ),
    log:
        "logs/evaluate/algo={algo}/model={model}/group_size={group_size}/seed={seed}/frac={frac}.log",
    benchmark:
        "benchmarks/evaluate/algo={algo}/model={model}/group_size={group_size}/seed={seed}/frac={frac}.jsonl"
    params:
        out="results/eval/algo={algo}/model={model}/group_size={group_size}/seed={seed}/frac={frac}",
        options=eval_options(),
        code=EVAL_CODE,
    threads: 1
    resources:
        mem_mb=4000,
        runtime="1h",
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
        problems=expand(
            "results/eval/algo=init/model={{model}}/seed={{seed}}/frac=0.0/benchmark={benchmark}/problems.parquet",
            benchmark=config["eval"]["benchmarks"],
            allow_missing=True,
        ),
        samples=expand(
            "results/eval/algo=init/model={{model}}/seed={{seed}}/frac=0.0/benchmark={benchmark}/samples.parquet",
            benchmark=config["eval"]["benchmarks"],
            allow_missing=True,
        ),
    log:
        "logs/evaluate_init/model={model}/seed={seed}.log",
    benchmark:
        "benchmarks/evaluate_init/model={model}/seed={seed}.jsonl"
    params:
        out="results/eval/algo=init/model={model}/seed={seed}/frac=0.0",
        policy=start_policy_of,
        options=eval_options(),
        code=EVAL_CODE,
    threads: 1
    resources:
        mem_mb=4000,
        runtime="1h",
    conda:
        job_env
    shell:
        "OMP_NUM_THREADS={threads} python -m repro eval --model {params.policy} --out {params.out}"
        " --checkpoint init --seed {wildcards.seed} --workers {threads} {params.options} > {log} 2>&1"
