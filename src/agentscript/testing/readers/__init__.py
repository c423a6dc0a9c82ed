"""Spec readers: each turns one file format into :class:`agentscript.testing.spec.Suite`.

:func:`read_spec` picks the reader from the file's name and content; every reader raises
:class:`agentscript.testing.errors.SpecError` (file and line) on a spec it cannot use.
"""

from agentscript.testing.readers.detect import SPEC_SUFFIXES, is_spec_file, read_spec

__all__ = ["SPEC_SUFFIXES", "is_spec_file", "read_spec"]
