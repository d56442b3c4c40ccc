"""SavedModel directories and Keras files as input (TensorFlow installed).

The oracle for "the same model": a .pb frozen by hand from the same Keras model the way
TensorFlow's documentation freezes one (tf.function + convert_variables_to_constants_v2).
The Keras file must give the very same .tflite bytes as the .pb frozen from the Keras
model, and the SavedModel the very same bytes as the .pb frozen from its serving
signature (freezing the signature by hand, as TensorFlow's guide does), but for the
signature they carry and the .pb's file does not (as TensorFlow's from_keras_model /
from_saved_model and from_frozen_graph write them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tf = pytest.importorskip("tensorflow", reason="SavedModel / Keras input needs TensorFlow")
    keras = tf.keras
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
    folder = tmp_path_factory.mktemp("tfin")
    model.save(folder / "m.keras")
    model.export(str(folder / "saved"))
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec([1, 8, 8, 3], tf.float32, name="input"))
    frozen = convert_variables_to_constants_v2(concrete)
    (folder / "m.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString(deterministic=True))
    loaded = tf.saved_model.load(str(folder / "saved"))  # kept alive while its signature is frozen
    signature = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
    (folder / "saved.pb").write_bytes(signature.graph.as_graph_def().SerializeToString(deterministic=True))
    names = {"in": [t.name.split(":")[0] for t in signature.inputs if t.dtype != tf.resource],
             "out": [t.name.split(":")[0] for t in signature.outputs]}  # Keras numbers names per process
    (folder / "saved.json").write_text(json.dumps(names))
    del loaded
    samples = np.random.default_rng(0).uniform(-1, 1, (16, 8, 8, 3)).astype(np.float32)
    return folder, [t.name.split(":")[0] for t in frozen.outputs], samples


def _without_signature(tflite: bytes) -> bytes:
    """The file packed again without its SignatureDef (a SavedModel or Keras file's output has the one
    TensorFlow writes; the .pb's, as from_frozen_graph's, has none)."""
    import oracle

    def strip(m):  # type: ignore[no-untyped-def]
        m.signatureDefs = []

    return oracle.repack(tflite, strip)


def _signature_keys(tflite: bytes) -> list[str]:
    from qconvert.schema.reader import read_model

    return [s.key for s in read_model(tflite).signatures]


def test_keras_file_gives_the_same_file_as_its_frozen_pb(keras_model) -> None:  # type: ignore[no-untyped-def]
    from qconvert.api import convert_graph

    folder, outputs, samples = keras_model
    from_pb = convert_graph(folder / "m.pb", outputs=outputs, calibration_data={"input": samples}).model
    from_keras = convert_graph(folder / "m.keras", calibration_data={"input": samples}).model
    assert _without_signature(from_keras) == _without_signature(from_pb) and _signature_keys(from_pb) == []
    assert _signature_keys(from_keras) == ["serving_default"]  # as from_keras_model (test_signatures.py)


def test_saved_model_gives_the_same_file_as_its_frozen_signature(keras_model) -> None:  # type: ignore[no-untyped-def]
    import oracle

    from qconvert.api import convert_graph

    folder, outputs, samples = keras_model
    names = json.loads((folder / "saved.json").read_text())
    x = names["in"][0]
    from_signature = convert_graph(folder / "saved.pb", inputs=names["in"], outputs=names["out"],
                                   calibration_data={x: samples}).model
    from_sm = convert_graph(folder / "saved", calibration_data={x: samples}).model
    assert _without_signature(from_sm) == _without_signature(from_signature)
    assert _signature_keys(from_sm) == ["serving_default"] and _signature_keys(from_signature) == []
    # and the same int8 model as the Keras file's (only the graph's names differ)
    from_pb = convert_graph(folder / "m.pb", outputs=outputs, calibration_data={"input": samples}).model
    assert oracle.op_names(from_sm) == oracle.op_names(from_pb)
    oracle.compare_models(from_sm, from_pb, n_inputs=8, max_lsb=0)


def test_a_broken_saved_model_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow", reason="SavedModel input needs TensorFlow")
    from qconvert.cli import main

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "saved_model.pb").write_bytes(b"not a saved model")
    assert main([str(tmp_path / "bad"), "--calibration-data", str(tmp_path / "x.npz")]) == 1


def test_without_tensorflow_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qconvert.errors import ConversionError
    from qconvert.frontend.tf_frozen import freeze

    (tmp_path / "m.keras").write_bytes(b"PK")
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow -> ImportError
    with pytest.raises(ConversionError, match=r"pip install 'qconvert\[tf\]'"):
        freeze(tmp_path / "m.keras")


def test_compare_takes_a_saved_model(keras_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from qconvert.api import convert_graph
    from qconvert.tools.compare import compare

    folder, _, samples = keras_model
    x = json.loads((folder / "saved.json").read_text())["in"][0]
    (tmp_path / "m.tflite").write_bytes(convert_graph(folder / "saved", calibration_data={x: samples}).model)
    report = compare(folder / "saved", tmp_path / "m.tflite", {x: samples}).as_dict()
    assert [r["op"] for r in report["tensors"]] == ["CONV_2D", "MEAN", "FULLY_CONNECTED"] and not report["unmapped"]
    assert all(r["snr_db"] > 30 for r in report["tensors"])
