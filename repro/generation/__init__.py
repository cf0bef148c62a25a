"""Generation engines behind one interface: HF transformers (CPU) and vLLM (GPU)."""
