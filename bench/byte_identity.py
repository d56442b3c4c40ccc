"""Byte identity of qconvert's output across a change: sha256 of every corpus model's .tflite.

A refactoring must not change a single output byte. This script converts every model
of every corpus (the QAT corpus, the edge-case variants, the tfmot corpus, the
calibrated float twins under each calibration method, the models in ``models/``) and
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


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _samples_bytes(samples: dict[str, Any]) -> bytes:
    return b"".join(k.encode() + v.tobytes() for k, v in sorted(samples.items()))


Case = tuple[str, bytes, Callable[[], bytes]]


def cases(include_tfmot: bool = True) -> Iterator[Case]:
    """(name, input bytes, convert) for every corpus model; conversion is deferred."""
    for p in (str(FIXTURES), str(TESTS)):
        if p not in sys.path:
            sys.path.insert(0, p)
    import corpus
    import variants

    from qconvert.api import convert_bytes, convert_graph

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
    yield "models/digits_qat", digits, lambda: convert_bytes(digits)
    example = (ROOT / "models" / "example_qat.pb").read_bytes()
    yield "models/example_qat", example, lambda: convert_bytes(example, {"input": (-1.0, 1.0)})
    if include_tfmot:
        import tfmot_corpus

        for m in tfmot_corpus.build_tfmot_corpus():
            yield f"tfmot/{m.name}", m.graph_def, qat(m)


def measure(include_tfmot: bool = True) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for name, data, convert in cases(include_tfmot):
        try:
            result = {"output": hashlib.sha256(convert_bytes()).hexdigest()}
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
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.qconvert_root or ROOT))
    now = measure(not args.no_tfmot)
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
