"""The corpus on devices (issue 18): qconvert's file against TensorFlow's file of the same graph.

Oracles: TFLite Micro's own interpreter (outputs of both files on the same random int8 inputs
must be equal) and Arm's Vela 5.2 (qconvert's file must put as many operators on an Ethos-U55-128
as TensorFlow's does). Skipped without TensorFlow, tflite-micro or ethos-u-vela.
"""

from __future__ import annotations

from pathlib import Path

import corpus  # noqa: E402
import numpy as np
import oracle  # noqa: E402
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow's converter writes the other file")

from qconvert.api import convert_bytes  # noqa: E402


def _files(name: str) -> tuple[bytes, bytes]:
    m = corpus.build_model(name)
    ours = convert_bytes(m.graph_def, input_ranges=dict(m.input_ranges),
                   input_shapes={k: list(v) for k, v in m.shapes.items()}, inputs=list(m.inputs),
                   outputs=list(m.outputs))
    return ours, oracle.tf_convert(m)


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_tflite_micro_gives_tensorflows_outputs(name: str) -> None:
    pytest.importorskip("tflite_micro", reason="TFLite Micro's interpreter is the oracle")
    from qconvert.schema.reader import read_model

    ours, theirs = _files(name)
    model = read_model(ours)
    inputs = [model.tensors[i] for i in model.inputs]
    order = [t.name for t in inputs]
    their_model = read_model(theirs)
    their_order = [their_model.tensors[i].name for i in their_model.inputs]
    rng = np.random.default_rng(0)
    for _ in range(8):
        feeds = {t.name: rng.integers(-128, 128, t.shape).astype(np.int8) for t in inputs}
        a = oracle.tflm_outputs(ours, [feeds[n] for n in order], len(model.outputs))
        b = oracle.tflm_outputs(theirs, [feeds[n] for n in their_order], len(their_model.outputs))
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_vela_places_as_much_on_the_npu_as_for_tensorflows_file(name: str, tmp_path: Path) -> None:
    pytest.importorskip("ethosu.vela", reason="Vela is the oracle")
    from qconvert.tools.check import check_model

    costs = []
    for who, data in zip(("ours", "theirs"), _files(name)):
        path = tmp_path / f"{who}.tflite"
        path.write_bytes(data)
        entry = check_model(str(path), ["ethos-u55-128"], n_inputs=1)["targets"][0]
        assert entry["basis"] == "tool", entry
        costs.append(entry["cost"])
    ours, theirs = costs
    fraction = [c["npu_ops"] / (c["npu_ops"] + c["cpu_ops"]) for c in costs]
    assert fraction[0] >= fraction[1], (ours["ops"], theirs["ops"])
    if fraction[0] < 1:  # every op left to the CPU comes with Vela's reason
        assert all(op["reason"] for op in ours["ops"] if op["placement"] == "cpu"), ours["ops"]
