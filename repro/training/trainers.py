"""`repro train`'s engines by name: the one list (TrainConfig.engine, the engine registry, the
off-policy sources' supported engines and the docs read it). Each name maps to its trainer as an
import path, so the config below the engines can name them without importing them (engines sit
above repro.training; TRL loads only for its engine). A new engine is its module plus a line here.
"""

from __future__ import annotations

TRAINERS: dict[str, str] = {
    "native": "repro.engines.native:train_native",  # the single-process loop, the CPU reference
    "trl": "repro.engines.trl:train_trl",  # TRL's GRPOTrainer: GPUs, FSDP2, vLLM rollouts
}
ENGINES: tuple[str, ...] = tuple(TRAINERS)
