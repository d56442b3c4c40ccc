"""Edge cases (tests/variants.py) against TensorFlow's converter, in LiteRT.

Each recipe probes one rule: a Pad that TF folds into a SAME conv, a FakeQuant
after a Reshape, activations TF fuses after quantization, Minimum/Maximum clamps,
weights without FakeQuant, and so on. Where TF leaves float ops behind, qconvert
must refuse and name the tensor; where we differ on purpose, we check our own
documented behaviour against hand-derived parameters.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is the oracle for the end-to-end tests")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import oracle  # noqa: E402
import variants  # noqa: E402

from qconvert.api import convert  # noqa: E402
from qconvert.converter.ir import ConversionError  # noqa: E402

ALL = variants.BIT_EXACT + list(variants.TF_LEAVES_FLOAT) + variants.DOUBLE_FAKE_QUANT


def build(name: str) -> corpus.CorpusModel:
    return corpus.build_qat_graph(name, 100 + ALL.index(name), getattr(variants, name))


def ours(m: corpus.CorpusModel) -> bytes:
    return convert(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs)


@pytest.mark.parametrize("name", variants.BIT_EXACT)
def test_variant_matches_tensorflow(name: str) -> None:
    m = build(name)
    theirs = oracle.tf_convert(m)
    assert oracle.float_tensors(theirs) == [], "TF left float ops: not a valid oracle case"
    oracle.compare_models(ours(m), theirs, n_inputs=16, seed=1)


@pytest.mark.parametrize("name", sorted(variants.TF_LEAVES_FLOAT))
def test_variant_tf_leaves_float_and_we_refuse(name: str) -> None:
    m = build(name)
    assert oracle.float_tensors(oracle.tf_convert(m)), "TF quantized it fully after all"
    with pytest.raises(ConversionError, match=r"has no quantization range; add a FakeQuant after") as info:
        ours(m)
    assert variants.TF_LEAVES_FLOAT[name] in str(info.value)


@pytest.mark.parametrize("name", variants.DOUBLE_FAKE_QUANT)
def test_back_to_back_fake_quants_requantize_to_the_second_range(name: str) -> None:
    # Second range, unsigned domain then shifted (hand-derived):
    #   [-0.5, 0.5]: scale 1/255, zero point 0.5*255 = 127.5 -> 128 -> int8 0
    #   [-0.5, 0.7]: scale 1.2/255, zero point 0.5/(1.2/255) = 106.25 -> 106 -> int8 -22
    expected = (np.float32(1 / 255), 0) if name == "v_double_fq" else (np.float32(1.2 / 255), -22)
    flat = ours(build(name))
    details = oracle.io_details(flat)
    assert {d["dtype"] for d in details["inputs"] + details["outputs"]} == {"int8"}
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=flat)
    params = {(np.float32(t["quantization"][0]), int(t["quantization"][1])) for t in it.get_tensor_details()}
    assert expected in params


def test_unknown_batch_becomes_one() -> None:
    from qconvert.converter.graphdef import GraphDef

    m = corpus.build_model(corpus.MODEL_NAMES[0])
    gd = GraphDef.FromString(m.graph_def)
    for node in gd.node:
        if node.op == "Placeholder":
            node.attr["shape"].shape.dim[0].size = -1
    fixed = convert(m.graph_def, m.input_ranges, None, m.inputs, m.outputs)
    unknown = convert(gd.SerializeToString(), m.input_ranges, None, m.inputs, m.outputs)
    assert fixed == unknown
