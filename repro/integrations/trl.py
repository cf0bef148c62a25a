"""`DFPOTrainer` for TRL users: construct it as `trl.GRPOTrainer` (a GRPOConfig, a model id or
object, reward functions, a dataset) plus `objective=repro.objectives.make_config(...)`
(docs/integrations.md, section TRL).

The class lives in repro.engines.trl_dfpo because the run-layout engine subclasses it, and
integrations sit above engines in the package's layers (tests/test_import_graph.py): this module
is its public path.
"""

from repro.engines.trl_dfpo import DFPOTrainer

__all__ = ["DFPOTrainer"]
