"""Edge cases (tests/fixtures/variants.py) against TensorFlow's converter, in LiteRT.

Each recipe probes one rule: a Pad that TF folds into a SAME conv, a FakeQuant
after a Reshape, activations TF fuses after quantization, Minimum/Maximum clamps,
weights without FakeQuant, and so on. Where TF leaves float ops behind, qconvert
must refuse and name the tensor; where we differ on purpose, we check our own
documented behaviour against hand-derived parameters.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is the oracle for the end-to-end tests")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import corpus  # noqa: E402
import oracle  # noqa: E402
import variants  # noqa: E402

from qconvert.api import convert_bytes  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402

ALL = variants.BIT_EXACT + list(variants.TF_LEAVES_FLOAT) + variants.DOUBLE_FAKE_QUANT


def build(name: str) -> corpus.CorpusModel:
    return corpus.build_qat_graph(name, 100 + ALL.index(name), getattr(variants, name))


def ours(m: corpus.CorpusModel) -> bytes:
    return convert_bytes(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs)


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
def test_back_to_back_fake_quants_match_tensorflow_and_are_reported(name: str) -> None:
    from qconvert.api import convert_graph

    m = build(name)
    result = convert_graph(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs)
    assert any("two FakeQuants in a row" in n for n in result.notes), result.notes
    oracle.compare_models(result.model, oracle.tf_convert(m), n_inputs=16, seed=1)


def test_unknown_batch_becomes_one() -> None:
    from qconvert.frontend.graphdef import GraphDef

    m = corpus.build_model(corpus.MODEL_NAMES[0])
    gd = GraphDef.FromString(m.graph_def)
    for node in gd.node:
        if node.op == "Placeholder":
            node.attr["shape"].shape.dim[0].size = -1
    fixed = convert_bytes(m.graph_def, m.input_ranges, None, m.inputs, m.outputs)
    unknown = convert_bytes(gd.SerializeToString(), m.input_ranges, None, m.inputs, m.outputs)
    assert fixed == unknown


@pytest.mark.parametrize("name", sorted(variants.TF_LEAVES_FLOAT))
def test_default_ranges_match_tensorflow_default_ranges_stats(name: str, tmp_path) -> None:
    import tensorflow as tf

    from qconvert.api import convert_graph

    m = build(name)
    pb = tmp_path / "m.pb"
    pb.write_bytes(m.graph_def)
    c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(str(pb), m.inputs, m.outputs, m.shapes)
    c.inference_type = tf.int8
    c.quantized_input_stats = {n: (-128 - lo * 255 / (hi - lo), 255 / (hi - lo)) for n, (lo, hi) in m.input_ranges.items()}
    c.default_ranges_stats = (-3.0, 3.0)
    theirs = c.convert()
    assert oracle.float_tensors(theirs) == []
    result = convert_graph(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs, default_ranges=(-3.0, 3.0))
    assert any("--default-ranges -3,3 used for 1 tensor" in n and variants.TF_LEAVES_FLOAT[name] in n for n in result.notes)
    oracle.compare_models(result.model, theirs, n_inputs=16, seed=2)


@pytest.mark.parametrize("name", sorted(variants.TF_LEAVES_FLOAT))
def test_allow_float_matches_tensorflows_float_fallback(name: str) -> None:
    """With --allow-float the ops TF leaves in float stay float here too, reported by name;
    LiteRT runs the model and its outputs equal TF's (which does this silently)."""
    from qconvert.api import convert_graph

    m = build(name)
    result = convert_graph(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs, allow_float=True)
    stays = [n for n in result.notes if "stays float32 (--allow-float)" in n]
    assert stays and any(variants.TF_LEAVES_FLOAT[name] in n for n in stays)
    assert oracle.float_tensors(result.model), "the float part should be in the model"
    oracle.compare_models(result.model, oracle.tf_convert(m), n_inputs=16, seed=4)
