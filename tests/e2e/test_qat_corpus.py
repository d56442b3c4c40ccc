"""End-to-end: qconvert against TensorFlow's own converter, in LiteRT.

Every corpus model (tests/fixtures/corpus.py) is converted twice, by qconvert's library
API and by ``tf.compat.v1.lite.TFLiteConverter`` (tests/fixtures/oracle.py), and both
.tflite files run in LiteRT's reference kernels on the same random int8 inputs.
They must agree on the graph inputs/outputs (dtype, shape, scale, zero point)
and on every output byte.

Differences in op layout that leave the outputs identical are fine here: op
order, tensor names, buffer order and layout, an op TF folds away (e.g. a Pad
merged into a SAME convolution) or keeps. Those are for the structural tests;
this module only judges what a user of the model can observe.

Needs TensorFlow (the oracle) and ai-edge-litert; skips with a reason without
them. The TF conversions are done once per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is the oracle for the end-to-end tests")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import corpus  # noqa: E402
import oracle  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def models() -> dict[str, corpus.CorpusModel]:
    return {m.name: m for m in corpus.build_corpus()}


@pytest.fixture(scope="session")
def tf_models(models: dict[str, corpus.CorpusModel]) -> dict[str, bytes]:
    """TensorFlow's conversion of every corpus model (about 0.1 s each)."""
    return {name: oracle.tf_convert(m) for name, m in models.items()}


@pytest.fixture(scope="session")
def qconvert_convert() -> Callable[..., bytes]:
    api = pytest.importorskip(
        "qconvert.api", reason="qconvert.api (the library API with convert()) is not importable yet"
    )
    if not hasattr(api, "convert_bytes"):
        pytest.fail("qconvert.api has no convert_bytes(model, input_ranges, input_shapes, inputs, outputs)")
    return api.convert_bytes


@pytest.fixture(scope="session")
def our_models(qconvert_convert: Callable[..., bytes]) -> Callable[[corpus.CorpusModel], bytes]:
    """qconvert's conversion of a corpus model, memoized for the session."""
    cache: dict[str, bytes] = {}

    def get(m: corpus.CorpusModel) -> bytes:
        if m.name not in cache:
            cache[m.name] = qconvert_convert(
                m.graph_def,
                input_ranges=dict(m.input_ranges),
                input_shapes={k: list(v) for k, v in m.shapes.items()},
                inputs=list(m.inputs),
                outputs=list(m.outputs),
            )
        return cache[m.name]

    return get


# ---------------------------------------------------------------------------
# The corpus and the oracle themselves
# ---------------------------------------------------------------------------


def test_corpus_covers_required_ops(models: dict[str, corpus.CorpusModel]) -> None:
    assert len(models) >= 10
    covered = frozenset().union(*(m.ops for m in models.values()))
    assert not corpus.REQUIRED_OPS - covered, f"ops not covered: {sorted(corpus.REQUIRED_OPS - covered)}"
    assert any(len(m.inputs) == 2 for m in models.values()), "no model with two inputs"
    assert any(len(m.outputs) == 2 for m in models.values()), "no model with two outputs"


def test_corpus_is_deterministic(models: dict[str, corpus.CorpusModel]) -> None:
    for name, m in models.items():
        again = corpus.build_model.__wrapped__(name)  # bypass the per-process cache
        assert again.graph_def == m.graph_def, f"{name}: GraphDef bytes differ between builds"
        assert again.input_ranges == m.input_ranges


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_tensorflow_output_is_fully_int8(name: str, tf_models: dict[str, bytes]) -> None:
    """The oracle is only an oracle if TF quantized everything: no float32 op I/O."""
    flat = tf_models[name]
    assert oracle.float_tensors(flat) == [], f"TF left float tensors in {name}"
    io = oracle.io_details(flat)
    assert {d["dtype"] for d in io["inputs"] + io["outputs"]} == {"int8"}
    oracle.compare_models(flat, flat, n_inputs=2)  # runs, and agrees with itself


def test_compare_models_catches_a_changed_weight(tf_models: dict[str, bytes]) -> None:
    flat = tf_models["conv_relu_perchannel"]

    def bump_weights(m: Any) -> None:
        sg = m.subgraphs[0]
        conv = sg.operators[0]
        buf = m.buffers[sg.tensors[conv.inputs[1]].buffer]
        w = np.array(buf.data, dtype=np.uint8).view(np.int8)
        w[: w.size // 2] = np.clip(w[: w.size // 2].astype(np.int16) + 9, -127, 127).astype(np.int8)
        buf.data = w.view(np.uint8)

    with pytest.raises(AssertionError, match=r"output 'output': \d+/\d+ elements differ, max \d+ LSB"):
        oracle.compare_models(oracle.repack(flat, bump_weights), flat, n_inputs=2)


def test_compare_models_catches_changed_output_params(tf_models: dict[str, bytes]) -> None:
    flat = tf_models["conv_relu_perchannel"]

    def shift_zero_point(m: Any) -> None:
        sg = m.subgraphs[0]
        sg.tensors[sg.outputs[0]].quantization.zeroPoint[0] += 1

    with pytest.raises(AssertionError, match=r"output 'output' quant"):
        oracle.compare_models(oracle.repack(flat, shift_zero_point), flat, n_inputs=1)


# ---------------------------------------------------------------------------
# qconvert against TensorFlow
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_matches_tensorflow(
    name: str,
    models: dict[str, corpus.CorpusModel],
    tf_models: dict[str, bytes],
    our_models: Callable[[corpus.CorpusModel], bytes],
) -> None:
    """Same graph I/O params and bit-identical int8 outputs on 16 random inputs."""
    ours = our_models(models[name])
    report = oracle.compare_models(ours, tf_models[name], n_inputs=16, seed=0)
    assert report.max_abs_diff == 0


def _ops_and_shapes(tflite: bytes) -> tuple[list, list]:
    from qconvert.schema.reader import read_model

    sg = read_model(tflite).subgraphs[0]
    ops = sorted((o.builtin, o.version, o.options.get("keep_num_dims")) for o in sg.operators)
    shapes = sorted(tuple(sg.tensors[o.inputs[1]].array().tolist()) for o in sg.operators if o.builtin == "RESHAPE")
    return ops, shapes


# models whose operators differ from TF's (none since issue 35: pad_squeeze_reshape's FULLY_CONNECTED keeps
# [1, 1, 1] before the final RESHAPE, as TF's)
_KEEP_NUM_DIMS: set[str] = set()


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_ops_and_reshape_constants_are_tensorflows(
    name: str,
    models: dict[str, corpus.CorpusModel],
    tf_models: dict[str, bytes],
    our_models: Callable[[corpus.CorpusModel], bytes],
) -> None:
    """The same operators (builtin, version, keep_num_dims) and RESHAPE shape constants as TensorFlow's
    file: a RESHAPE keeps the graph's ``-1``; a RESHAPE before a FULLY_CONNECTED that keeps the last
    dimension goes (TensorFlow's optimize pass). Post-training twins too, from the same samples."""
    pairs = [(our_models(models[name]), tf_models[name])]
    f = corpus.build_float_graph(name)
    rng = np.random.default_rng(0)
    samples = {k: rng.uniform(*f.input_ranges[k], [4, *f.shapes[k][1:]]).astype(np.float32) for k in f.inputs}
    from qconvert.api import convert_graph

    pairs.append((convert_graph(f.graph_def, inputs=f.inputs, outputs=f.outputs, calibration_data=samples).model,
                  oracle.tf_ptq_convert(oracle.FloatGraph(f.graph_def, f.inputs, f.outputs, f.shapes), samples)))
    for ours, theirs in pairs:
        a, b = _ops_and_shapes(ours), _ops_and_shapes(theirs)
        if name in _KEEP_NUM_DIMS:
            assert a[1] == b[1] and a[0] != b[0], "fixed? then drop it from _KEEP_NUM_DIMS and docs/differences.md"
            continue
        assert a == b


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_ours_is_fully_int8(
    name: str, models: dict[str, corpus.CorpusModel], our_models: Callable[[corpus.CorpusModel], bytes]
) -> None:
    """Every operator input/output is int8 (activations, weights) or int32 (biases, shapes)."""
    assert oracle.float_tensors(our_models(models[name])) == []


def test_cli_converts_a_model(
    tmp_path: Path,
    models: dict[str, corpus.CorpusModel],
    tf_models: dict[str, bytes],
    qconvert_convert: Callable[..., bytes],
) -> None:
    m = models["conv_relu_perchannel"]
    pb = tmp_path / "model.pb"
    pb.write_bytes(m.graph_def)
    out = tmp_path / "model_int8.tflite"
    (name,) = m.inputs
    lo, hi = m.input_ranges[name]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "qconvert", str(pb), "--inputs-range", f"{name}={lo},{hi}", "-o", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert out.is_file(), "the CLI exited 0 but wrote no output file"
    flat = out.read_bytes()
    assert oracle.io_details(flat)["inputs"][0]["dtype"] == "int8"  # loads in LiteRT
    oracle.compare_models(flat, tf_models[m.name], n_inputs=4)


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_op_versions_match_tensorflow(
    name: str,
    models: dict[str, corpus.CorpusModel],
    tf_models: dict[str, bytes],
    our_models: Callable[[corpus.CorpusModel], bytes],
) -> None:
    """Every op both files contain has the version TF writes for its int8 form.

    Exception: TF folds a Squeeze/Reshape into FULLY_CONNECTED with keep_num_dims,
    which is version 5; we keep the Squeeze and write version 4.
    """
    from qconvert.schema.reader import read_model

    ours, theirs = read_model(our_models(models[name])), read_model(tf_models[name])
    keep_dims_fc = any(op.builtin == "FULLY_CONNECTED" and op.options.get("keep_num_dims")
                       for sg in theirs.subgraphs for op in sg.operators)
    vo = {c.builtin: c.version for c in ours.operator_codes}
    vt = {c.builtin: c.version for c in theirs.operator_codes}
    for op in set(vo) & set(vt):
        if op == "FULLY_CONNECTED" and keep_dims_fc:
            continue
        assert vo[op] == vt[op], f"{op}: version {vo[op]}, TF writes {vt[op]}"
