"""Signatures (SignatureDef) in qconvert's file, against TensorFlow 2.21's converter (issue 36).

Measured (TensorFlow 2.21, full int8, ``representative_dataset``): ``from_keras_model``,
``from_saved_model`` and ``from_concrete_functions`` write one signature, ``serving_default``, on
subgraph 0, its input and output names mapped to the subgraph's input and output tensors (in
name order: ``aux`` before ``img``); with float I/O the output names map to the DEQUANTIZE'd float
outputs. The names: a SavedModel's signature keys; ``from_keras_model`` of a tf_keras model its
input and output layers' names, of a Keras 3 model the input tensor's name and ``output_0``...;
``from_concrete_functions`` ``output_0``... ``from_frozen_graph`` writes none.

The oracle for the structure is TensorFlow's int8 file of the same model: the same keys, names,
subgraph, and each name on a tensor of the same dtype, shape (and, as both calibrate the same
samples of a small model, scale and zero point); LiteRT's signature runner on qconvert's file gives
the outputs of the interpreter called directly on the tensors the signature names.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow writes the models and is the oracle")
tf_keras = pytest.importorskip("tf_keras", reason="the two-input model is a tf_keras SavedModel")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

from qconvert.api import convert_graph  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

RNG = np.random.default_rng(0)
SAMPLES = {"img": RNG.uniform(-1, 1, (16, 8)).astype(np.float32), "aux": RNG.uniform(-1, 1, (16, 4)).astype(np.float32)}


def _two_io_model() -> Any:
    """img [1,8] → Dense(6, relu); concat with aux [1,4] → logits Dense(3), score Dense(2, sigmoid)."""
    tf_keras.utils.set_random_seed(1)
    img, aux = tf_keras.Input((8,), name="img", batch_size=1), tf_keras.Input((4,), name="aux", batch_size=1)
    y = tf_keras.layers.Concatenate()([tf_keras.layers.Dense(6, activation="relu", name="d1")(img), aux])
    return tf_keras.Model([img, aux], [tf_keras.layers.Dense(3, name="logits")(y),
                                       tf_keras.layers.Dense(2, activation="sigmoid", name="score")(y)])


def _tf_int8(converter: Any, inputs: list[str], float_io: bool = False) -> bytes:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]

    def representative() -> Any:
        for i in range(16):
            yield [SAMPLES[n][i:i + 1] for n in inputs]

    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if not float_io:
        converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """TensorFlow's files of the two-input model: float (from_keras_model), int8 (from_keras_model,
    int8 and float I/O), from_saved_model, from_frozen_graph; and the SavedModel and .pb themselves."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    tmp = tmp_path_factory.mktemp("signatures")
    m = _two_io_model()
    out: dict[str, Any] = {"float": tf.lite.TFLiteConverter.from_keras_model(m).convert(),
                           "keras": _tf_int8(tf.lite.TFLiteConverter.from_keras_model(m), ["img", "aux"]),
                           "keras_float_io": _tf_int8(tf.lite.TFLiteConverter.from_keras_model(m), ["img", "aux"], True)}
    out["saved_model"] = str(tmp / "sm")
    m.save(out["saved_model"])
    out["saved_model_tf"] = _tf_int8(tf.lite.TFLiteConverter.from_saved_model(out["saved_model"]), ["img", "aux"])
    fn = tf.function(lambda img, aux: m([img, aux]))
    concrete = fn.get_concrete_function(tf.TensorSpec((1, 8), tf.float32, name="img"),
                                        tf.TensorSpec((1, 4), tf.float32, name="aux"))
    frozen = convert_variables_to_constants_v2(concrete)
    out["pb"] = str(tmp / "m.pb")
    Path(out["pb"]).write_bytes(frozen.graph.as_graph_def().SerializeToString())
    out["pb_outputs"] = [t.name.split(":")[0] for t in frozen.outputs]
    out["pb_tf"] = _tf_int8(tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(
        out["pb"], ["img", "aux"], out["pb_outputs"]), ["img", "aux"])
    return out


def _signatures(tflite: bytes) -> list[tuple[str, int, dict, dict]]:
    """(key, subgraph, {input name: (dtype, shape, scale, zero point)}, {output name: ...}) per signature."""
    model = read_model(tflite)
    out = []
    for s in model.signatures:
        ts = model.subgraphs[s.subgraph].tensors

        def port(i: int) -> tuple:
            return ts[i].dtype, tuple(ts[i].shape), tuple(np.float32(ts[i].scale)), tuple(ts[i].zero_point)

        out.append((s.key, s.subgraph, {n: port(i) for n, i in s.inputs.items()},
                    {n: port(i) for n, i in s.outputs.items()}))
    return out


def _assert_runner_is_interpreter(tflite: bytes) -> None:
    """LiteRT's signature runner gives, for each output name, what the interpreter called directly
    computes in the tensor the signature maps that name to."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    model = read_model(tflite)
    (sig,) = model.signatures
    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    assert it.get_signature_list() == {sig.key: {"inputs": list(sig.inputs), "outputs": list(sig.outputs)}}
    runner = it.get_signature_runner(sig.key)
    details = {d["index"]: d for d in it.get_input_details()}
    rng = np.random.default_rng(2)
    for _ in range(4):
        feeds = {}
        for name, i in sig.inputs.items():
            d = details[i]
            feeds[name] = (rng.integers(-128, 128, d["shape"]).astype(d["dtype"]) if d["dtype"] == np.int8
                           else rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]))
        by_runner = runner(**feeds)
        direct = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        direct.allocate_tensors()
        for name, i in sig.inputs.items():
            direct.set_tensor(i, feeds[name])
        direct.invoke()
        assert set(by_runner) == set(sig.outputs)
        for name, i in sig.outputs.items():
            np.testing.assert_array_equal(by_runner[name], direct.get_tensor(i), err_msg=name)


def _calibration(prefix: str = "") -> dict[str, np.ndarray]:
    return {f"{prefix}{n}{':0' if prefix else ''}": v for n, v in SAMPLES.items()}


def test_float_tflite_signature_is_tensorflows(files: dict[str, Any]) -> None:
    """TensorFlow's float file (from_keras_model) → qconvert: the signature of TensorFlow's int8 file."""
    ours = convert_graph(files["float"], calibration_data=_calibration("serving_default_")).model
    theirs = _signatures(files["keras"])
    assert [(k, s, list(i), list(o)) for k, s, i, o in theirs] == [("serving_default", 0, ["aux", "img"],
                                                                    ["logits", "score"])]
    assert _signatures(ours) == theirs
    _assert_runner_is_interpreter(ours)


def test_float_io_signature_names_the_boundary_tensors(files: dict[str, Any]) -> None:
    """With float I/O (QUANTIZE/DEQUANTIZE added at the boundary) the names map to the float tensors,
    as in TensorFlow's file with float I/O."""
    ours = convert_graph(files["float"], calibration_data=_calibration("serving_default_"),
                         input_type="float32", output_type="float32").model
    theirs = _signatures(files["keras_float_io"])
    assert {p[0] for _, _, i, o in theirs for p in [*i.values(), *o.values()]} == {"float32"}
    assert _signatures(ours) == theirs
    _assert_runner_is_interpreter(ours)


def test_outputs_by_signature_names_keep_it_a_cut_drops_it(files: dict[str, Any]) -> None:
    """--outputs naming the signature's outputs (any order) keeps the signature; a cut elsewhere drops
    it, with a note."""
    kept = convert_graph(files["float"], calibration_data=_calibration("serving_default_"),
                         outputs=["score", "logits"])
    assert _signatures(kept.model) == _signatures(files["keras"])
    _assert_runner_is_interpreter(kept.model)
    cut = convert_graph(files["float"], calibration_data=_calibration("serving_default_"), outputs=["logits"])
    assert read_model(cut.model).signatures == []
    assert any("signature 'serving_default' is not written" in n for n in cut.notes), cut.notes


def test_saved_model_signature_is_tensorflows(files: dict[str, Any]) -> None:
    ours = convert_graph(files["saved_model"], calibration_data=_calibration(),
                         input_shapes={"img": [1, 8], "aux": [1, 4]}).model
    assert _signatures(ours) == _signatures(files["saved_model_tf"])
    _assert_runner_is_interpreter(ours)


@pytest.mark.parametrize("library", ["keras", "tf_keras"])
def test_keras_file_signature_is_tensorflows(library: str, tmp_path: Path) -> None:
    """A Keras model: the names TensorFlow's from_keras_model gives its signature (Keras 3: the input
    tensor's name and output_0; tf_keras: the input and output layers' names) are the ones qconvert
    takes for it (``tf_frozen._keras_keys``); a .keras file converted by qconvert carries them (Keras 3
    reads .keras and tf_keras' .h5 files alike, so a tf_keras model reaches the tf_keras case only when
    Keras 3 cannot read its file)."""
    from qconvert.frontend.tf_frozen import _keras_keys

    lib = pytest.importorskip(library)
    lib.utils.set_random_seed(3)
    feat = lib.Input((8,), name="feat", batch_size=1)
    model = lib.Model(feat, lib.layers.Dense(3, name="head")(lib.layers.Dense(5, activation="relu", name="d1")(feat)))
    x = {"feat": SAMPLES["img"]}

    def representative() -> Any:
        for i in range(16):
            yield [x["feat"][i:i + 1]]

    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations, c.representative_dataset = [tf.lite.Optimize.DEFAULT], representative
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type = c.inference_output_type = tf.int8
    theirs = read_model(c.convert()).signatures
    assert [(s.key, list(s.inputs), list(s.outputs)) for s in theirs] == [
        ("serving_default", ["feat"], ["head" if library == "tf_keras" else "output_0"])]
    assert _keras_keys(model) == (list(theirs[0].inputs), list(theirs[0].outputs))
    if library == "keras":  # the whole path: a .keras file converted by qconvert
        path = tmp_path / "m.keras"
        model.save(path)
        ours = convert_graph(str(path), calibration_data={"input": x["feat"]}).model
        assert [(s.key, s.subgraph, list(s.inputs), list(s.outputs)) for s in read_model(ours).signatures] == [
            ("serving_default", 0, ["feat"], ["output_0"])]
        _assert_runner_is_interpreter(ours)


def test_frozen_graph_has_no_signature(files: dict[str, Any]) -> None:
    """from_frozen_graph writes no signature; neither does qconvert from a .pb."""
    assert read_model(files["pb_tf"]).signatures == []
    ours = convert_graph(files["pb"], calibration_data=_calibration(), inputs=["img", "aux"],
                         outputs=files["pb_outputs"]).model
    assert read_model(ours).signatures == []


def test_dump_shows_signatures(files: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from qconvert.cli import main

    path = tmp_path / "m.tflite"
    path.write_bytes(convert_graph(files["float"], calibration_data=_calibration("serving_default_")).model)
    sig = read_model(path.read_bytes()).signatures[0]
    capsys.readouterr()
    assert main(["dump", str(path), "--metadata"]) == 0
    text = capsys.readouterr().out
    assert ("signatures (1)\n  serving_default (subgraph 0)\n"
            f"    inputs aux -> {sig.inputs['aux']}, img -> {sig.inputs['img']}\n"
            f"    outputs logits -> {sig.outputs['logits']}, score -> {sig.outputs['score']}\n") in text
    assert main(["dump", str(path), "--metadata", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["signatures"] == [{"key": "serving_default", "subgraph": 0, "inputs": sig.inputs,
                                  "outputs": sig.outputs}]
