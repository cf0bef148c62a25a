# Starting policies: SFT warm starts and random inits.


rule sft:
    """The tiny default's warm start: a random-init tiny Qwen3 taught the synthetic tasks, or a
    second stage continuing from another model's SFT (models.KEY.base)."""
    input:
        jobs.sft_inputs,
    output:
        directory(MODEL_DIR),
    log:
        "logs/sft/model={model}.log",
    benchmark:
        "benchmarks/sft/model={model}.jsonl"
    params:
        overrides=jobs.sft_overrides,
        code=CODE["sft"],
    threads: 2
    # The SFT stages are the run's critical path (every run waits for them) and take both
    # cores: first, before `theory` and `paper_reference`, which then fill gaps later on.
    priority: 1
    resources:
        mem_mb=4000,
        runtime="30m",
    conda:
        job_env
    shell:
        "python -m repro sft --out {output} --threads {threads} {params.overrides} > {log} 2>&1"


rule init_model:
    """A random model of the catalogue entry's `config:` (source init) with the tiny tokenizer:
    a paper preset's architecture at the shrunk shape of a rehearsal."""
    output:
        directory(INIT_MODEL_DIR),
    log:
        "logs/init_model/model={model}.log",
    params:
        config=jobs.init_config,
        code=CODE["init_model"],
    threads: 1
    resources:
        mem_mb=4000,
        runtime="10m",
    conda:
        job_env
    shell:
        "python -m repro init-model --out {output} --config {params.config} > {log} 2>&1"
