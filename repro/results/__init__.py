"""Result tables: pyarrow schemas defined once, and a checked, atomic Parquet writer."""

from repro.results.io import read_table, write_arrow, write_table
from repro.results.schemas import (
    AGG_EVAL_PROBLEMS,
    AGG_EVAL_SAMPLES,
    AGG_RUNS,
    AGG_TRAIN_CURVES,
    EVAL_PROBLEMS,
    EVAL_SAMPLES,
    PAPER_REFERENCE,
    THEORY,
    TRAIN_LOG,
)

__all__ = [
    "AGG_EVAL_PROBLEMS",
    "AGG_EVAL_SAMPLES",
    "AGG_RUNS",
    "AGG_TRAIN_CURVES",
    "EVAL_PROBLEMS",
    "EVAL_SAMPLES",
    "PAPER_REFERENCE",
    "THEORY",
    "TRAIN_LOG",
    "read_table",
    "write_arrow",
    "write_table",
]
