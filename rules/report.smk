# Tables, figures, the paper's reference numbers and the exact tabular experiment. Tables and
# figures read only the aggregate Parquet (committed for the tiny default), so `snakemake tables`
# and `snakemake figures` work on a fresh clone without training.


rule paper_reference:
    """The paper's published numbers (repro/reporting/paper_numbers.py) as Parquet."""
    output:
        "results/paper/reference.parquet",
    log:
        "logs/paper_reference/paper_reference.log",
    params:
        code=REPORT_CODE,
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro paper-reference --out {output} > {log} 2>&1"


rule tables:
    input:
        aggregate=expand("results/aggregate/{name}.parquet", name=AGGREGATES),
        paper="results/paper/reference.parquet",
    output:
        [
            report(
                f"results/tables/{name}.md",
                caption="report/tables.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in TABLES
        ],
        expand("results/tables/{name}.tex", name=TABLES),
    log:
        "logs/tables/tables.log",
    params:
        code=REPORT_CODE,
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro tables --aggregate results/aggregate --paper {input.paper}"
        " --out results/tables > {log} 2>&1"


rule figures:
    input:
        expand("results/aggregate/{name}.parquet", name=AGGREGATES),
    output:
        [
            report(
                f"results/figures/{name}.png",
                caption="report/figures.rst",
                category="Figures",
                labels={"figure": name},
            )
            for name in FIGURES
        ],
        expand("results/figures/{name}.pdf", name=FIGURES),
    log:
        "logs/figures/figures.log",
    params:
        code=REPORT_CODE,
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro figures --aggregate results/aggregate --out results/figures > {log} 2>&1"


rule theory:
    """The exact tabular experiment: learning tax and drift between equally good answers."""
    output:
        "results/theory/theory.parquet",
        report(
            "results/theory/theory.png",
            caption="report/theory.rst",
            category="Theory",
        ),
        "results/theory/theory.pdf",
    log:
        "logs/theory/theory.log",
    params:
        steps=config["theory"]["steps"],
        seed=config["theory"]["seed"],
        code=THEORY_CODE,
    threads: 1
    conda:
        "../envs/cpu.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m repro theory --out results/theory"
        " --steps {params.steps} --seed {params.seed} > {log} 2>&1"


rule ablations:
    """Target: the ablation runs (DFPO variants, group sizes), their table and figure."""
    input:
        ablation_targets(),
