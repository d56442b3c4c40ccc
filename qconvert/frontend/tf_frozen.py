"""SavedModel directories and Keras ``.keras`` / ``.h5`` files, frozen with TensorFlow.

Only this module imports TensorFlow, and only when such a file is converted (``pip
install qconvert[tf]``). Its variables are frozen into constants
(``convert_variables_to_constants_v2``, as for a hand-frozen .pb), and the GraphDef goes
through the same pipeline as a .pb file.

* SavedModel: the ``serving_default`` signature (or the only one), frozen as it is
  (an unknown batch dimension stays unknown, as in a .pb frozen from it).
* Keras file: ``model(x, training=False)`` on an input of the model's shape with batch 1,
  the input named ``input`` (as ``tf.function(lambda x: model(x, training=False))``
  frozen by hand would give).
"""

from __future__ import annotations

import os
from pathlib import Path

from qconvert.errors import ConversionError

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


def is_tf_model(path: str | os.PathLike) -> bool:
    p = Path(path)
    return (p.is_dir() and (p / "saved_model.pb").is_file()) or (p.is_file() and p.suffix in KERAS_SUFFIXES)


def _tensorflow():  # type: ignore[no-untyped-def]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        raise ConversionError("reading a SavedModel or Keras file needs TensorFlow: pip install 'qconvert[tf]'"
                              " (or freeze the model to a .pb)") from None
    return tf


def freeze(path: str | os.PathLike) -> tuple[bytes, list[str], list[str]]:
    """(GraphDef bytes, input names, output names) of a SavedModel directory or Keras file."""
    tf = _tensorflow()
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    p = Path(path)
    try:
        if p.is_dir():
            loaded = tf.saved_model.load(str(p))
            signatures = dict(getattr(loaded, "signatures", {}) or {})
            if not signatures:
                raise ConversionError(f"SavedModel '{p}' has no signature to convert")
            name = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
            if len(signatures) > 1 and name != "serving_default":
                raise ConversionError(f"SavedModel '{p}' has signatures {sorted(signatures)}; none is serving_default")
            # The signature itself is frozen, as TensorFlow's guide does by hand: a wrapper
            # function would add a call level and prefix every tensor name.
            concrete = signatures[name]
        else:
            model = tf.keras.models.load_model(str(p), compile=False)
            shape = [1 if d is None else d for d in model.inputs[0].shape]
            if len(model.inputs) != 1:
                raise ConversionError(f"Keras model '{p}' has {len(model.inputs)} inputs; export a SavedModel instead")
            concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(
                tf.TensorSpec(shape, tf.float32, name="input"))
        frozen = convert_variables_to_constants_v2(concrete)
    except ConversionError:
        raise
    except Exception as exc:  # TensorFlow raises many kinds; one line for the user
        raise ConversionError(f"cannot load '{p}' with TensorFlow: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    inputs = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    outputs = [t.name.split(":")[0] for t in frozen.outputs]
    return frozen.graph.as_graph_def().SerializeToString(deterministic=True), inputs, outputs
