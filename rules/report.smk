# Tables, figures, the paper's reference numbers and the exact tabular experiment. Tables and
# figures read only the aggregate Parquet (committed for the tiny default), so `snakemake tables`
# and `snakemake figures` work on a fresh clone without training. Last, `expectations` compares
# the run's aggregate with the committed one, read from git.


rule paper_reference:
    """The paper's published numbers (repro/reporting/paper_numbers.py) as Parquet."""
    output:
        PAPER_REFERENCE,
    log:
        "logs/paper_reference/paper_reference.log",
    params:
        code=CODE["paper_reference"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro paper-reference --out {output} > {log} 2>&1"


rule tables:
    input:
        aggregate=layout.aggregate_files(),
        paper=PAPER_REFERENCE,
    output:
        [
            report(
                f"{layout.table_dir}/{name}.md",
                caption="report/tables.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in TABLES
        ],
        expand(f"{layout.table_dir}/{{name}}.tex", name=TABLES),
    log:
        f"{layout.log_dir}/tables/tables.log",
    params:
        aggregate=lambda wildcards, input: Path(input.aggregate[0]).parent,
        out=subpath(output[0], parent=True),
        code=CODE["tables"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro tables --aggregate {params.aggregate} --paper {input.paper}"
        " --out {params.out} > {log} 2>&1"


rule figures:
    input:
        layout.aggregate_files(),
    output:
        [
            report(
                f"{layout.figure_dir}/{name}.png",
                caption="report/figures.rst",
                category="Figures",
                labels={"figure": name},
            )
            for name in FIGURES
        ],
        expand(f"{layout.figure_dir}/{{name}}.pdf", name=FIGURES),
    log:
        f"{layout.log_dir}/figures/figures.log",
    params:
        aggregate=lambda wildcards, input: Path(input[0]).parent,
        out=subpath(output[0], parent=True),
        code=CODE["figures"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro figures --aggregate {params.aggregate} --out {params.out} > {log} 2>&1"


rule expectations:
    """The main job's last step: this run's aggregate against the committed one (read from
    git): "exact", or which headline numbers fall inside the README's ranges, and how to restore
    the committed files (repro/reporting/expectations.py). The Snakefile's onsuccess prints it."""
    input:
        aggregate=layout.aggregate_files(),
        tables=layout.table_files(),
        figures=layout.figure_files(),
    output:
        layout.expectations_file,
    log:
        f"{layout.log_dir}/expectations/expectations.log",
    params:
        aggregate=lambda wildcards, input: Path(input.aggregate[0]).parent,
        committed=committed_id(Path(workflow.basedir), layout.agg_dir),
        code=CODE["expectations"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m repro expectations --aggregate {params.aggregate} --out {output} > {log} 2>&1"


rule theory:
    """The exact tabular experiment: learning tax and drift between equally good answers."""
    output:
        f"{THEORY_DIR}/theory.parquet",
        report(
            f"{THEORY_DIR}/theory.png",
            caption="report/theory.rst",
            category="Theory",
        ),
        f"{THEORY_DIR}/theory.pdf",
    log:
        "logs/theory/theory.log",
    params:
        steps=config["theory"]["steps"],
        seed=config["theory"]["seed"],
        out=subpath(output[0], parent=True),
        code=CODE["theory"],
    threads: 1
    conda:
        "../envs/cpu.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m repro theory --out {params.out}"
        " --steps {params.steps} --seed {params.seed} > {log} 2>&1"


rule ablations:
    """Target: the ablation runs (DFPO variants, group sizes), their table and figure."""
    input:
        jobs.ablation_targets(),
