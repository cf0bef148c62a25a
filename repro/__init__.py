"""dfpo-repro: reproduction suite for DFPO."""

__version__ = "0.1.0"
