"""Float .tflite files from other producers, full int8: qconvert against the LiteRT Quantizer.

    python bench/producers.py [--samples 64] [--held-out 32] [--calibration-engine numpy|litert] [--only NAME ...]

Run it in an environment with what it compares (none of it is a qconvert dependency):
``litert-quantizer`` (formerly ``ai-edge-quantizer``), ``torch`` + ``litert-torch`` for the PyTorch
models, ``jax`` + ``tensorflow`` for ``experimental_from_jax``; a producer or tool that is not
installed is skipped with a line. The models: bench/producer_models.py's (a torchvision-style CNN
and a one-layer transformer through litert-torch, a small CNN through JAX, plus the bench-only
variants with ops qconvert refuses) and the float files other people wrote in
``../shared/realmodels``.

For each file, both tools get the same calibration samples (uniform in [-1, 1], fixed seed: the
real files' own data is not available here) and quantize it fully int8 with int8 per-tensor
activations and int8 per-channel weights: qconvert with its defaults, the LiteRT Quantizer with
its static recipe (``recipe.static_wi8_ai8()``: activations asymmetric per tensor, weights
symmetric per channel, min/max). A file without a signature gets one (``serving_default``, the
subgraph's inputs and outputs) for the LiteRT Quantizer, which calibrates through signature
runners. Printed per file: whether each result is fully int8 (ops left float are counted),
the mean absolute error of its (dequantized) outputs against the float file's on held-out
samples (another seed), all run in LiteRT's reference kernels, and each tool's wall time in
this process (calibration included; imports and the first call's set-up not).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REAL = HERE.parents[1] / "shared" / "realmodels"

# float files written by other people (../shared/realmodels/README.md), each with its own producer
REAL_FILES = [
    ("TF1 converter (MLPerf Tiny)", "mlcommons_tiny/ad01_fp32.tflite"),
    ("TF1 converter (MLPerf Tiny)", "mlcommons_tiny/kws_ref_model_float32.tflite"),
    ("TF1 converter (MLPerf Tiny)", "mlcommons_tiny/pretrainedResnet.tflite"),
    ("TF1 converter (MLPerf Tiny)", "mlcommons_tiny/pretrainedResnet_large_float.tflite"),
    ("TF1 converter (MLPerf Tiny)", "mlcommons_tiny/vww_96_float.tflite"),
    ("TF converter, int8 weights (MLPerf Tiny)", "mlcommons_tiny/ToyCar_model_ToyCar_quant.tflite"),
    ("TF converter (TFLite Micro)", "tflite_micro/hello_world_float.tflite"),
    ("TF converter (TFLite Micro)", "tflite_micro/magic_wand.tflite"),
    ("TF converter (TFLite Micro)", "tflite_micro/trained_lstm.tflite"),
    ("TF converter (TFLite Micro)", "tflite_micro/dp_net.tflite"),
]
# files whose samples are uniform in [-a, a] instead: dp_net's softplus log(1 + exp(z)) overflows in
# float32 on [-1, 1] (z reaches 645 there: the float file's outputs are inf) and on [-0.1, 0.1] (115);
# on [-0.01, 0.01] z stays below 12 (64 samples)
AMPLITUDE = {"tflite_micro/dp_net.tflite": 0.01}


def _schema():  # type: ignore[no-untyped-def]
    from ai_edge_litert import schema_py_generated as schema

    return schema


def with_signature(tflite: bytes) -> bytes:
    """The file with a ``serving_default`` signature over subgraph 0's inputs and outputs, when it has none."""
    import flatbuffers

    schema = _schema()
    m = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    if m.signatureDefs:
        return tflite
    sg = m.subgraphs[0]

    def maps(indices):  # type: ignore[no-untyped-def]
        out = []
        for i in indices:
            t = schema.TensorMapT()
            name = sg.tensors[i].name
            t.name, t.tensorIndex = (name.decode() if isinstance(name, bytes) else name), int(i)
            out.append(t)
        return out

    sig = schema.SignatureDefT()
    sig.inputs, sig.outputs, sig.signatureKey, sig.subgraphIndex = maps(sg.inputs), maps(sg.outputs), "serving_default", 0
    m.signatureDefs = [sig]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _interpreter(tflite: bytes) -> Any:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=bytes(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


def run(tflite: bytes, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs (float; int8 ones dequantized) for float inputs ``xs`` (quantized when the file wants int8)."""
    it = _interpreter(tflite)
    for d, x in zip(it.get_input_details(), xs):
        if d["dtype"] != np.float32:
            s, z = d["quantization"]
            info = np.iinfo(d["dtype"])
            x = np.clip(np.round(x / s + z), info.min, info.max).astype(d["dtype"])
        it.set_tensor(d["index"], x)
    it.invoke()
    outs = []
    for d in it.get_output_details():
        y = it.get_tensor(d["index"])
        if d["dtype"] != np.float32:
            s, z = d["quantization"]
            y = (y.astype(np.float64) - z) * s
        outs.append(np.asarray(y, np.float64))
    return outs


def error(quant: bytes, flt: bytes, held_out: list[list[np.ndarray]]) -> float:
    """Mean |quantized output - float output| over the held-out samples and every output."""
    errs = []
    for xs in held_out:
        for y, w in zip(run(quant, xs), run(flt, xs)):
            errs.append(float(np.mean(np.abs(y - w))))
    return float(np.mean(errs))


def float_ops(tflite: bytes) -> list[str]:
    """Ops that compute in float32 (not QUANTIZE/DEQUANTIZE at the edges of the file)."""
    from qconvert.schema.reader import read_model

    m = read_model(tflite)
    out = []
    for op in m.operators:
        if op.builtin in ("QUANTIZE", "DEQUANTIZE"):
            continue
        tensors = [m.tensors[i] for i in list(op.inputs) + list(op.outputs) if i >= 0]
        if any(t.dtype == "float32" and t.data is None for t in tensors):
            out.append(op.builtin)
    return out


def samples(tflite: bytes, n: int, seed: int, amplitude: float = 1.0) -> list[list[np.ndarray]]:
    """``n`` samples, each one array per input (uniform in [-amplitude, amplitude])."""
    it = _interpreter(tflite)
    rng = np.random.default_rng(seed)
    a = amplitude
    return [[rng.uniform(-a, a, d["shape"]).astype(np.float32) for d in it.get_input_details()] for _ in range(n)]


def ours(flt: bytes, calib: list[list[np.ndarray]], engine: str | None) -> bytes:
    from qconvert.api import convert_graph
    from qconvert.schema.reader import read_model

    m = read_model(flt)
    names = [m.tensors[i].name for i in m.inputs]
    data = {n: np.concatenate([xs[k] for xs in calib]) for k, n in enumerate(names)}
    kw = {"calibration_engine": engine} if engine else {}
    return convert_graph(flt, calibration_data=data, **kw).model


def litert_quantizer() -> tuple[Any, str] | None:
    """(module with Quantizer and recipe, description) or None."""
    for pkg in ("litert_quantizer", "ai_edge_quantizer"):
        try:
            mod = __import__(pkg, fromlist=["quantizer", "recipe"])
            from importlib.metadata import version

            return mod, f"{pkg.replace('_', '-')} {version(pkg.replace('_', '-'))}"
        except Exception:  # noqa: BLE001, S112 (the next name)
            continue
    return None


def theirs(lq: Any, flt: bytes, calib: list[list[np.ndarray]]) -> bytes:
    signed = with_signature(flt)
    it = _interpreter(signed)
    key = next(iter(it.get_signature_list()))
    runner = it.get_signature_runner(key)
    names = list(runner.get_input_details())  # in the subgraph's input order
    by_index = {d["index"]: n for n, d in runner.get_input_details().items()}
    order = [by_index[d["index"]] for d in it.get_input_details()] if len(by_index) == len(names) else names
    q = lq.quantizer.Quantizer(bytearray(signed))
    q.load_quantization_recipe(lq.recipe.static_wi8_ai8())
    result = q.calibrate({key: [dict(zip(order, xs)) for xs in calib]})
    return bytes(q.quantize(result, enable_progress_report=False).quantized_model)


def models(only: list[str]) -> list[tuple[str, str, bytes]]:
    import producer_models as pm

    out: list[tuple[str, str, bytes]] = []
    for producer, missing, build in pm.BUILDERS:
        why = missing()
        if why:
            print(f"skipped {producer}: not installed ({why})", flush=True)
            continue
        for name, data in build(True).items():
            out.append((producer, name, data))
    if not REAL.is_dir():
        print(f"skipped the real files: {REAL} is absent", flush=True)
    else:
        for producer, path in REAL_FILES:
            out.append((producer, path, (REAL / path).read_bytes()))
    return [m for m in out if not only or any(o in m[1] for o in only)]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=64, help="calibration samples (default 64)")
    ap.add_argument("--held-out", type=int, default=32, help="samples the error is measured on (default 32)")
    ap.add_argument("--calibration-engine", choices=["numpy", "litert"], help="qconvert's (default: its default)")
    ap.add_argument("--only", nargs="*", default=[], help="model names (substrings) to run")
    ap.add_argument("--verbose", action="store_true", help="tracebacks of failures")
    args = ap.parse_args()

    lq = litert_quantizer()
    print("LiteRT Quantizer: " + (lq[1] if lq else "not installed (pip install litert-quantizer): its column is empty"))
    rows = []
    for producer, name, flt in models(args.only):
        a = AMPLITUDE.get(name, 1.0)
        calib, held = samples(flt, args.samples, 0, a), samples(flt, args.held_out, 1, a)
        row = {"producer": producer, "model": name}
        for tool in ("qconvert", "litert-quantizer"):
            if tool == "litert-quantizer" and lq is None:
                row[tool] = ("not installed", None, None)
                continue
            t0 = time.perf_counter()
            try:
                q = ours(flt, calib, args.calibration_engine) if tool == "qconvert" else theirs(lq[0], flt, calib)
            except Exception as exc:  # noqa: BLE001 (the table says what failed)
                if args.verbose:
                    traceback.print_exc()
                row[tool] = ("refused: " + _short(exc), None, time.perf_counter() - t0)
                continue
            seconds = time.perf_counter() - t0
            left = float_ops(q)
            status = "int8" if not left else f"{len(left)} float ops ({', '.join(sorted(set(left)))[:40]})"
            try:
                row[tool] = (status, error(q, flt, held), seconds)
            except Exception as exc:  # noqa: BLE001 (a file LiteRT cannot run)
                row[tool] = (f"{status}, does not run in LiteRT: {_short(exc)}", None, seconds)
        rows.append(row)
        print(_line(row), flush=True)

    print()
    print("| producer | model | qconvert | error | time | LiteRT Quantizer | error | time | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(_line(row, markdown=True))
    return 0


def _line(row: dict, markdown: bool = False) -> str:
    def cell(r):  # type: ignore[no-untyped-def]
        status, err, seconds = r
        return [status, "" if err is None else f"{err:.5f}", "" if seconds is None else f"{seconds:.2f} s"]

    a, b = cell(row["qconvert"]), cell(row["litert-quantizer"])
    ea, eb = row["qconvert"][1], row["litert-quantizer"][1]
    ratio = f"{ea / eb:.3f}" if ea is not None and eb else ""
    cells = [row["producer"], row["model"], *a, *b, ratio]
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return f"{row['model']:40} qconvert {a[0][:60]:>10} err {a[1]:>9} {a[2]:>8} | LiteRT Quantizer {b[0][:60]:>10} " \
           f"err {b[1]:>9} {b[2]:>8} | ours/theirs {ratio}"


if __name__ == "__main__":
    sys.exit(main())
