"""Result tables: pyarrow schemas defined once, and a checked, atomic Parquet writer."""

from repro.results.io import read_table, write_table
from repro.results.schemas import EVAL_PROBLEMS, EVAL_SAMPLES, TRAIN_LOG

__all__ = ["EVAL_PROBLEMS", "EVAL_SAMPLES", "TRAIN_LOG", "read_table", "write_table"]
