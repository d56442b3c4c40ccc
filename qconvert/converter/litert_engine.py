"""``--calibration-engine litert``: the float model run by LiteRT's optimized CPU kernels.

The calibrate stage hands over the graph it would run (after the fusions: the float model
TensorFlow's calibrator runs) and the tensors it observes. That graph is written as a float
``.tflite`` whose outputs are the graph's outputs and the observed tensors (``write_model``'s lean file:
no tensor names, read by position), and each runner
(as many as batches run at once: one per worker thread) loads it into its own LiteRT
interpreter (one kernel thread each, the XNNPACK delegate as LiteRT applies it by default) and
runs the samples one at a time; the observed outputs are
read in place, without a copy, and given to the same statistics as the numpy engine's.

What differs from the numpy engine (``calibration/executor.py``) is the float arithmetic, in
the last bits: XNNPACK adds its products in its own order and has its own transcendental
functions (TensorFlow's calibrator runs TFLite's builtin kernels, whose sums depend on its
thread count). The ranges agree with the numpy engine's within float32 rounding, not bit for
bit (MobileNetV2 224, 100 samples: 23 of 64 ranges equal, the others within 4.1e-6 of their
span). The ranges used, the in-place rule and RemoveRedundantStatsOps are the calibrate
stage's, as with numpy.

Measured on the same model with 500 samples (``bench/calibration_speed.py``, 2 cores, whole
process): 7.1 ms per sample, against 21.4 for the numpy engine and 54.6 for TensorFlow.

The calibrate stage never imports LiteRT (import-linter); this module, in the converter
layer, is passed to it as :attr:`Calibration.engine`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from qconvert.calibration.calibrate import EngineUnavailable
from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.ir.qdq import is_quantize
from qconvert.schema.litert import interpreter
from qconvert.schema.writer import write_model

Record = Callable[[str, np.ndarray], None]
Runner = Callable[[Mapping[str, np.ndarray], Record], int]

_FIX = "use --calibration-engine numpy"


class _CannotUse(ConversionError):
    """LiteRT cannot write, load or run the float graph: the one-line error of ``--calibration-engine
    litert``; ``why`` alone is the note of ``auto`` when it falls back to the numpy engine."""

    def __init__(self, why: str, line: str) -> None:
        super().__init__(line)
        self.why = why


def float_model(graph: Graph, observed: Sequence[str]) -> bytes:
    """The float graph as ``.tflite`` bytes, with ``observed`` tensors added to its outputs.

    QUANTIZE → DEQUANTIZE pairs (ranges from FakeQuants) are written as they are, an int8
    tensor between them, as a TFLite float model holds them; their ``origin`` attribute is the
    pipeline's own and is left out of the file."""
    saved = graph.outputs
    tagged = [(n, n.attrs) for n in graph.nodes if is_quantize(n) and "origin" in n.attrs]
    graph.outputs = list(dict.fromkeys([*saved, *observed]))
    for node, attrs in tagged:
        node.attrs = {k: v for k, v in attrs.items() if k != "origin"}
    try:
        return write_model(graph, description="qconvert calibration (float)", lean=True)  # read by position
    except ValueError as exc:
        raise _CannotUse(f"cannot write the float graph: {exc}",
                         f"--calibration-engine litert cannot write the float graph: {exc}; {_FIX}") from None
    finally:
        graph.outputs = saved
        for node, attrs in tagged:
            node.attrs = attrs


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment: LiteRT's C++ logging has no switch in
    Python. Its errors still reach us, in the exception's text."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 (an embedding host): nothing to hide
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def prepare(graph: Graph, names: Sequence[str]) -> Callable[[], Runner]:
    """A factory of runners, one per batch running at once, each running samples on ``graph`` and
    recording ``names``. The model is written and loaded once here, so that a graph LiteRT
    cannot load fails with one line before any sample runs."""
    inputs = list(graph.inputs)
    observed = [n for n in names if n not in graph.inputs]  # inputs are recorded from the feeds
    data = float_model(graph, observed)
    position = {n: i for i, n in enumerate(dict.fromkeys([*graph.outputs, *observed]))}
    recorded_inputs = [n for n in inputs if n in names]

    def load():  # type: ignore[no-untyped-def]
        try:
            return interpreter(data, preserve_all_tensors=False, resolver="default", num_threads=1)
        except ImportError:
            needs = "LiteRT (pip install ai-edge-litert)"
            raise _CannotUse(f"it needs {needs}", f"--calibration-engine litert needs {needs}; or {_FIX}") from None
        except ValueError as exc:
            why = f"LiteRT cannot load the float graph ({exc})"
            raise _CannotUse(why, f"--calibration-engine litert: {why}; {_FIX}") from None

    with _quiet_stderr():  # LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate" (once a process)
        spare = [load()]  # the check; the first worker takes this interpreter

    def make() -> Runner:
        try:
            it = spare.pop()  # atomic: two threads never take the same one
        except IndexError:
            it = load()
        slots = [(name, d["index"], d["dtype"]) for name, d in zip(inputs, it.get_input_details())]
        # the outputs' tensor indices: the wrapper's own list when it has one (get_output_details builds
        # a dict of details for each of EfficientViT_M0's 486 outputs: 1.1 ms)
        native = getattr(it, "_interpreter", None)
        outputs = [int(i) for i in native.OutputIndices()] if hasattr(native, "OutputIndices") else \
            [d["index"] for d in it.get_output_details()]
        reads = [(n, it.tensor(outputs[position[n]])) for n in observed]

        def run(feeds: Mapping[str, np.ndarray], record: Record) -> int:
            batch = len(feeds[inputs[0]])
            many = getattr(record, "many", None)  # record(name, view) on every observed tensor at once
            for name in recorded_inputs:
                record(name, np.ascontiguousarray(feeds[name], dtype=np.float32))
            for i in range(batch):
                for name, index, dtype in slots:
                    it.set_tensor(index, np.ascontiguousarray(feeds[name][i:i + 1], dtype=dtype))
                try:
                    it.invoke()
                except RuntimeError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    raise ConversionError(f"--calibration-engine litert: LiteRT failed to run the float graph "
                                          f"({first}); {_FIX}") from None
                if many is not None:  # the interpreter's own buffers: read, then let go before the next invoke
                    views = [view_of() for _, view_of in reads]
                    many(observed, views)
                    del views
                    continue
                for name, view_of in reads:
                    view = view_of()
                    record(name, view)
                    del view
            return batch

        return run

    return make


def prepare_or_fall_back(graph: Graph, names: Sequence[str]) -> Callable[[], Runner]:
    """``--calibration-engine auto`` (the default): :func:`prepare`, or :class:`EngineUnavailable`
    (the numpy executor runs the samples, and the calibration note says why) when LiteRT is not
    installed, cannot load the float graph, or the graph carries a state from sample to sample (an
    LSTM's VARIABLE tensors: the numpy executor runs the samples in order on one worker, as
    TensorFlow's calibrator does)."""
    if any(t.variable for t in graph.tensors.values()):
        raise EngineUnavailable("the graph has state tensors")
    try:
        return prepare(graph, names)
    except _CannotUse as exc:
        raise EngineUnavailable(exc.why) from None
