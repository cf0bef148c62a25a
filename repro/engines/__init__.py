"""Training engines: the native CPU reference loop (repro.training.loop) and adapters onto
distributed trainers (TRL). Every engine computes its loss through `repro.engines.core`."""
