"""Evaluation: run benchmarks end to end and turn per-sample verdicts into scores and intervals."""
