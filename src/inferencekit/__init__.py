"""inferencekit: benchmark OpenAI-compatible LLM servers and prove the numbers are honest."""

__version__ = "0.1.0"

__all__ = ["__version__"]
