"""The library API: convert a frozen GraphDef to int8 TFLite bytes, or a file to a file.

The CLI is a thin layer over these functions (``qconvert.api`` is the public name). This
module imports the whole converter; the CLI imports it only when it converts, so that
``qconvert --help`` and ``dump`` start without it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, TextIO

from qconvert import __version__
from qconvert.calibration.calibrate import METHODS, Calibration
from qconvert.calibration.data import Samples, as_samples, open_samples
from qconvert.calibration.stats import Stats
from qconvert.converter.pipeline import Options, run
from qconvert.errors import ConversionError, UsageError
from qconvert.frontend.graphdef import parse_graphdef, read_graphdef
from qconvert.frontend.importer import import_graph
from qconvert.frontend.tf_frozen import freeze, is_tf_model
from qconvert.ir import Graph
from qconvert.quantize_pass.blockwise import BLOCK_SIZES
from qconvert.schema.requant_metadata import METADATA_NAME, encode
from qconvert.schema.writer import write_model


@dataclass
class Result:
    model: bytes
    graph: Graph
    notes: list[str] = field(default_factory=list)
    stats: Stats | None = None  # the calibration statistics used (recorded, or merged from files)


def convert_graph(
    model: bytes | str | os.PathLike,
    input_ranges: Mapping[str | None, tuple[float, float]] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    dump_after: Sequence[str] = (),
    dump_to: TextIO | None = None,
    default_ranges: tuple[float, float] | None = None,
    allow_float: bool = False,
    check_each_pass: bool = False,
    calibration_data: str | os.PathLike | Mapping[str, Any] | None = None,
    calibration_samples: int | None = None,
    calibration_batch: int = 1,
    calibration_method: str = "minmax",
    percentile: float = 99.99,
    seed: int = 0,
    image_size: tuple[int, int] | None = None,
    mean: Sequence[float] | float = 0.0,
    std: Sequence[float] | float = 1.0,
    ranges_file: str | os.PathLike | Mapping[str, Sequence[float]] | None = None,
    progress: Any = None,
    int4_storage: str = "packed",
    low_bit_activations: str = "error",
    weights: str = "int8",
    block_size: int | None = None,
    activations: str = "int8",
    stats: Sequence[str | os.PathLike] = (),
    save_stats: str | os.PathLike | None = None,
    histograms: bool = False,
    stop_before: str | None = None,
    calibration_workers: int | None = None,
    calibration_engine: str = "numpy",
) -> Result:
    """Convert a frozen GraphDef (bytes or path) and return the model bytes, the final IR and notes.

    Float graphs: ``calibration_data`` (a path, see :mod:`qconvert.calibration.data`, or a
    mapping of input name to an [N, ...] array) gives ranges to tensors without a FakeQuant;
    ``ranges_file`` (a JSON path or a mapping of tensor name to (min, max)) sets ranges by hand.
    ``int4_storage``: 4-bit QAT weights as packed INT4 ("packed", TensorFlow's) or int8 ("int8");
    ``low_bit_activations``: an activation FakeQuant under 8 bits is an "error", or taken at "8bit".
    ``weights``: weights without FakeQuant (float graphs) as "int8", or "int4" per channel for
    CONV_2D and FULLY_CONNECTED (INT4 tensors, scale max|w|/7; activations stay int8).
    ``block_size`` (with ``weights="int4"``): FULLY_CONNECTED weights int4 in blocks of that many
    inputs with FLOAT16 scales, everything else float (dynamic range; XNNPACK runs it).
    ``activations="int16"``: TensorFlow's 16x8 post-training mode (int16 activations, symmetric;
    int8 weights; int64 biases) for float graphs with calibration.
    ``stats``: statistics files written by ``save_stats`` (``qconvert calibrate --save-stats``)
    on shards of the data, merged, in place of ``calibration_data``; ``save_stats`` writes the
    statistics of this run (with ``histograms``, also for minmax, so that any method can use them).
    ``stop_before``: end before that pipeline stage (``Result.model`` is then empty).
    ``calibration_workers``: threads running the samples (default: the cores, at most 4).
    ``calibration_engine``: what runs the float model on the samples: "numpy" (qconvert's kernels,
    TFLite's float order where it is known) or "litert" (LiteRT's XNNPACK kernels, about 3x faster;
    ranges equal within float32 rounding, not bit for bit; see converter/litert_engine.py).
    """
    if weights not in ("int8", "int4"):
        raise ConversionError(f"weights {weights!r}: choose 'int8' or 'int4'")
    if activations not in ("int8", "int16"):
        raise UsageError(f"--activations {activations}: choose int8 or int16")
    if stats and calibration_data is not None:
        raise UsageError("give --calibration-data or --stats, not both (statistics already hold the samples)")
    if save_stats is not None and calibration_data is None:
        raise UsageError("--save-stats records statistics of --calibration-data: give the data")
    has_data = calibration_data is not None or bool(stats)
    if activations == "int16" and (not has_data and ranges_file is None or block_size is not None
                                   or default_ranges is not None):
        raise UsageError("--activations int16 is TensorFlow's 16x8 post-training mode: it needs --calibration-data "
                         "(or --ranges-file) and takes neither --block-size nor --default-ranges")
    if activations == "int16" and weights == "int4":
        raise UsageError("--weights int4 writes int8 activations (LiteRT's INT4 kernels take int8 inputs); "
                         "use --activations int16 with int8 weights")
    if block_size is not None:
        if weights != "int4" or block_size not in BLOCK_SIZES:
            raise UsageError(f"--block-size {block_size}: blockwise weights are int4 (--weights int4) in blocks of "
                             f"{', '.join(map(str, BLOCK_SIZES))}")
        if has_data or ranges_file is not None:
            raise UsageError("--block-size keeps activations float (dynamic range): drop --calibration-data and "
                             "--ranges-file, or drop --block-size for int8 activations with int4 weights")
    if int4_storage not in ("packed", "int8"):
        raise ConversionError(f"int4_storage {int4_storage!r}: choose 'packed' or 'int8'")
    if low_bit_activations not in ("error", "8bit"):
        raise ConversionError(f"low_bit_activations {low_bit_activations!r}: choose 'error' or '8bit'")
    if not isinstance(model, (bytes, bytearray)):
        if is_tf_model(model):
            model, tf_inputs, tf_outputs = freeze(model)
            inputs, outputs = inputs or tf_inputs, outputs or tf_outputs
    with _no_cyclic_gc():
        raw = parse_graphdef(model) if isinstance(model, (bytes, bytearray)) else read_graphdef(model)
        graph = import_graph(raw, inputs, outputs, input_shapes)
        calibration = _calibration(graph, calibration_data, calibration_samples, calibration_batch,
                                   calibration_method, seed, ranges_file, progress, percentile,
                                   (image_size, mean, std), stats, save_stats, histograms, calibration_workers,
                                   calibration_engine)
        options = Options(input_ranges=dict(input_ranges or {}), input_shapes=dict(input_shapes or {}),
                          inputs=inputs, outputs=outputs, dump_after=tuple(dump_after), dump_to=dump_to,
                          default_ranges=default_ranges, allow_float=allow_float,
                          check_each_pass=check_each_pass, calibration=calibration,
                          int4_storage=int4_storage, low_bit_activations=low_bit_activations,
                          weights=weights, block_size=block_size, activations=activations)
        graph, ctx = run(graph, options, stop_before=stop_before)
        if stop_before is not None:
            return Result(b"", graph, list(ctx.notes), calibration.recorded if calibration is not None else None)
        if not options.dynamic_range:  # records describe the integer kernels (none: float activations)
            graph.metadata[METADATA_NAME] = encode(ctx.requant, int16=activations == "int16")
        recorded = calibration.recorded if calibration is not None else None
        return Result(write_model(graph, description=_description()), graph, list(ctx.notes), recorded)


def _calibration(graph: Graph, data: Any, samples: int | None, batch: int, method: str, seed: int,
                 ranges_file: Any, progress: Any, percentile: float = 99.99,
                 image: tuple[Any, Any, Any] = (None, 0.0, 1.0), stats: Sequence[Any] = (),
                 save_stats: Any = None, histograms: bool = False, workers: int | None = None,
                 engine: str = "numpy") -> Any:
    if engine not in ENGINES:
        raise UsageError(f"--calibration-engine {engine}: choose {' or '.join(ENGINES)}")
    if data is None and ranges_file is None and not stats:
        return None
    if method not in METHODS:
        raise ConversionError(f"calibration method '{method}' is not available; choose one of {', '.join(METHODS)}")
    if batch < 1 or (samples is not None and samples < 1) or (workers is not None and workers < 1):
        raise ConversionError("--calibration-batch, --calibration-samples and --calibration-workers must be at least 1")
    loaded = None
    if data is not None:
        shapes = {n: graph.tensors[n].shape for n in graph.inputs}
        if isinstance(data, Mapping):
            missing = [n for n in shapes if n not in data]
            if missing:
                raise ConversionError(f"calibration data has no array for input '{missing[0]}'")
            arrays = {n: as_samples(n, data[n], shapes[n], "calibration data") for n in shapes}
            if samples is not None:
                arrays = {n: a[:samples] for n, a in arrays.items()}
            loaded = Samples.from_arrays(arrays)
        else:
            loaded = open_samples(data, shapes, samples, seed, *image)
    if not 50.0 < percentile <= 100.0:
        raise ConversionError(f"--percentile {percentile}: expected a value in (50, 100]")
    if save_stats is not None and not Path(save_stats).resolve().parent.is_dir():  # before the samples run
        raise ConversionError(f"cannot write '{save_stats}': directory '{Path(save_stats).parent}' does not exist")
    return Calibration(loaded, batch, method, percentile, _read_ranges(ranges_file), progress,
                       stats_files=[os.fspath(p) for p in stats],
                       save_stats=None if save_stats is None else os.fspath(save_stats), histograms=histograms,
                       workers=workers, engine=_engine(engine), engine_name=engine)


ENGINES = ("numpy", "litert")  # --calibration-engine


def _engine(name: str) -> Any:
    if name == "numpy":
        return None  # the calibrate stage's own executor
    from qconvert.converter.litert_engine import prepare  # loads LiteRT only when asked for

    return prepare


def _read_ranges(source: Any) -> dict[str, tuple[float, float]]:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        raw: Any = source
    else:
        try:
            raw = json.loads(Path(source).read_text())
        except OSError as exc:
            raise ConversionError(f"cannot read ranges file '{source}': {exc.strerror}") from None
        except ValueError as exc:
            raise ConversionError(f"ranges file '{source}' is not valid JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ConversionError("ranges file: expected a JSON object of tensor name -> [min, max]")
    out = {}
    for name, pair in raw.items():
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)):
            raise ConversionError(f"ranges file: tensor '{name}' needs [min, max] numbers, got {pair!r}")
        out[str(name)] = (float(pair[0]), float(pair[1]))
    return out


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cycle collector while converting. A conversion allocates a few
    objects per node and frees almost none; the collector's repeated scans of them cost
    30% of the time on a 125-layer graph and grow with the graph. Reference counting
    still frees everything acyclic at once; cycles (a node and its edge lists) wait for
    the first collection after the conversion."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def convert(
    model: bytes | str | os.PathLike,
    input_ranges: Mapping[str | None, tuple[float, float]] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
) -> bytes:
    """Convert a frozen QAT GraphDef (bytes or path) to a fully-int8 TFLite model."""
    return convert_graph(model, input_ranges, input_shapes, inputs, outputs).model


def calibrate_graph(model: bytes | str | os.PathLike, calibration_data: Any, **options: Any) -> Stats:
    """Run the float graph on ``calibration_data`` and return its statistics (``Stats``; write
    them with ``.save(path)``), without converting: one shard of a calibration that
    ``convert_graph(..., stats=[...])`` merges. ``options`` are ``convert_graph``'s."""
    result = convert_graph(model, calibration_data=calibration_data, stop_before="prepare", **options)
    if result.stats is None:
        raise ConversionError("the graph has no tensor to calibrate: every range comes from FakeQuants")
    return result.stats


def default_output(model: str | os.PathLike) -> Path:
    return Path(model).with_suffix(".tflite")


def _description() -> str:
    return f"qconvert {__version__}"
