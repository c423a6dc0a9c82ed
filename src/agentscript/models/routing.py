"""Per-subagent models: a request goes to the model its subagent's ``model_config`` names.

The engine puts the node's model id (``model://...`` or a provider spec) on every request.
``RoutedModel`` sends it to the model configured for that id, and everything else to the
default model. Models are built on first use, so a route whose provider is not set up only
fails (with a clear ModelError, ending that turn) if a subagent actually uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentscript.models.base import Model, ModelRequest, ModelResponse, TextSink


class RoutedModel:
    """A model that sends each request to the model its subagent's id routes to."""

    def __init__(self, default: Model, routes: Mapping[str, Callable[[], Model]]) -> None:
        self.default = default
        self.name = default.name
        self._routes = dict(routes)
        self._built: dict[str, Model] = {}

    def model_for(self, model_id: str | None) -> Model:
        """The model for ``model_id`` (built on first use), else the default one."""
        if not model_id or model_id not in self._routes:
            return self.default
        model = self._built.get(model_id)
        if model is None:
            model = self._built[model_id] = self._routes[model_id]()
        return model

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        return await self.model_for(request.model).complete(request, stream=stream)
