"""LiteRT's interpreter, for files qconvert's own executor does not take (``compare`` runs
TensorFlow's .tflite files, or files with float ops left, this way). Kept here so that
``schema/`` stays the one gateway to ``ai_edge_litert``."""

from __future__ import annotations

from typing import Any

RESOLVERS = ("builtin", "ref", "default")


def interpreter(data: bytes, preserve_all_tensors: bool = True, resolver: str = "builtin",
                num_threads: int | None = None) -> Any:
    """A LiteRT interpreter on ``data``, tensors allocated. ``resolver``: ``builtin`` = the
    built-in kernels without a delegate, ``ref`` = the reference kernels (BUILTIN_REF),
    ``default`` = what LiteRT picks by itself (built-in kernels and the XNNPACK delegate).
    ``num_threads``: the kernels' threads (LiteRT's default when None).
    ValueError with LiteRT's first line when it cannot load the file."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = {"builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, "ref": OpResolverType.BUILTIN_REF,
            "default": OpResolverType.AUTO}[resolver]
    try:
        it = Interpreter(model_content=bytes(data), experimental_preserve_all_tensors=preserve_all_tensors,
                         experimental_op_resolver_type=kind, num_threads=num_threads)
        it.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return it
