"""Models: Qwen3 dense and MoE, the draft model, the HF loader, and THE decode-graph driver."""
