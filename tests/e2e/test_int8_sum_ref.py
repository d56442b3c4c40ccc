"""int8 SUM (reduce_sum with rescaling) in LiteRT 2.3: the reference kernel is wrong (issue 37).

The model: Dense(16) → reduce_sum over 8 rows → Dense(4), converted by TensorFlow 2.21 (full int8, the
SUM's input and output parameters differ, so its kernel rescales). Measured against the float model
(TensorFlow's float .tflite) on 64 held-out samples: LiteRT's BUILTIN_REF gives about -3 dB, its optimized
kernels (BUILTIN_WITHOUT_DEFAULT_DELEGATES) 30 dB. Oracle of the optimized SUM: LiteRT's optimized kernel
itself, fed LiteRT's own SUM input. `run` follows the optimized kernel (within 1 LSB: it rescales with
the integer multiplier, LiteRT's optimized kernel in float32) and says so in a note.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds and converts the model")
keras = pytest.importorskip("tf_keras", reason="the model is a tf-keras model")

import oracle
from model_cache import cached

from qconvert.schema.reader import read_model

_rng = np.random.default_rng(0)
CALIB = _rng.uniform(-1, 1, (32, 8, 16)).astype(np.float32)
HELD_OUT = _rng.uniform(-1, 1, (64, 8, 16)).astype(np.float32)


def _build() -> bytes:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((8, 16))
    x = L.Lambda(lambda t: tf.reduce_sum(t, axis=1))(L.Dense(16)(inp))
    model = keras.Model(inp, L.Dense(4)(x))
    fn = tf.function(lambda t: model(t, training=False))
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(tf.TensorSpec([1, 8, 16], tf.float32,
                                                                                       name="input")))
    return frozen.graph.as_graph_def().SerializeToString()


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    pb = cached("int8_sum_v1.pb", _build)
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": [1, 8, 16]})
    return {"float": oracle.tf_float_convert(model), "tf": oracle.tf_ptq_convert(model, {"input": CALIB}),
            "pb": pb}


def _snr(files: dict[str, bytes], how: str) -> float:
    """TensorFlow's int8 file against its float file on the held-out samples: run by LiteRT (``how``: its
    resolver) or by ``qconvert run``'s executor (``how="run"``)."""
    from qconvert.runtime.interpreter import IntegerModel

    feeds = [{"input": x[None]} for x in HELD_OUT]
    run = None
    if how == "run":
        executor = IntegerModel(files["tf"])
        run = lambda quantized: list(executor.run(quantized).values())  # noqa: E731
    references = oracle.float_references(files["float"], feeds)
    return oracle.snr_db(files["tf"], feeds, references, resolver="builtin" if how == "run" else how, run=run)


def test_litert_ref_int8_sum_is_wrong_and_run_follows_the_optimized_kernel(files: dict[str, bytes]) -> None:
    sg = read_model(files["tf"]).subgraphs[0]
    k = next(i for i, op in enumerate(sg.operators) if op.builtin == "SUM")
    x, y = sg.tensors[sg.operators[k].inputs[0]], sg.tensors[sg.operators[k].outputs[0]]
    assert x.dtype == y.dtype == "int8" and x.scale != y.scale  # the rescaling path
    ref, opt, run = _snr(files, "ref"), _snr(files, "builtin"), _snr(files, "run")
    print(f"int8 SUM model vs float, 64 held-out samples: LiteRT REF {ref:.1f} dB, LiteRT optimized {opt:.1f} dB, "
          f"qconvert run {run:.1f} dB")
    assert ref < 5 and opt > 25 and abs(run - opt) < 1, (ref, opt, run)


def test_run_sum_is_the_optimized_kernel_within_one_lsb(files: dict[str, bytes]) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from qconvert.runtime.interpreter import IntegerModel

    tflite = files["tf"]
    sg = read_model(tflite).subgraphs[0]
    k = next(i for i, op in enumerate(sg.operators) if op.builtin == "SUM")
    op = sg.operators[k]
    model = IntegerModel(tflite)
    rng = np.random.default_rng(1)
    equal = total = 0
    for _ in range(32):
        it = Interpreter(model_content=tflite, experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], rng.integers(-128, 128, (1, 8, 16)).astype(np.int8))
        it.invoke()
        theirs = it.get_tensor(op.outputs[0]).astype(np.int64)
        ours = model.run_op(k, {op.inputs[0]: it.get_tensor(op.inputs[0])}).astype(np.int64)
        assert np.max(np.abs(ours - theirs)) <= 1
        equal += int(np.sum(ours == theirs))
        total += ours.size
    print(f"run's int8 SUM equals LiteRT's optimized kernel on {equal}/{total} outputs, within 1 LSB on all")
    assert equal > total // 2


def test_run_and_compare_say_so(files: dict[str, bytes], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qconvert.cli import cli
    from qconvert.runtime.interpreter import IntegerModel
    from qconvert.tools.compare import compare, render_text

    said = "is an int8 SUM that rescales: LiteRT's reference kernel (BUILTIN_REF) computes it wrongly"
    assert len(IntegerModel(files["tf"]).notes) == 1 and said in IntegerModel(files["tf"]).notes[0]
    assert IntegerModel(files["tf"], runtime="tflm").notes == []
    (tmp_path / "m.tflite").write_bytes(files["tf"])
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 16), np.int8))
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "m.tflite"), "--input", str(tmp_path / "x.npy")])
    assert r.exit_code == 0 and said in r.output, r.output
    (tmp_path / "m.pb").write_bytes(files["pb"])
    report = compare(tmp_path / "m.pb", tmp_path / "m.tflite", {"input": HELD_OUT[:4]})
    assert report.engine.startswith("integer executor") and said in render_text(report)
