"""LLM providers behind one interface (``base.Model``)."""

from agentscript.models.base import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ToolCall",
    "ToolSpec",
    "Usage",
]
