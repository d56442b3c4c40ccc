"""The tfmot corpus (tests/fixtures/tfmot_corpus.py): Keras 2 + tfmot QAT graphs, and TF's converter on them.

Checks that every model builds (or loads from the disk cache), that its frozen
GraphDef is what the metadata says (placeholder, output node, op types), that
TensorFlow's own converter turns it into a fully-int8 .tflite, and that a
rebuild from scratch gives the same bytes. qconvert itself is not tested here.

The first run trains every model (a few minutes on 2 cores, see
``tfmot_corpus.py``); later runs load them from ``$QCONVERT_TEST_CACHE`` or
``~/.cache/qconvert-tests``. Run with ``-s`` to see the op types per model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow builds the tfmot models and is the oracle")
pytest.importorskip("tf_keras", reason="tfmot 0.8 needs Keras 2 (pip install tf-keras)")
pytest.importorskip(
    "tensorflow_model_optimization",
    reason="tensorflow-model-optimization makes the QAT models (pip install tensorflow-model-optimization)",
)
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert reads the converted models")

import corpus  # noqa: E402
import oracle  # noqa: E402
import tfmot_corpus  # noqa: E402

# TF op types the tfmot corpus as a whole must contain: the patterns real
# Keras/tfmot graphs have and the hand-made corpus does not (BatchNorm left in
# the graph, dilated convs as SpaceToBatchND/BatchToSpaceND, Pack/StridedSlice
# computing a Reshape's shape) plus the common ones.
REQUIRED_TFMOT_OPS = frozenset({
    "Placeholder", "Const", "Identity", "NoOp", "Conv2D", "DepthwiseConv2dNative", "MatMul",
    "BiasAdd", "AddV2", "Relu", "Relu6", "MaxPool", "Mean", "Reshape", "Pad", "Softmax",
    "FusedBatchNormV3", "SpaceToBatchND", "BatchToSpaceND", "Pack", "StridedSlice",
    "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
})


def _graph_def(m: corpus.CorpusModel):  # -> GraphDef
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.ParseFromString(m.graph_def)
    return gd


@pytest.fixture(scope="module")
def tf_flat() -> dict[str, bytes]:
    """TF's int8 conversion per model name, filled lazily."""
    return {}


def _tf_convert(name: str, cache: dict[str, bytes]) -> bytes:
    if name not in cache:
        cache[name] = oracle.tf_convert(tfmot_corpus.build_tfmot_model(name))
    return cache[name]


@pytest.mark.parametrize("name", tfmot_corpus.TFMOT_MODEL_NAMES)
def test_model_builds(name: str, record_property) -> None:
    m = tfmot_corpus.build_tfmot_model(name)
    gd = _graph_def(m)
    nodes = {n.name: n for n in gd.node}
    assert m.name == name
    assert m.inputs == ["input"]
    assert nodes["input"].op == "Placeholder"
    assert m.shapes["input"][0] == 1, "frozen with batch size 1"
    assert m.input_ranges == {"input": tfmot_corpus.INPUT_RANGE}
    assert len(m.outputs) == 1 and m.outputs[0] in nodes
    # the output is the graph's sink: nothing consumes it
    consumed = {i.lstrip("^").split(":")[0] for n in gd.node for i in n.input}
    assert m.outputs[0] not in consumed
    ops = frozenset(n.op for n in gd.node)
    assert ops == m.ops
    assert "FakeQuantWithMinMaxVars" in ops
    assert not {"VarHandleOp", "ReadVariableOp", "Variable", "VariableV2"} & ops, "not frozen"
    assert len(gd.library.function) == 0, "frozen graph still has functions"
    meta = tfmot_corpus.load_meta(name)
    record_property("tf_ops", sorted(ops))
    record_property("build_seconds", meta["build_seconds"])
    print(f"\n{name}: {len(m.graph_def)} B, built in {meta['build_seconds']} s "
          f"({meta['train_steps']} steps, batch {meta['batch_size']}); TF ops: {sorted(ops)}")


@pytest.mark.parametrize("name", tfmot_corpus.TFMOT_MODEL_NAMES)
def test_tensorflow_converts_to_full_int8(name: str, tf_flat: dict[str, bytes], record_property) -> None:
    """The oracle only counts if TF quantized everything: no float32 op I/O (and the models
    listed as TF_LEAVES_FLOAT still have float tensors: the list is measured, not assumed)."""
    flat = _tf_convert(name, tf_flat)
    if name in tfmot_corpus.TF_LEAVES_FLOAT:
        assert oracle.float_tensors(flat), f"TF now quantizes all of {name}: move it out of TF_LEAVES_FLOAT"
        return
    assert oracle.float_tensors(flat) == [], f"TF left float tensors in {name}"
    io = oracle.io_details(flat)
    assert {d["dtype"] for d in io["inputs"] + io["outputs"]} == {"int8"}
    assert io["inputs"][0]["shape"] == tfmot_corpus.build_tfmot_model(name).shapes["input"]
    oracle.compare_models(flat, flat, n_inputs=2)  # it runs in LiteRT
    tfl_ops = oracle.op_names(flat)
    assert "DEQUANTIZE" not in tfl_ops
    record_property("tflite_ops", tfl_ops)
    print(f"\n{name}: TFLite ops {sorted(set(tfl_ops))}")


def test_corpus_covers_required_ops() -> None:
    covered = frozenset().union(*(m.ops for m in tfmot_corpus.build_tfmot_corpus()))
    missing = REQUIRED_TFMOT_OPS - covered
    assert not missing, f"ops not covered: {sorted(missing)}"


def test_cache_holds_the_model() -> None:
    """The model in use is the one on disk (the cache is the source of truth within a run)."""
    name = "mlp"
    m = tfmot_corpus.build_tfmot_model(name)
    stem = tfmot_corpus._cache_key(name)
    assert (tfmot_corpus.cache_dir() / f"{stem}.pb").read_bytes() == m.graph_def


def test_build_is_deterministic() -> None:
    """Rebuilding a model from scratch in a fresh process gives the same GraphDef bytes.

    Only the two small models, to keep this cheap; ``python tests/fixtures/tfmot_corpus.py
    --check-determinism`` checks all of them.
    """
    for name in ("mlp", "conv_bn_gap_head"):
        cached = tfmot_corpus.build_tfmot_model(name)
        with tempfile.TemporaryDirectory(prefix="qconvert-tfmot-") as tmp:
            again, meta = tfmot_corpus.build_in_subprocess(name, Path(tmp))
        assert again == cached.graph_def, f"{name}: GraphDef bytes differ between builds"
        assert meta["outputs"] == cached.outputs
