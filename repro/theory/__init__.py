"""Exact tabular experiment for the paper's theory (Prop. 3.1 learning tax, Cor. 3.2 drift).

A softmax policy with one logit vector per token prefix is trained by every objective from
`repro.objectives`; the metrics are read off the table exactly. Entry point:
`repro.theory.experiment.run_theory`, options `repro.theory.config.TheoryConfig` (kept apart,
and not imported here, so that `repro` starts without torch).
"""
