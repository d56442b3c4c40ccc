"""Any supported model input to GraphDef nodes: a frozen ``.pb`` (path or bytes), or a
SavedModel directory or Keras file frozen with TensorFlow (``tf_frozen``, imported only then).

The one place that decides what a model argument is, for ``convert``, ``calibrate`` and
``compare`` alike.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from qconvert.frontend.graphdef import parse_graphdef, read_graphdef


def read_nodes(model: bytes | str | os.PathLike, inputs: Sequence[str] | None = None,
               outputs: Sequence[str] | None = None) -> tuple[list[Any], Sequence[str] | None, Sequence[str] | None]:
    """(GraphDef nodes, inputs, outputs): a SavedModel's or Keras model's signature gives the
    inputs and outputs the caller left out."""
    if isinstance(model, (bytes, bytearray)):
        return parse_graphdef(model), inputs, outputs
    from qconvert.frontend.tf_frozen import freeze, is_tf_model

    if is_tf_model(model):
        frozen, tf_inputs, tf_outputs = freeze(model)
        return parse_graphdef(frozen), inputs or tf_inputs, outputs or tf_outputs
    return read_graphdef(model), inputs, outputs
