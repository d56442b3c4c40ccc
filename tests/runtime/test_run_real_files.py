"""``qconvert run`` on files other converters wrote: the real third-party files in
../shared/realmodels (issue 18). Without qconvert's metadata, ``run`` derives each kernel's
integer parameters from the file's scales with the converter's own requant function.

Oracle: LiteRT 2.3's interpreter, ``OpResolverType.BUILTIN_REF``, every intermediate tensor
(by tensor index: TFLite Micro's files may leave every name empty). Each operator is fed LiteRT's
own inputs and must give LiteRT's output (a VARIABLE state input fresh, as on a new interpreter:
LiteRT's state tensor holds its value after the op); the whole run must give LiteRT's outputs.
Random inputs over the whole range of each input's type, 3 per file, a fresh interpreter each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qconvert.errors import RunError
from qconvert.runtime.interpreter import IntegerModel

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realmodels"
pytestmark = pytest.mark.skipif(not REAL.is_dir(),
                                reason=f"{REAL} is absent (real third-party files, not in this repo)")

# quantized files LiteRT runs, that `run` reproduces bit for bit (int8; uint8 from TFLite's older
# quantization; a float input or output through QUANTIZE/DEQUANTIZE; SHAPE → PACK int32 arithmetic)
EXACT = [
    "coral_test_data/mobilenet_v1_0.25_128_quant.tflite", "coral_test_data/split_concat.tflite",
    "coral_test_data/deeplabv3_mnv2_dm05_pascal_quant.tflite",  # uint8: a float32 in*w in its multipliers
    "mlcommons_tiny/ToyCar_model_ToyCar_quant_fullint.tflite", "mlcommons_tiny/ad01_int8.tflite",
    "mlcommons_tiny/kws_ref_model.tflite", "mlcommons_tiny/pretrainedResnet_large_int8.tflite",
    "mlcommons_tiny/pretrainedResnet_quant.tflite", "mlcommons_tiny/str_ww_ref_model.tflite",
    "mlcommons_tiny/vww_96_int8.tflite", "tflite_micro/add_model_quant8.tflite",
    "tflite_micro/custom_model_rf_keras.tflite", "tflite_micro/hello_world.tflite",
    "tflite_micro/hello_world_int8.tflite", "tflite_micro/id_model.tflite", "tflite_micro/micro_speech.tflite",
    "tflite_micro/micro_speech_unalign.tflite", "tflite_micro/mobilenet_v2_quantized_1x3x224x224.tflite",
    "tflite_micro/model_runner_codegen_model.tflite", "tflite_micro/old_examples_hello_world.tflite",
    "tflite_micro/retinaface.tflite", "tflite_micro/simple_add_model.tflite",
    # SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM: int8 activations, int16 state (tests/runtime/test_svdf_lstm.py)
    "tflite_micro/keyword_scrambled.tflite", "tflite_micro/micro_speech_lstm.tflite",
    "tflite_micro/trained_lstm_int8.tflite", "tflite_micro/dtln_noise_suppression.tflite",
    "coral_test_data/keras_lstm_mnist_ptq.tflite",
]
# quantized files `run` refuses in one line, naming the op or the type it does not execute
REFUSED = {
    # int8 state: LiteRT 2.3's SVDF reads it as int16 past its end and corrupts its own heap (measured)
    "tflite_micro/keyword_scrambled_8bit.tflite": "SVDF",
    "tflite_micro/hello_world_float.tflite": "float32",  # float models: nothing integer to run
    "mlcommons_tiny/vww_96_float.tflite": "float32",
    "tflite_micro/person_detect_vela.tflite": "custom op 'ethos-u'",  # Vela's output (LiteRT cannot load it)
    "tflite_micro/audio_preprocessor_int8.tflite": "custom op 'SignalWindow'",
    "tflite_micro/audio_preprocessor_float.tflite": "custom op 'SignalWindow'",  # LiteRT lacks it too (measured)
}
# the real files holding CAST or TILE (issue 34): TFLite Micro's audio preprocessors, whose CASTs run between
# their signal custom ops (which LiteRT cannot resolve either); TILE is in none
CAST_TILE = {
    "tflite_micro/audio_preprocessor_int8.tflite": {("uint32", "int32"), ("int32", "uint32"), ("int16", "int32"),
                                                    ("int32", "int8")},
    "tflite_micro/audio_preprocessor_float.tflite": {("uint32", "int32"), ("int32", "uint32"), ("int16", "float32")},
}


def _litert(tflite: bytes, feeds: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor LiteRT holds after one invocation of a fresh interpreter, by tensor index
    (TFLite Micro's files may leave every name empty)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for d, name in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], feeds[d["name"]] if d["name"] in feeds else feeds[name])
    it.invoke()
    out = {}
    for d in it.get_tensor_details():
        try:
            out[d["index"]] = it.get_tensor(d["index"]).copy()
        except ValueError:  # a tensor without data (an LSTM's float intermediates)
            pass
    return out


def _feeds(model: IntegerModel, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for d in model.input_details():
        dtype = np.dtype(d["dtype"])
        if dtype.kind == "f":
            out[d["name"]] = rng.uniform(-1, 1, d["shape"]).astype(dtype)
        else:
            out[d["name"]] = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, d["shape"]).astype(dtype)
    return out


def _differences(tflite: bytes, n: int = 3) -> dict[str, tuple[int, int, int]]:
    """Per op kind (and "<outputs>"): (elements differing, elements, max LSB) against LiteRT."""
    model = IntegerModel(tflite)
    assert model.computed or "qconvert_requant" in model.model.metadata
    rng = np.random.default_rng(0)
    figures: dict[str, list[int]] = {}

    def add(kind: str, a: np.ndarray, b: np.ndarray) -> None:
        assert a.shape == b.shape and a.dtype == b.dtype, (kind, a.shape, b.shape, a.dtype, b.dtype)
        d = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(-1)
        f = figures.setdefault(kind, [0, 0, 0])
        f[0], f[1], f[2] = f[0] + int((d > 0).sum()), f[1] + d.size, max(f[2], int(d.max(initial=0)))

    for _ in range(n):
        feeds = _feeds(model, rng)
        ref = _litert(tflite, feeds)
        for k, op in enumerate(model.model.operators):
            got = model.run_op(k, ref)
            for v, i in zip(got if isinstance(got, list) else [got], op.outputs):
                add(op.builtin, v, ref[i])
        outputs = model.run(feeds)
        for i in model.model.outputs:
            add("<outputs>", outputs[model.tensors[i].name], ref[i])
    return {k: tuple(v) for k, v in figures.items()}  # type: ignore[misc]


@pytest.mark.parametrize("name", EXACT)
def test_other_converters_files_equal_litert(name: str) -> None:
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")
    figures = _differences((REAL / name).read_bytes())
    print(name, figures)
    assert all(f[0] == 0 for f in figures.values()), figures


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_run_cannot_execute_is_one_line(name: str) -> None:
    with pytest.raises(RunError) as info:
        IntegerModel((REAL / name).read_bytes())
    message = str(info.value)
    assert "\n" not in message and REFUSED[name] in message, message


def test_the_real_files_with_cast_or_tile() -> None:
    """Which real files hold CAST or TILE, and the type pairs of their CASTs: each one `run`'s CAST executes
    (tests/runtime/test_cast_tile.py checks every pair of RAW_TYPES against LiteRT REF)."""
    from qconvert.runtime.interpreter import RAW_TYPES
    from qconvert.schema.reader import read_model

    found: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(REAL.rglob("*.tflite")):
        try:
            m = read_model(path.read_bytes())
        except ValueError:  # the fuzz corpus
            continue
        for op in m.operators:
            if op.builtin in ("CAST", "TILE"):
                pair = (m.tensors[op.inputs[0]].dtype, m.tensors[op.outputs[0]].dtype)
                found.setdefault(str(path.relative_to(REAL)), set()).add(pair)
    assert found == CAST_TILE
    assert all(t in RAW_TYPES for pairs in found.values() for pair in pairs for t in pair)
