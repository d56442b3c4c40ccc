"""The conversion itself: a model in, TFLite bytes and the final IR out (no file written).

``run_conversion`` loads the model (``load_graph``: a float .tflite through ``schema.reader``
and ``frontend.tflite_graph``, anything else through ``frontend.load``), opens the calibration sources the
options name, runs the pipeline and serialises the result. ``qconvert.api.convert`` adds
what a user's job needs around it (targets, the atomic write, the report record);
``convert_graph`` is the older keyword form, kept for callers of the 0.1 API.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, TextIO

import numpy as np

from qconvert import __version__
from qconvert.converter.pipeline import run
from qconvert.converter.record import build_record
from qconvert.errors import ConversionError
from qconvert.frontend.importer import import_graph
from qconvert.frontend.load import attach_signature, read_model_nodes
from qconvert.ir import Graph
from qconvert.options import ConvertOptions
from qconvert.schema.codes import FILE_IDENTIFIER
from qconvert.schema.requant_metadata import METADATA_NAME, encode
from qconvert.schema.writer import write_model

if TYPE_CHECKING:  # loaded only for a graph that is calibrated: a QAT conversion never reads samples
    from qconvert.calibration.calibrate import Calibration
    from qconvert.calibration.stats import Stats


@dataclass
class Result:
    model: bytes  # the .tflite (empty when stopped before the end)
    graph: Graph  # the final IR
    notes: list[str] = field(default_factory=list)  # for the user, one line each
    stats: Stats | None = None  # the calibration statistics used (recorded, or merged from files)
    output: str | None = None  # where it was written (qconvert.api.convert)
    source: str = "<bytes>"  # the model, as the record names it
    seconds: float = 0.0  # the conversion's time (qconvert.api.convert)
    target_check: dict[str, Any] | None = None  # `qconvert check` of the file written, with targets
    failure: str | None = None  # a target cannot run the file written: why
    _record: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def record(self) -> dict[str, Any]:
        """The report record (docs/formats.md), built from the file when first asked for."""
        if self._record is None:
            rec = build_record(self.source, self.output or "", self.model, self.notes, seconds=self.seconds)
            if self.target_check is not None:
                rec["target_check"] = self.target_check
            if self.failure is not None:
                rec["status"], rec["error"] = "failed", self.failure
            self._record = rec
        return self._record


def run_conversion(model: bytes | str | os.PathLike, options: ConvertOptions, progress: Any = None,
                   dump_to: TextIO | None = None, debug: bool = False, stop_before: str | None = None) -> Result:
    """Convert ``model`` (a float .tflite or frozen GraphDef, path or bytes; a SavedModel directory, a Keras file)
    as ``options`` say. ``progress(done, total)`` hears about calibration samples;
    ``dump_to`` takes ``options.dump_after``'s IR; ``debug`` checks invariants after every pass;
    ``stop_before``: end before that stage (``Result.model`` is then empty)."""
    with _no_cyclic_gc():
        graph, notes = load_graph(model, options)
        notes = list(options.precision.recipe_notes) + notes  # how the recipe was read (values given beside it)
        calibration = _calibration(graph, options, progress)  # the samples' shapes checked against the inputs
        if is_tflite(model):
            _check_computes(graph, "the model" if isinstance(model, (bytes, bytearray)) else f"'{os.fspath(model)}'")
        graph, ctx = run(graph, options, calibration, stop_before=stop_before, dump_to=dump_to, debug=debug)
        recorded = calibration.recorded if calibration is not None else None
        if stop_before is not None:
            return Result(b"", graph, notes + list(ctx.notes), recorded)
        if not options.precision.dynamic_range:  # records describe the integer kernels (none: float activations)
            graph.metadata[METADATA_NAME] = encode(ctx.requant, int16=options.precision.activations == "int16")
        return Result(write_model(graph, description=_description()), graph, notes + list(ctx.notes), recorded)


def is_tflite(model: bytes | str | os.PathLike) -> bool:
    """``model`` is a TFLite flatbuffer: bytes with the TFL3 identifier, or a file named
    ``.tflite`` or starting so."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model[4:8]) == FILE_IDENTIFIER
    p = Path(model)
    if not p.is_file():
        return False
    if p.suffix.lower() == ".tflite":
        return True
    try:
        with p.open("rb") as f:
            return f.read(8)[4:8] == FILE_IDENTIFIER
    except OSError:
        return False


def load_graph(model: bytes | str | os.PathLike, options: ConvertOptions, check: bool = False
               ) -> tuple[Graph, list[str]]:
    """The IR graph of any supported input (a float .tflite, a frozen GraphDef, a SavedModel,
    a Keras file), cut to ``options.inputs``/``outputs``, and the notes the reading gives. A
    .tflite's operators are checked by running them once (``_check_computes``): here with
    ``check`` (``compare``), else by ``run_conversion`` after the calibration data's shapes are
    checked against its inputs."""
    if is_tflite(model):
        from qconvert.frontend.tflite_graph import import_tflite
        from qconvert.schema.reader import read_model

        source = "the model" if isinstance(model, (bytes, bytearray)) else f"'{os.fspath(model)}'"
        try:
            data = bytes(model) if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
        except OSError as exc:
            raise ConversionError(f"cannot read {source}: {exc.strerror}") from None
        try:
            info = read_model(data)
        except ValueError as exc:
            raise ConversionError(f"{source}: {exc}") from None
        graph, notes = import_tflite(info, options.inputs, options.outputs, options.input_shapes, source=source)
        if check:
            _check_computes(graph, source)
        return graph, notes
    nodes, inputs, outputs, signature = read_model_nodes(model, options.inputs, options.outputs)
    graph = import_graph(nodes, inputs, outputs, options.input_shapes, options.precision.allow_custom_ops)
    notes: list[str] = []
    attach_signature(graph, signature, notes)
    return graph, notes


def _check_computes(graph: Graph, source: str) -> None:
    """Run a .tflite's graph once on zeros and check that every operator computes the shape the file
    gives its output. A file is untrusted input: an operator with an operand too many, a stride of 0
    or a shape that does not follow from its inputs is one error naming it, before any pass trusts it."""
    from qconvert.calibration.executor import evaluate

    values: dict[str, Any] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        values[name] = np.zeros(t.shape or (), np.dtype(t.dtype) if t.dtype != "float16" else np.float32)
    readers = {t: len(graph.consumers(t)) for n in graph.nodes for t in n.outputs}
    for node in graph.nodes:
        where = f"{source}: operator '{node.name}' ({node.op})"
        unmade = [i for i in node.inputs if i and i not in values and not graph.is_const(i)
                  and not graph.tensors[i].variable]
        if unmade:  # a file's operators are in execution order: an operand no earlier one made is damage
            raise ConversionError(f"{where} reads tensor '{unmade[0]}', which no operator before it computes; "
                                  "the file is damaged")
        args = [None if not i or graph.tensors[i].variable else values[i] if i in values else graph.const(i)
                for i in node.inputs]
        try:
            y = evaluate(graph, node, args, 1)
        except ConversionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a kernel meeting operands or options the op cannot have
            raise ConversionError(f"{where} cannot run on the file's operands ({type(exc).__name__}: {exc}); "
                                  "the file is damaged or not what TFLite's kernel takes") from None
        y = y[0] if isinstance(y, tuple) else y
        want = graph.tensors[node.outputs[0]].shape
        if want is not None and tuple(np.shape(y)) != tuple(want):
            raise ConversionError(f"{where} computes shape {list(np.shape(y))}, but the file says {list(want)}")
        values[node.outputs[0]] = y
        for i in set(node.inputs):  # free what no later node reads
            if i in readers:
                readers[i] -= 1
                if readers[i] == 0 and i not in graph.outputs:
                    values.pop(i, None)


def _calibration(graph: Graph, options: ConvertOptions, progress: Any) -> Calibration | None:
    """The samples, statistics files and ranges file the options name, opened for the
    calibrate stage (None: a QAT graph, every range from FakeQuants and input ranges)."""
    c = options.calibration
    if not c.given:
        return None
    from qconvert.calibration.calibrate import Calibration
    from qconvert.calibration.data import samples_from

    loaded = None
    if c.data is not None:
        shapes = {n: graph.tensors[n].shape for n in graph.inputs}
        loaded = samples_from(c.data, shapes, c.samples, c.seed, c.image_size, c.mean, c.std)
    if c.save_stats is not None and not Path(c.save_stats).resolve().parent.is_dir():  # before the samples run
        raise ConversionError(f"cannot write '{c.save_stats}': directory '{Path(c.save_stats).parent}' does not exist")
    return Calibration(c, loaded, _read_ranges(c.ranges_file), progress, engine=_engine(c.engine))


def _engine(name: str) -> Any:
    if name == "numpy":
        return None  # the calibrate stage's own executor
    from qconvert.converter import litert_engine  # loads LiteRT only when a graph is calibrated

    return litert_engine.prepare if name == "litert" else litert_engine.prepare_or_fall_back


def _read_ranges(source: Any) -> dict[str, tuple[float, float]]:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        raw: Any = source
    else:
        import json  # here: 0.9 ms of every start-up, for a ranges file only

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


def convert_graph(model: bytes | str | os.PathLike, input_ranges: Any = None, input_shapes: Any = None,
                  inputs: Any = None, outputs: Any = None, *, dump_to: TextIO | None = None,
                  check_each_pass: bool = False, progress: Any = None, stop_before: str | None = None,
                  **options: Any) -> Result:
    """The 0.1 API: :func:`run_conversion` with the options as keywords (their keys in
    ``qconvert.options``; ``input_ranges`` for ``inputs_range``). Bad values are UsageErrors."""
    given = {k: v for k, v in (("inputs_range", input_ranges), ("input_shapes", input_shapes), ("inputs", inputs),
                               ("outputs", outputs)) if v is not None}
    return run_conversion(model, ConvertOptions.of(**given, **options), progress=progress, dump_to=dump_to,
                          debug=check_each_pass, stop_before=stop_before)


def calibrate_graph(model: bytes | str | os.PathLike, calibration_data: Any, options: ConvertOptions | None = None,
                    progress: Any = None, **keys: Any) -> Stats:
    """Run the float graph on ``calibration_data`` and return its statistics (``Stats``; write
    them with ``.save(path)``), without converting: one shard of a calibration that a
    conversion with ``stats=[...]`` merges. ``keys`` change ``options`` (flat keys, as
    :meth:`ConvertOptions.of`)."""
    opts = (options or ConvertOptions()).replace(calibration_data=calibration_data, **keys)
    result = run_conversion(model, opts, progress=progress, stop_before="prepare")
    if result.stats is None:
        raise ConversionError("the graph has no tensor to calibrate: every range comes from FakeQuants")
    return result.stats


def default_output(model: str | os.PathLike) -> Path:
    """MODEL with .tflite; MODEL_quant.tflite for a .tflite input (never the input itself)."""
    p = Path(model)
    if p.suffix.lower() == ".tflite":
        return p.with_name(f"{p.stem}_quant.tflite")
    return p.with_suffix(".tflite")


def _description() -> str:
    return f"qconvert {__version__}"
