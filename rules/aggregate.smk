# One aggregate per study: every run's step log and every evaluation, concatenated with their
# keys, plus the study settings the tables need (stored in the Parquet metadata).


rule aggregate:
    input:
        train_logs=train_logs(),
        eval_problems=eval_problems(),
    output:
        expand("results/aggregate/{name}.parquet", name=AGGREGATES),
    log:
        "logs/aggregate/aggregate.log",
    params:
        study=study_options(),
        code=REPORT_CODE,
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro aggregate --out results/aggregate {params.study}"
        " {input.train_logs} {input.eval_problems} > {log} 2>&1"
