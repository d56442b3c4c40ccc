"""The library API: one call does what ``qconvert convert`` does.

    import qconvert
    result = qconvert.convert("model.pb", "model.tflite", inputs_range={"input": (-1, 1)}, target=["tflm"])
    result.record["op_histogram"], result.notes

:func:`convert` loads any supported input (frozen ``.pb``, SavedModel, Keras file, or GraphDef
bytes), converts it as the :class:`~qconvert.options.ConvertOptions` say (or their keys as
keywords, as in a batch manifest), takes the targets' conversion choices, writes the file
atomically, checks it on the targets and returns a :class:`Result` with the report record.
``qconvert convert`` and ``qconvert batch`` are thin callers of it.

May import: ``qconvert.converter`` (the conversion), ``qconvert.options``, ``qconvert.schema``
(the record reads the file back), and the file-level tools below it: ``tools.targets`` and
``tools.check`` (the targets), imported only when targets are given.
"""

from __future__ import annotations

import os
import time
from typing import Any, TextIO

from qconvert.converter.conversion import Result, calibrate_graph, convert_graph, default_output, run_conversion
from qconvert.converter.record import build_record
from qconvert.errors import ConversionError
from qconvert.io import write_atomic
from qconvert.options import ConvertOptions

__all__ = ["ConvertOptions", "Result", "Stats", "TargetError", "build_record", "calibrate_graph", "convert",
           "convert_bytes", "convert_graph", "default_output"]


class TargetError(ConversionError):
    """The file was written, but a target cannot run it; ``result`` has the file, the notes
    and the record (its status "failed")."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


def convert(model: bytes | str | os.PathLike, output: str | os.PathLike | None = None,
            options: ConvertOptions | None = None, *, progress: Any = None, dump_to: TextIO | None = None,
            debug: bool = False, **keys: Any) -> Result:
    """Convert ``model`` and write ``output`` (None: keep the bytes in ``Result.model`` only).

    ``options`` (default: all defaults) changed by ``keys``, the options' flat keys
    (``inputs_range``, ``calibration_data``, ``activations``, ``target``, ...: docs/cli.md).
    With targets, the conversion follows their constraints (4-bit weights stored as int8 for
    Vela, ...), and the written file is checked on each (``qconvert check``): a target that
    cannot run it raises :class:`TargetError` after writing, its ``result`` attached.
    ``progress(done, total)`` hears about calibration samples; ``dump_to`` takes the IR that
    ``dump_after`` asks for; ``debug`` checks the IR after every pass.

    Raises :class:`~qconvert.errors.UsageError` for bad options and
    :class:`~qconvert.errors.ConversionError` for a model that cannot be converted."""
    opts = (options or ConvertOptions()).replace(**keys) if keys else (options or ConvertOptions())
    t0 = time.perf_counter()
    target_notes: list[str] = []
    if opts.targets:
        from qconvert.tools.targets import conversion_choices

        storage, target_notes = conversion_choices(list(opts.targets), opts.precision.int4_storage)
        opts = opts.replace(int4_storage=storage)
    result = run_conversion(model, opts, progress=progress, dump_to=dump_to, debug=debug)
    if target_notes:
        from qconvert.tools.targets import has_4bit_weights

        if has_4bit_weights(result.graph):
            result.notes += target_notes
    if output is not None:
        result.output = os.fspath(output)
        write_atomic(result.output, result.model)
    result.source = os.fspath(model) if not isinstance(model, (bytes, bytearray)) else "<bytes>"
    result.seconds = time.perf_counter() - t0
    if opts.targets and result.output is not None:
        from qconvert.tools.check import check_model
        from qconvert.tools.targets import cannot_run

        result.target_check = check_model(result.output, list(opts.targets))
        failure = cannot_run(result.target_check)
        if failure is not None:
            result.failure = f"wrote {result.output}, but {failure}"
            raise TargetError(result.failure, result)
    return result


def convert_bytes(model: bytes | str | os.PathLike, input_ranges: Any = None, input_shapes: Any = None,
                  inputs: Any = None, outputs: Any = None, **keys: Any) -> bytes:
    """The .tflite bytes of ``model``, in memory (no targets, no file): the short form for
    scripts and tests, ``convert_graph(...).model``."""
    return convert_graph(model, input_ranges, input_shapes, inputs, outputs, **keys).model


def __getattr__(name: str) -> Any:
    if name == "Stats":  # the calibration statistics: loaded when asked for, not by every conversion
        from qconvert.calibration import stats

        return stats.Stats
    raise AttributeError(f"module 'qconvert.api' has no attribute '{name}'")
