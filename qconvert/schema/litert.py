"""LiteRT's interpreter, for files qconvert's own executor does not take (``compare`` runs
TensorFlow's .tflite files, or files with float ops left, this way). Kept here so that
``schema/`` stays the one gateway to ``ai_edge_litert``."""

from __future__ import annotations

from typing import Any


def interpreter(data: bytes, preserve_all_tensors: bool = True) -> Any:
    """A LiteRT interpreter on ``data`` with the built-in kernels (no delegate), tensors
    allocated. ValueError with LiteRT's first line when it cannot load the file."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        it = Interpreter(model_content=bytes(data), experimental_preserve_all_tensors=preserve_all_tensors,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return it
