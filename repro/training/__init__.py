"""The bundled trainer: SFT warm start, RL loop, checkpoints, logging."""
