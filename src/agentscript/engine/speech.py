"""What a turn says, in one place: every message of the reply goes through :class:`Speech`.

The reply's text is the turn's non-empty messages joined by a blank line (``Session._reply``).
With a stream sink (``Session.on_text``) the text given to the sink during the turn is that
text, in order: a message the framework says itself (a confirmation question, a failed turn's
error message, an escalation message, Mantle's responses) is given when it is said, the
model's answer as it streams (:meth:`Speech.model_sink`), and the ``"\\n\\n"`` between two
messages before the second one, as its own piece. Empty messages give nothing. Without a sink
nothing is given and nothing more is kept.

Known divergences, where the sink gets more than the reply: what the model streamed before a
tool call that does not end the turn, or before it failed, is not in the reply, nor is the
text of a delegated subagent that gives control back (it is the tool's result). The separator
follows what the sink was given, so such text is still kept apart from the next message.

A sink that raises is not called again in the turn: the exception fails the turn (an internal
error), and the failure's own message never raises (:meth:`Speech.say_failure`).
"""

from __future__ import annotations

import contextlib

from agentscript.engine.kernel import TurnResult
from agentscript.models.base import TextSink

__all__ = ["SEPARATOR", "Speech"]

# What Session._reply puts between two messages.
SEPARATOR = "\n\n"


class Speech:
    """The messages of one turn, said into ``result.messages`` and given to ``sink``."""

    def __init__(self, result: TurnResult, sink: TextSink | None) -> None:
        # ``result.messages`` is read at every say: a delegated subagent's turn swaps it.
        self.result = result
        self.sink = sink
        self._given = False  # the sink got a non-empty piece in this turn

    def say(self, text: str, *, streamed: bool = False) -> None:
        """Add ``text`` to the reply; ``streamed``: the model's answer, already given through
        :meth:`model_sink` as it came."""
        self.result.messages.append(text)
        if text and not streamed and self.sink is not None:
            self._give(text)

    def say_failure(self, text: str) -> None:
        """A failed turn's message: said even if the sink raises now (it is then silenced):
        the turn already fails with its own error, which a sink's must not replace."""
        # The message is in the reply either way (added before the sink is called).
        with contextlib.suppress(Exception):
            self.say(text)

    def model_sink(self) -> TextSink | None:
        """The sink for one model answer (None without a sink): the separator goes before its
        first piece when the turn already said something. The engine feeds it nothing before
        the answer has more than white space (``llm._after_leading_space``), so that first
        piece is the start of the answer's text."""
        if self.sink is None:
            return None
        started = False

        def feed(piece: str) -> None:
            nonlocal started
            if not piece:
                return
            if started:
                self._call(piece)
                return
            started = True
            self._give(piece)

        return feed

    def _give(self, text: str) -> None:
        """``text`` as the start of a message: after the separator when one is due."""
        if self._given:
            self._call(SEPARATOR)
        self._given = True
        self._call(text)

    def _call(self, piece: str) -> None:
        sink = self.sink
        if sink is None:  # silenced: it raised earlier in the turn
            return
        try:
            sink(piece)
        except Exception:
            self.sink = None
            raise
