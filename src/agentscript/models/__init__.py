"""LLM providers behind one interface (``base.Model``)."""

from agentscript.models.all_tools import CallEveryToolModel
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
from agentscript.models.config import (
    describe_configuration_help,
    load_config,
    model_from_spec,
    resolve_model,
)
from agentscript.models.function import FunctionInfo, FunctionModel

__all__ = [
    "CallEveryToolModel",
    "FunctionInfo",
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "describe_configuration_help",
    "load_config",
    "model_from_spec",
    "resolve_model",
]
