"""Training engines: the native CPU reference loop (repro.engines.native) and adapters onto
distributed trainers (TRL), chosen by name in repro.engines.registry. Every engine computes its
loss through `repro.engines.core`."""
