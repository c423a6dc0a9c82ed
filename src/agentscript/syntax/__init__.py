"""Text -> syntax tree: the parser, the tree and the formatter of Agent Script."""

from agentscript.syntax.parser import parse
from agentscript.syntax.tree import Document

__all__ = ["Document", "parse"]
