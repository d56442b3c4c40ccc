"""Byte identity of qconvert's output across a change: sha256 of every corpus model's .tflite.

A refactoring must not change a single output byte. This script converts every model
of every corpus (the QAT corpus, the edge-case variants, the tfmot corpus, the
calibrated float twins under each calibration method, the models in ``models/``; since
issue 33 also 16x8, int4 and blockwise conversions, the one-op graphs of the e2e tests, the
custom tf_keras models and keras.applications models under PTQ: ``_since_issue_14``) and
records, per model, the sha256 of the input (the GraphDef bytes, plus the calibration
samples) and of the output .tflite.

    python bench/byte_identity.py --record before.json --qconvert-root /tmp/old-checkout
    python bench/byte_identity.py --check before.json

``--qconvert-root`` imports qconvert from another checkout (for example a
``git worktree`` of the commit before a change), while the corpora are always built by
this checkout's tests/ code, so both sides convert the very same inputs. ``--check``
compares outputs for every model whose input hash matches the record; a model whose
input differs (rebuilt by another TensorFlow or CPU) is listed as not comparable.
tests/e2e/test_byte_identity.py checks against tests/fixtures/byte_identity.json, which
was recorded this way at the commit before the redesign (issue 14).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
# The suite's BLAS kernels (tests/conftest.py): calibration's last bits depend on them, and
# tests/fixtures/byte_identity.json was recorded with them. Set before NumPy loads OpenBLAS.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _samples_bytes(samples: dict[str, Any]) -> bytes:
    return b"".join(k.encode() + v.tobytes() for k, v in sorted(samples.items()))


Case = tuple[str, bytes, Callable[[], bytes]]


def cases(include_tfmot: bool = True, include_zoo: bool = True) -> Iterator[Case]:
    """(name, input bytes, convert) for every corpus model; conversion is deferred."""
    for p in (str(FIXTURES), str(TESTS)):
        if p not in sys.path:
            sys.path.insert(0, p)
    import corpus
    import variants

    from qconvert.api import convert_graph  # the 0.1 keyword form: the same call before and after a change

    def qat(m: Any, **kw: Any) -> Callable[[], bytes]:
        return lambda: convert_graph(m.graph_def, dict(m.input_ranges), {k: list(v) for k, v in m.shapes.items()},
                                     list(m.inputs), list(m.outputs), **kw).model

    for m in corpus.build_corpus():
        yield f"qat/{m.name}", m.graph_def, qat(m)
    every = variants.BIT_EXACT + list(variants.TF_LEAVES_FLOAT) + variants.DOUBLE_FAKE_QUANT
    for name in every:
        m = corpus.build_qat_graph(name, 100 + every.index(name), getattr(variants, name))
        if name in variants.TF_LEAVES_FLOAT:
            yield f"variant/{name}/allow_float", m.graph_def, qat(m, allow_float=True)
            yield f"variant/{name}/default_ranges", m.graph_def, qat(m, default_ranges=(-3.0, 3.0))
        else:
            yield f"variant/{name}", m.graph_def, qat(m)
    import numpy as np

    ptq = ["conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual", "two_inputs_arith",
           "concat_branches", "pad_squeeze_reshape", "sigmoid_tanh_two_outputs", "small_classifier",
           "mean_keepdims_mul", "requantize"]
    for name in ptq:
        m = corpus.build_float_graph(name)
        rng = np.random.default_rng(0)
        samples = {k: rng.uniform(*m.input_ranges[k], size=[32, *m.shapes[k][1:]]).astype(np.float32)
                   for k in m.inputs}
        data = m.graph_def + _samples_bytes(samples)
        for method in ("minmax", "percentile", "entropy", "mse"):
            if method != "minmax" and name not in ("residual", "concat_branches", "small_classifier"):
                continue
            yield (f"ptq/{name}/{method}", data,
                   (lambda m=m, s=samples, meth=method: convert_graph(
                       m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=s,
                       calibration_method=meth).model))
    digits = (ROOT / "models" / "digits_qat.pb").read_bytes()
    yield "models/digits_qat", digits, lambda: convert_graph(digits).model
    example = (ROOT / "models" / "example_qat.pb").read_bytes()
    yield "models/example_qat", example, lambda: convert_graph(example, {"input": (-1.0, 1.0)}).model
    if include_tfmot:
        import tfmot_corpus

        for m in tfmot_corpus.build_tfmot_corpus():
            yield f"tfmot/{m.name}", m.graph_def, qat(m)
    yield from _since_issue_14(qat, include_zoo)


# keras.applications models (tests/fixtures/keras_apps.py, built once per process) under
# post-training quantization, on ZOO_SAMPLES samples: of those the suite builds anyway
# (tests/e2e/test_keras_apps_ptq.py, MobileNet in test_int16.py), the quicker to build (4 s to
# 15 s each on 2 cores; GraphDefs of 4 MB to 29 MB). VGG16, ResNet50, ResNet50V2 and
# ConvNeXtTiny (59 MB to 112 MB, 9 s to 25 s) are left out: running this test alone builds these.
ZOO = ["MobileNet", "MobileNetV3Small", "EfficientNetB0", "RegNetX002", "DenseNet121"]
ZOO_SAMPLES = 2


def _canonical(graph_def: bytes) -> bytes:
    """A GraphDef built by a test module, serialized deterministically: TensorFlow writes its
    attribute maps in an order that differs from process to process (same graph, other bytes)."""
    import tensorflow as tf

    return tf.compat.v1.GraphDef.FromString(graph_def).SerializeToString(deterministic=True)


def _uniform(m: Any, n: int, seed: int = 0) -> dict[str, Any]:
    """``n`` samples per input, uniform over the input's range (the corpora's recipe)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {k: rng.uniform(*m.input_ranges[k], size=[n, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}


def _since_issue_14(qat: Callable[..., Callable[[], bytes]], include_zoo: bool) -> Iterator[Case]:
    """The modes and corpora added after the record of issue 14, recorded for issue 33: 16x8
    (post-training and 16-bit QAT), int4 weights (QAT per channel, packed or stored as int8;
    other QAT widths; post-training per channel; blockwise), 6-bit activations at 8-bit
    resolution, another calibration engine, batch and merged statistics, the one-op graphs of
    test_layer_ops.py and test_int16.py, the bias-fit, BatchNorm and near-tie graphs, the
    custom post-training models and the keras.applications zoo. Graphs built by a test module
    come from that module's own builder."""
    e2e = str(TESTS / "e2e")
    if e2e not in sys.path:
        sys.path.insert(0, e2e)
    import corpus
    import numpy as np

    from qconvert.api import convert_graph

    def ptq(graph_def: bytes, inputs: list[str], outputs: list[str], samples: dict[str, Any],
            **kw: Any) -> Callable[[], bytes]:
        return lambda: convert_graph(graph_def, inputs=inputs, outputs=outputs, calibration_data=samples,
                                     **kw).model

    # the float twins of the QAT corpus, with the samples of the ptq/ entries above; 16x8 under
    # each calibration method (entropy, the slowest, on one model)
    methods16 = {"residual": ("percentile", "mse"), "small_classifier": ("percentile", "mse"),
                 "concat_branches": ("percentile", "entropy", "mse")}
    for name in ("conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual", "two_inputs_arith",
                 "concat_branches", "pad_squeeze_reshape", "sigmoid_tanh_two_outputs", "small_classifier",
                 "mean_keepdims_mul", "requantize"):
        m = corpus.build_float_graph(name)
        samples = _uniform(m, 32)
        data = m.graph_def + _samples_bytes(samples)
        for method in ("minmax", *methods16.get(name, ())):
            yield (f"ptq16/{name}/{method}", data,
                   ptq(m.graph_def, m.inputs, m.outputs, samples, calibration_method=method, activations="int16"))
        yield f"ptq_int4/{name}/minmax", data, ptq(m.graph_def, m.inputs, m.outputs, samples, weights="int4")
        if name in ("residual", "small_classifier"):
            yield (f"ptq/{name}/litert_engine", data,
                   ptq(m.graph_def, m.inputs, m.outputs, samples, calibration_engine="litert"))
            yield (f"ptq/{name}/batch8", data,
                   ptq(m.graph_def, m.inputs, m.outputs, samples, calibration_batch=8))
            yield f"ptq/{name}/merged_stats/mse", data, _merged_stats(m, samples, "mse")

    # QAT corpus graphs with 16-bit activation FakeQuants (test_int16.py), with 4-bit weight
    # FakeQuants (packed INT4, or stored as int8) and with the other weight widths (test_low_bit.py)
    for name in ("conv_relu_perchannel", "depthwise", "residual", "concat_branches", "small_classifier",
                 "sigmoid_tanh_two_outputs", "two_inputs_arith", "mean_keepdims_mul"):
        seed, fn = corpus._BUILDERS[name]
        m = corpus.build_qat_graph(name, seed, fn, act_bits=16)
        yield f"qat16/{name}", m.graph_def, qat(m)
    for name in ("conv_relu_perchannel", "depthwise", "small_classifier", "residual"):
        seed, fn = corpus._BUILDERS[name]
        m = corpus.build_qat_graph(name, seed, fn, weight_bits=4)
        yield f"qat_w4/{name}", m.graph_def, qat(m)
        yield f"qat_w4/{name}/int8_storage", m.graph_def, qat(m, int4_storage="int8")
    seed, fn = corpus._BUILDERS["small_classifier"]
    for bits in (2, 3, 5, 6, 7):
        m = corpus.build_qat_graph("small_classifier", seed, fn, weight_bits=bits)
        yield f"qat_w{bits}/small_classifier", m.graph_def, qat(m)
    import test_low_bit

    m = test_low_bit._low_bit_activation_graph(6)
    yield "qat/low_bit_act6/8bit", m.graph_def, qat(m, low_bit_activations="8bit")

    # blockwise int4 (float activations, no calibration): test_blockwise.py's MLPs
    import test_blockwise

    mlp = _canonical(test_blockwise._mlp())
    for block in (32, 64, 128, 256):
        yield (f"blockwise/mlp/{block}", mlp,
               lambda b=block: convert_graph(mlp, weights="int4", block_size=b).model)
    partial = _canonical(test_blockwise._mlp((100, 64, 10)))
    yield "blockwise/mlp_partial/32", partial, lambda: convert_graph(partial, weights="int4", block_size=32).model

    # one graph per Keras layer op (test_layer_ops.py): QAT and post-training
    import test_layer_ops as lo

    x = {"input": np.random.default_rng(7).uniform(-1, 1, (32, *lo.SHAPE[1:])).astype(np.float32)}
    for name in sorted(lo.BUILDERS):
        if name not in lo.PTQ_ONLY:
            pb = _canonical(lo._graph(name, qat=True))
            yield (f"layer/{name}/qat", pb,
                   lambda pb=pb: convert_graph(pb, {"input": (-1.0, 1.0)}, inputs=["input"], outputs=["out"]).model)
        pb = _canonical(lo._graph(name, qat=False))
        yield f"layer/{name}/ptq", pb + _samples_bytes(x), ptq(pb, ["input"], ["out"], x)
    # one op per graph in 16x8 (test_int16.py)
    import test_int16

    x = {"input": np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 4)).astype(np.float32)}
    for op in sorted(test_int16.ONE_OP):
        pb = _canonical(test_int16._one_op(test_int16.ONE_OP[op]))
        yield f"layer16/{op}", pb + _samples_bytes(x), ptq(pb, ["input"], ["output"], x, activations="int16")

    # biases that do not fit int32 (test_bias_fit.py), Keras' BatchNorm arithmetic with dead and
    # large-bias channels (test_keras_batchnorm.py), weights on near-ties (test_ptq_weights.py)
    import test_bias_fit as bf

    for dense in (False, True):
        kind = "dense" if dense else "conv"
        for bias, what in ((bf.DEAD, "dead_channel"), (bf.LARGE, "large_bias")):
            pb = _canonical(bf._graph(True, dense, bias, weight_fq=False)[0])
            yield (f"bias_fit/qat/{kind}/{what}", pb,
                   lambda pb=pb: convert_graph(pb, inputs=["input"], outputs=["out"]).model)
            pb, shape = bf._graph(False, dense, bias, weight_fq=False)
            pb = _canonical(pb)
            x = {"input": bf._samples(shape)[:, 0]}
            yield f"bias_fit/ptq/{kind}/{what}", pb + _samples_bytes(x), ptq(pb, ["input"], ["out"], x)
        pb = _canonical(bf._graph(True, dense, bf.DEAD, weight_fq=True)[0])
        yield (f"bias_fit/qat/{kind}/dead_fake_quant_channel", pb,
               lambda pb=pb: convert_graph(pb, inputs=["input"], outputs=["out"]).model)
    import test_keras_batchnorm
    import test_ptq_weights

    pb = _canonical(test_keras_batchnorm._graph())
    x = {"input": np.random.default_rng(2).uniform(-1, 1, (32, 8, 8, 3)).astype(np.float32)}
    yield "ptq/keras_batchnorm/minmax", pb + _samples_bytes(x), ptq(pb, ["input"], ["out"], x)
    pb = _canonical(test_ptq_weights._graph()[0])
    x = {"input": np.random.default_rng(6).uniform(-1, 1, (8, *test_ptq_weights.SHAPE[1:])).astype(np.float32)}
    yield "ptq/near_tie_weights/minmax", pb + _samples_bytes(x), ptq(pb, ["input"], ["out"], x)

    if not include_zoo:
        return
    # tf_keras models no keras.applications architecture covers (test_custom_ptq.py)
    import test_custom_ptq

    for name in sorted(test_custom_ptq.MODELS):
        pb, _, x16 = test_custom_ptq._build(name)
        pb = _canonical(pb)
        x = {"input": x16}
        yield f"custom_ptq/{name}/minmax", pb + _samples_bytes(x), ptq(pb, ["input"], ["Identity"], x)
    import keras_apps

    for name in ZOO:
        pb, shape = keras_apps.build(name)  # cached: the tests that build it get the same bytes
        pb = _canonical(pb)
        x = {"input": np.random.default_rng(1).uniform(-1, 1, (ZOO_SAMPLES, *shape[1:])).astype(np.float32)}
        data = pb + _samples_bytes(x)
        yield f"zoo/{name}/minmax", data, ptq(pb, ["input"], ["Identity"], x)
        if name == "MobileNet":  # 16x8 (as in test_int16.py) and int4 weights on one of them
            yield f"zoo/{name}/int16", data, ptq(pb, ["input"], ["Identity"], x, activations="int16")
            yield f"zoo/{name}/int4", data, ptq(pb, ["input"], ["Identity"], x, weights="int4")


def _merged_stats(m: Any, samples: dict[str, Any], method: str) -> Callable[[], bytes]:
    """Statistics of two shards of the samples saved with histograms, then merged for ``method``."""
    from qconvert.api import convert_graph

    def convert() -> bytes:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="qconvert-bytes-") as tmp:
            files = []
            for k, part in enumerate((slice(0, 16), slice(16, None))):
                files.append(os.path.join(tmp, f"s{k}.npz"))
                convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs,
                              calibration_data={n: a[part] for n, a in samples.items()},
                              save_stats=files[-1], histograms=True, stop_before="prepare")
            return convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, stats=files,
                                 calibration_method=method).model

    return convert


def measure(include_tfmot: bool = True, include_zoo: bool = True) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for name, data, convert in cases(include_tfmot, include_zoo):
        try:
            result = {"output": hashlib.sha256(convert()).hexdigest()}
        except Exception as exc:  # noqa: BLE001  a failure is recorded as what it said
            result = {"error": f"{type(exc).__name__}: {exc}"}
        out[name] = {"input": hashlib.sha256(data).hexdigest(), **result}
        print(f"{name:55s} {result.get('output', result.get('error'))[:64]}", flush=True)
    return out


def compare(record: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> tuple[int, list[str], list[str]]:
    """(identical count, differing names, not comparable names)."""
    same, differ, skipped = 0, [], []
    for name, rec in record.items():
        cur = now.get(name)
        if cur is None or cur["input"] != rec["input"]:
            skipped.append(name)
        elif cur == rec:
            same += 1
        else:
            differ.append(name)
    return same, differ, skipped


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--record", metavar="FILE", help="write the sha256 of every model's input and output")
    g.add_argument("--check", metavar="FILE", help="convert again and compare with a record")
    p.add_argument("--qconvert-root", help="import qconvert from this checkout instead of this one")
    p.add_argument("--no-tfmot", action="store_true", help="skip the tfmot corpus (slow to build the first time)")
    p.add_argument("--no-zoo", action="store_true", help="skip the keras.applications and custom tf_keras models")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.qconvert_root or ROOT))
    now = measure(not args.no_tfmot, not args.no_zoo)
    if args.record:
        Path(args.record).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(now)} models in {args.record}")
        return 0
    same, differ, skipped = compare(json.loads(Path(args.check).read_text()), now)
    print(f"{same} identical, {len(differ)} different, {len(skipped)} not comparable (input differs or absent)")
    for name in differ:
        print(f"DIFFERENT {name}")
    for name in skipped:
        print(f"not comparable {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
