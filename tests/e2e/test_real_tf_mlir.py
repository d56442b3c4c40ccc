"""TensorFlow's own end-to-end converter tests (../shared/realmodels/tf_mlir_end2end): a slice of a
TF1 QAT SSD box predictor with per-channel weight FakeQuants. Each ``.pbtxt`` holds the
``tf_tfl_translate`` command (``# RUN:``) and TensorFlow's expected output (``# MLIR:`` lines:
types with double scales; ``# CHECK:`` lines: the flatbuffer's float32 scales to 6 digits). The
``.pb`` beside it is the same graph in binary form. qconvert converts the ``.pb`` with the RUN
line's inputs, shapes and ranges, and must reproduce those expectations (issue 15)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from qconvert.api import convert_graph
from qconvert.schema.reader import read_model

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT.parent / "shared" / "realmodels" / "tf_mlir_end2end"
pytestmark = pytest.mark.skipif(not DIR.is_dir(), reason=f"{DIR} is absent (TensorFlow's own test graphs)")


def _run_options(text: str) -> dict[str, str]:
    run = " ".join(line[len("# RUN:"):] for line in text.splitlines() if line.startswith("# RUN:"))
    return {k: v.strip("'\"") for k, v in re.findall(r"-tf-([a-z-]+)=(\S+)", run)}


def _convert(name: str) -> tuple[bytes, str]:
    text = (DIR / f"{name}.pbtxt").read_text()
    o = _run_options(text)
    shape = [int(d) for d in o["input-shapes"].split(",")]
    result = convert_graph(DIR / f"{name}.pb", {o["input-arrays"]: (float(o["input-min-values"]),
                                                                    float(o["input-max-values"]))},
                           {o["input-arrays"]: shape}, [o["input-arrays"]], [o["output-arrays"]])
    return result.model, text


def _check_lists(text: str, key: str) -> list[list[float]]:
    """The values of every ``# CHECK: key: [ a, b, ...`` line (one line: the first values)."""
    out = []
    for line in text.splitlines():
        m = re.match(rf"# CHECK:\s+{key}: \[ (.*?)( \],?)?$", line)
        if m:
            out.append([float(v) for v in m.group(1).rstrip(",").split(",") if v.strip()])
    return out


@pytest.mark.parametrize("name", ["fake_quant_per_channel", "fake_quant_without_identity"])
def test_quantization_matches_tensorflows_expected_output(name: str) -> None:
    model, text = _convert(name)
    sg = read_model(model).subgraphs[0]
    inp, out = sg.tensors[sg.inputs[0]], sg.tensors[sg.outputs[0]]
    # MLIR lines: the I/O types with double scales (the file holds their float32)
    io = re.findall(r"!quant\.uniform<i8:f32, ([0-9.e-]+):(-?\d+)>", text)
    (s_in, z_in), (s_out, z_out) = (float(io[0][0]), int(io[0][1])), (float(io[1][0]), int(io[1][1]))
    # tf_tfl_translate takes the input's min/max directly; --inputs-range follows the Python
    # converter, which takes only quantized_input_stats (mean, std as float32) and recovers
    # min/max from them: the scale lands 1 float32 ulp from the RUN line's, the zero point equal.
    assert inp.zero_point[0] == z_in
    assert abs(np.float32(inp.scale[0]).view(np.int32) - np.float32(s_in).view(np.int32)) <= 1
    assert (out.scale[0], out.zero_point[0]) == (float(np.float32(s_out)), z_out)
    first_w = float(re.search(r"i8<-127:127>:f32:0, \{([0-9.e-]+)", text).group(1))
    conv = next(op for op in sg.operators if op.builtin == "CONV_2D")
    w, b = sg.tensors[conv.inputs[1]], sg.tensors[conv.inputs[2]]
    assert w.scale[0] == float(np.float32(first_w))
    assert set(w.zero_point) == {0} and set(b.zero_point) == {0}
    # CHECK lines (where the file has them): per-channel scales to 6 digits, bias then weights
    per_channel = [v for v in _check_lists(text, "scale") if len(v) > 1]
    if per_channel:
        bias_check, weight_check = per_channel[:2]
        np.testing.assert_allclose(b.scale[:len(bias_check)], bias_check, rtol=5e-4, atol=1e-6)
        np.testing.assert_allclose(w.scale[:len(weight_check)], weight_check, rtol=5e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["fake_quant_per_channel_4bit", "fake_quant_without_identity_4bit"])
def test_4bit_weights_match_tensorflows_expected_output(name: str) -> None:
    """The MLIR lines expect ``i4<-7:7>`` weights with per-channel double scales (the first one
    2.2825599397931779 here); TensorFlow 2.21 writes them as INT4 tensors (type 17, two values a
    byte) and CONV_2D version 7. Oracle twice over: those lines, and TensorFlow's converter run
    on the same ``.pb`` (the same bytes, and the same outputs in LiteRT's reference kernels)."""
    model, text = _convert(name)
    sg = read_model(model).subgraphs[0]
    conv = next(op for op in sg.operators if op.builtin == "CONV_2D")
    w = sg.tensors[conv.inputs[1]]
    m = re.search(r"i4<(-?\d+):(-?\d+)>:f32:0, \{([0-9.e-]+)", text)
    lo, hi, first = int(m.group(1)), int(m.group(2)), float(m.group(3))
    assert (conv.version, w.dtype, w.scale[0], set(w.zero_point)) == (7, "int4", float(np.float32(first)), {0})
    values = w.array()
    assert lo <= values.min() and values.max() <= hi and len(w.data) == (values.size + 1) // 2

    import corpus
    import oracle  # TensorFlow's converter on the same graph, as the Python API runs it

    o = _run_options(text)
    x = o["input-arrays"]
    theirs = oracle.tf_convert(corpus.CorpusModel(
        name, (DIR / f"{name}.pb").read_bytes(), [x], [o["output-arrays"]],
        {x: [int(d) for d in o["input-shapes"].split(",")]},
        {x: (float(o["input-min-values"]), float(o["input-max-values"]))}))
    tw = next(read_model(theirs).subgraphs[0].tensors[op.inputs[1]] for op in read_model(theirs).subgraphs[0].operators
              if op.builtin == "CONV_2D")
    assert (tw.dtype, tw.data, tw.scale) == (w.dtype, w.data, w.scale)
    oracle.compare_models(model, theirs)
