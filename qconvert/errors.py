"""Every error qconvert reports, and the exit code each one means.

A ``ConversionError`` (and its subclasses) is a problem with the model or the request:
the CLI prints its one line and exits 1. A ``UsageError`` is a problem with the command
line: exit 2. Anything else is a bug: one line, exit 1, a traceback with ``--debug``.

May import: nothing of qconvert (the bottom layer).
"""

from __future__ import annotations


class ConversionError(Exception):
    """A problem with the model or the request: reported as one line, exit 1."""


class GraphError(ConversionError):
    """A broken IR edit (a node added twice, a missing tensor)."""


class UsageError(Exception):
    """A problem with the command line: exit 2."""


class InvariantError(ConversionError):
    """An IR invariant broken after a pass: a bug in that pass, named in the message."""


class RunError(ConversionError):
    """``qconvert run``: a model or feeds the integer executor cannot take; one line."""


class KernelError(ValueError):
    """``qconvert run``: the file lacks something an integer kernel needs (reported as a RunError)."""


EXIT_CODES: dict[type[BaseException], int] = {UsageError: 2, ConversionError: 1}
