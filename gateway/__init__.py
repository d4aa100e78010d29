"""llm-gateway: an OpenAI-protocol reverse proxy for LLM providers."""

__version__ = "0.1.0"
