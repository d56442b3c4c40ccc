"""Any supported model input to GraphDef nodes: a frozen ``.pb`` (path or bytes), or a
SavedModel directory or Keras file frozen with TensorFlow (``tf_frozen``, imported only then).

The one place that decides what a model argument is, for ``convert``, ``calibrate`` and
``compare`` alike.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from qconvert.frontend.graphdef import parse_graphdef, read_graphdef
from qconvert.frontend.importer import tensor_name
from qconvert.ir import Graph, Signature


def read_nodes(model: bytes | str | os.PathLike, inputs: Sequence[str] | None = None,
               outputs: Sequence[str] | None = None) -> tuple[list[Any], Sequence[str] | None, Sequence[str] | None]:
    """(GraphDef nodes, inputs, outputs): a SavedModel's or Keras model's signature gives the
    inputs and outputs the caller left out."""
    nodes, inputs, outputs, _ = read_model_nodes(model, inputs, outputs)
    return nodes, inputs, outputs


def read_model_nodes(model: bytes | str | os.PathLike, inputs: Sequence[str] | None = None,
                     outputs: Sequence[str] | None = None
                     ) -> tuple[list[Any], Sequence[str] | None, Sequence[str] | None, Any]:
    """``read_nodes``, and the signature TensorFlow's converter writes for the model (``tf_frozen``'s
    ``FrozenSignature``; None for a .pb: from_frozen_graph writes none)."""
    if isinstance(model, (bytes, bytearray)):
        return parse_graphdef(model), inputs, outputs, None
    from qconvert.frontend.tf_frozen import freeze, is_tf_model

    if is_tf_model(model):
        frozen, tf_inputs, tf_outputs, signature = freeze(model)
        return parse_graphdef(frozen), inputs or tf_inputs, outputs or tf_outputs, signature
    return read_graphdef(model), inputs, outputs, None


def model_bytes(model: bytes | str | os.PathLike, inputs: Sequence[str] | None = None,
                outputs: Sequence[str] | None = None
                ) -> tuple[bytes | str | os.PathLike, Sequence[str] | None, Sequence[str] | None]:
    """(model, inputs, outputs) read once for a caller that converts it many times (``tune``): a
    SavedModel or Keras file frozen by TensorFlow once, to GraphDef bytes, its signature's inputs and
    outputs filling those left out (as ``convert`` does); a .pb file's bytes; anything else as given
    (a .tflite, or a path that does not exist: the conversion says what it is)."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model), inputs, outputs
    from qconvert.frontend.tf_frozen import freeze, is_tf_model

    if is_tf_model(model):
        frozen, tf_inputs, tf_outputs, _ = freeze(model)
        return frozen, inputs or tf_inputs, outputs or tf_outputs
    if os.path.isfile(model):
        with open(model, "rb") as fh:
            return fh.read(), inputs, outputs
    return model, inputs, outputs


def attach_signature(graph: Graph, signature: Any, notes: list[str]) -> None:
    """Give ``graph`` the signature ``read_model_nodes`` found, over its inputs and outputs
    (positions); dropped with a note when ``--inputs``/``--outputs`` cut the graph elsewhere."""
    if signature is None:
        return
    key, ins, outs = signature
    in_pos = {name: i for i, name in enumerate(graph.inputs)}
    out_pos = {tensor_name(name): i for i, name in enumerate(graph.output_names)}
    if sorted(tensor_name(t) for _, t in ins) != sorted(in_pos) or \
            sorted(tensor_name(t) for _, t in outs) != sorted(out_pos):
        notes.append(f"signature '{key}' is not written: its inputs and outputs are not the converted graph's "
                     "(--inputs/--outputs cut it elsewhere); the file's are named by tensor")
        return
    graph.signature = Signature(key, tuple((n, in_pos[tensor_name(t)]) for n, t in ins),
                                tuple((n, out_pos[tensor_name(t)]) for n, t in outs))
