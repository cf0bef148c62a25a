# One aggregate per study: every run's step log and every evaluation, concatenated with their
# keys, plus the study settings the tables need (stored in the Parquet metadata).
# The outputs are flagged update(): Snakemake neither deletes them before the job nor after a
# failure (it backs them up and restores them), so the committed aggregate survives a failing
# run; `repro aggregate` itself checks every input first and swaps the new files in together.


rule aggregate:
    input:
        train_logs=jobs.train_logs(),
        eval_problems=jobs.eval_problems(),
    output:
        update(layout.aggregate_files()),
    log:
        f"{layout.log_dir}/aggregate/aggregate.log",
    params:
        out=subpath(output[0], parent=True),
        study=jobs.study_options(),
        code=CODE["aggregate"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro aggregate --out {params.out} {params.study}"
        " {input.train_logs} {input.eval_problems} > {log} 2>&1"
