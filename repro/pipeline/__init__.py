"""The Snakemake workflow's logic, importable and tested: parse-time config checks (`checks`),
the output layout (`layout`), run keys, targets and job options (`jobs`), and the source
digests that rerun a job when code it imports changes (`sources`). rules/common.smk only calls
into these."""
