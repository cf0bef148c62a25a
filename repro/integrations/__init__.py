"""Adapters that plug the suite's objectives (repro.objectives) into other trainers."""
