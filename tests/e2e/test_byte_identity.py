"""Every corpus model converts to the very bytes it converted to before the redesign (issue 14).

``tests/fixtures/byte_identity.json`` holds, per model, the sha256 of its input (GraphDef
bytes, plus calibration samples) and of the .tflite that qconvert wrote at the commit
before the redesign (recorded with ``bench/byte_identity.py --record``; the old code is the
oracle: a refactoring must not change one byte). A model whose input differs from the
recorded one (rebuilt by another TensorFlow or CPU) cannot be compared and is skipped.

An intended change of output re-records only the entries it changes, after the corpus tests
have checked those models against TensorFlow (issue 16: PAD folded into SAME convolutions
changed 5 entries: pad_squeeze_reshape QAT and PTQ, tfmot mobilenet_v1 and v2, v_pad_sym;
a Squeeze written as RESHAPE, RESHAPE chains merged and a TRANSPOSE of unit dimensions written
as RESHAPE, as TensorFlow writes them, changed 4: pad_squeeze_reshape QAT and PTQ, v_mean_keep,
v_transpose_ops; issue 19: DEPTHWISE_CONV_2D's float kernel summing as TFLite's optimized kernel
changed ptq/depthwise/minmax, whose scales now equal TensorFlow's exactly (1.2e-7 off before),
and the fixed, mergeable histogram bins changed the 9 percentile/entropy/mse entries).

Issue 33 (2026-11-25, at f31acb7, before that refactoring) added 228 entries for what came after
the issue 14 record, recorded with ``--record`` from that commit's code and merged in; the 80
entries above are unchanged: 16x8 (``ptq16/``: the float twins under each calibration method;
``qat16/``: 16-bit QAT; ``layer16/``: test_int16.py's one-op graphs), int4 weights (``qat_w4/``:
4-bit QAT, packed and ``int4_storage="int8"``; ``qat_w2/ w3/ w5/ w6/ w7/``; ``ptq_int4/``: post-
training per channel; ``blockwise/``: ``block_size`` 32..256 and a partial block),
``qat/low_bit_act6/8bit``, ``ptq/*/litert_engine``, ``ptq/*/batch8``, ``ptq/*/merged_stats/mse``
(two shards' statistics merged), ``layer/``: test_layer_ops.py's graphs (QAT and PTQ),
``bias_fit/``, ``ptq/keras_batchnorm``, ``ptq/near_tie_weights``, ``custom_ptq/``: the Conv1D,
GRU, LSTM, Rescaling and Normalization models, ``zoo/``: five keras.applications models under PTQ on 2 samples
(MobileNet also in 16x8 and with int4 weights; keras_apps.build is cached per process, so the
PTQ and 16x8 tests reuse these builds), and the tfmot models added since (unet, layers_1d,
layers_2d, dense_bn, resnet50, xception, inception_v3). Graphs a test module builds come from
that module's builder, serialized deterministically. On the machine that recorded them (AVX-512;
OpenBLAS pinned to Haswell as in conftest.py) the 8 older tfmot entries skip: tfmot's training
there gives other GraphDefs than on the machine of the issue 14 record. Then issue 33's ABS added
the five ``layer/abs*`` and ``layer16/ABS`` entries (the commit before refused Abs), recorded
after tests/e2e/test_layer_ops.py and test_int16.py checked them against TensorFlow's files; a
``bench/byte_identity.py --record`` at the commit before issue 33 and ``--check`` after it gave
308 of 313 identical, those five the only difference (their inputs: the same on both sides).

Issue 34 (2026-11-26) re-recorded 34 outputs, inputs unchanged: a RESHAPE keeps the graph's shape
constant (``-1`` included) and a RESHAPE before a FULLY_CONNECTED that keeps the last dimension goes,
as TensorFlow writes both in every mode (tests/e2e/test_qat_corpus.py's
test_ops_and_reshape_constants_are_tensorflows: the QAT and post-training corpora now give TensorFlow's
op lists and shape constants; small_classifier's 20 entries, pad_squeeze_reshape's 4, conv1d's 2,
fq_args_identity_noop, audio_conv1d_prelu, example_qat, tfmot dense_bn and layers_1d, v_fq_after_reshape,
v_mean_keep, v_transpose_ops).

Issue 35's CNN patterns (hard-swish before a convolution, split pieces requantized after the SPLIT, the
squeeze-and-excite RESHAPE before a broadcast; tests/e2e/test_cnn_patterns.py against TensorFlow) changed
no entry: 301 passed, 12 skipped, before and after (no corpus model holds those spellings).

Issue 35's equal constants stored once (tests/e2e/test_shared_constants.py against TensorFlow) re-recorded
6 outputs, inputs unchanged: custom_ptq/gru_unrolled and lstm_unrolled, layer/layer_norm ptq and qat,
tfmot/layers_1d, zoo/MobileNetV3Small. For each, the file of the commit before (705cc23) and the new one
have the same ops, versions, options and every operand's dtype, shape, parameters and bytes, op by op,
and equal outputs in LiteRT REF: only which ops read one constant tensor changed. Against TensorFlow's
files: GRU 139 tensors and 22 constants as TF (167 and 50 before), layer_norm's constants and 15 tensors
as TF's, layers_1d's 43 tensors and its sharing as TF's, MobileNetV3Small's constants and 208 tensors as
TF's given its ranges; the LSTM's 32 constants against TF's 12 are the zero biases TF does not write
(test_custom_ptq.py), 69 before.

Issue 35 also re-recorded 67 outputs when a FULLY_CONNECTED from a MatMul without BiasAdd lost its zero
int32 bias (operand -1, as TensorFlow writes it in int8, 16x8 and uint8: measured; the per-tensor, 16x8
and uint8 tests now compare every constant, zeros included, with TensorFlow's): the files of the commit
before and after were compared op by op (types, shapes, scales, zero points, bytes, options): 4 differ
only by that bias, 63 only in tensor names (a fused bias is now ``…/bias``, was ``…/bias_1``); outputs
equal in LiteRT REF on all but qat_w4/small_classifier (INT4 DEPTHWISE_CONV_2D v7, which REF lacks).

Issue 35's activation moved before a RESHAPE/TRANSPOSE read only by it (TensorFlow's optimize pass;
tests/e2e/test_kcam_patterns.py's test_activation_moves_before_reshape_as_tensorflow_writes_it)
re-recorded 2 outputs, inputs unchanged: layer/expand_dims ptq and qat (``relu(expand_dims(x))``). The
commit before wrote RESHAPE → RELU, the new file RELU → RESHAPE, as TensorFlow's file in both modes
(measured); the RELU and RESHAPE keep their versions, options and dtypes; under post-training
quantization the 2 zero points that differed from TensorFlow's given its ranges now equal them (0 of 4
differ), outputs 0 LSB apart as before.

Issue 35's FULLY_CONNECTED that keeps its input's leading dimensions before a RESHAPE (RESHAPE chains
merged first; TensorFlow's file in every mode, measured) re-recorded 5 outputs, inputs unchanged:
layer/dense_3d/ptq, and pad_squeeze_reshape's qat, ptq/minmax, ptq16/minmax and ptq_int4/minmax. Op by
op (old file of 3a14dd5, new): the same weights and biases, scales and zero points; dense_3d's RESHAPE
[1,4,4,3] → [1,16,3] → FULLY_CONNECTED v5 keep_num_dims became FULLY_CONNECTED v5 keep_num_dims on
[1,4,4,3] → [1,4,4,5] → RESHAPE [1,16,5], as TensorFlow's file; pad_squeeze_reshape's FULLY_CONNECTED
[1,1,1,8] → [1,12] without keep_num_dims (v4; v10 with int4 weights) became [1,1,1,8] → [1,1,1,12] with
keep_num_dims (v5; v10), TensorFlow's (the documented difference is gone: test_qat_corpus,
test_int16, test_uint8_model and test_dynamic_range now compare it as equal); outputs 0 LSB apart in
LiteRT REF on 16 random inputs each.

Issue 36 made the LiteRT calibration engine the default (``--calibration-engine auto``: LiteRT where it
runs the float graph, else numpy) and re-recorded 60 outputs, inputs unchanged: every calibrated entry
whose ranges LiteRT's XNNPACK kernels give otherwise in the last float32 bits. Each new file against the
same entry converted with ``--calibration-engine numpy``: the same operators and versions, tensors,
weights and zero points; scales within 7.6e-7 relative (1-6 float32 ulps) on the 55 corpus, one-op and
custom entries, outputs 0 LSB apart on 47 and 1 LSB on 8 (4 random inputs over the whole integer range,
LiteRT REF), a 16x8 or int8 bias vector shifted with its scale on 4; on the 5 keras.applications
entries (MobileNet minmax/int16/int4, MobileNetV3Small, DenseNet121) scales within 9.7e-6, 8-35 bias
vectors shifted, outputs up to 4 (MobileNetV3Small), 18-36 (MobileNet int8/int4), 83 (DenseNet121) and
118 (MobileNet 16x8) LSB apart on those random full-range inputs: roundings flipped by last-bit scale
changes compound through deep nets (neither engine reproduces TensorFlow's own ranges to the last bit
there: they depend on its thread count, docs/differences.md).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((ROOT / "tests" / "fixtures" / "byte_identity.json").read_text())
sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="session")
def cases() -> dict:
    pytest.importorskip("tensorflow", reason="the corpora are built with TensorFlow")
    import byte_identity

    return {name: (data, convert) for name, data, convert in byte_identity.cases()}


@pytest.mark.parametrize("name", sorted(RECORD))
def test_output_bytes_unchanged(name: str, cases: dict) -> None:
    rec = RECORD[name]
    if name not in cases:
        pytest.skip(f"{name}: no longer in the corpora")
    data, convert = cases[name]
    if hashlib.sha256(data).hexdigest() != rec["input"]:
        pytest.skip(f"{name}: the model built here differs from the recorded one; bytes are not comparable")
    try:
        now = {"output": hashlib.sha256(convert()).hexdigest()}
    except Exception as exc:  # noqa: BLE001  a recorded failure must still fail the same way
        now = {"error": f"{type(exc).__name__}: {exc}"}
    assert {k: v for k, v in rec.items() if k != "input"} == now
