"""Values shared by the command line and the library functions behind it, defined once.

``ExitCode``: ``OK`` success; ``FAILED`` the check or the run found a problem (errors in a
file, the script disagreed with the engine, a turn failed); ``USAGE`` bad usage or unreadable
input. ``Show``: what ``chat --show`` can display after each reply. Library entry points that
return an exit code (``chat.run_chat``) return ``ExitCode`` values, so a command only passes
them on. This module imports nothing heavy: the CLI reads it to build its options.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ExitCode(IntEnum):
    """What a command's exit status means."""

    OK = 0
    FAILED = 1
    USAGE = 2
    INTERRUPTED = 130  # stopped at once by Ctrl-C (the shell's 128 + SIGINT)


class Show(StrEnum):
    """A detail ``chat --show`` prints after each reply."""

    PROMPT = "prompt"  # the resolved system prompt and instructions
    TOOLS = "tools"  # the tools offered and hidden at each step
    TRACE = "trace"  # the turn's steps: actions, transitions, refusals, variable changes


SHOW_CHOICES: tuple[str, ...] = tuple(show.value for show in Show)

__all__ = ["SHOW_CHOICES", "ExitCode", "Show"]
