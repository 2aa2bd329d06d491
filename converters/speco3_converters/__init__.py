"""Hugging Face Qwen2.5-VL checkpoints to GGUF (text model + vision projector), quantization and verification."""
