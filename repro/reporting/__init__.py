"""Reporting: per-job results -> aggregate Parquet (`repro aggregate`) -> Markdown/LaTeX tables
(`repro tables`) and PDF/PNG figures (`repro figures`), the last two from the aggregate alone;
the paper's published numbers as Parquet (`repro paper-reference`)."""
