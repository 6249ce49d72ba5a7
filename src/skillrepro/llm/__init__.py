"""LLM access: one OpenAI-compatible client, the servers the pipeline can start, shipped models."""
from skillrepro.llm.client import LLMClient, LLMFatalError, LLMRequestError, Reply, ToolCall, session

__all__ = ["LLMClient", "LLMFatalError", "LLMRequestError", "Reply", "ToolCall", "session"]
