"""Every choice a user makes about a conversion, declared once: :class:`ConvertOptions`.

Each option is one dataclass field whose metadata (:func:`option`) gives its help text, its
command-line flag, its manifest key (which is also its keyword in ``qconvert.convert``) and
its :class:`Kind`: how a value is read from the command line, from a TOML manifest or from a
Python caller, and checked. From this one declaration come

- the click options of ``qconvert convert`` and ``qconvert calibrate`` (``cli.py``),
- the keys of a batch manifest (``tools/batch.py``),
- the keyword arguments of ``qconvert.convert()`` (``api.py``),
- ``docs/cli.md``, the option reference (``python -m qconvert.options``; a test keeps it equal).

A bad value is a :class:`~qconvert.errors.UsageError` (exit 2) with one line naming the flag
(command line) or the key (manifest, API), whichever way it came. The options are frozen:
passes read them through ``Context.options``, typed, with the defaults declared here.

The options declared ``in_recipe`` decide what precision each op gets: a recipe file (``--recipe``,
``qconvert/recipe.py``) holds them; values given beside it (flags, manifest keys, keywords) win.

May import: ``qconvert.recipe`` (reading recipe files), ``qconvert.errors`` and the standard library
only (``qconvert --help`` builds its options from here, so this module stays light: no numpy).
"""

from __future__ import annotations

import dataclasses
import glob
import math
import numbers
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from qconvert.errors import UsageError

# ---------------------------------------------------------------------------------- names

TARGETS = ("litert", "litert-ref", "tflm", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u85-256")
STAGES = ("import", "inputs", "legalize", "fold", "fuse", "calibrate", "prepare", "quantize")  # converter.pipeline
CALIBRATION_METHODS = ("minmax", "percentile", "entropy", "mse")
CALIBRATION_ENGINES = ("auto", "litert", "numpy")
BLOCK_SIZES = (32, 64, 128, 256)
IO_TYPES = ("float32", "int8", "uint8", "int16")  # --input-type / --output-type (quantize_pass/graph_io.py)
BLOCKWISE_TARGETS = ("litert",)  # blockwise INT4 weights run in XNNPACK only (tools/targets.py's rules)


def parse_targets(names: Any, allow_all: bool = True) -> list[str]:
    """Target names (a list, or comma-separated text) in TARGETS order; ``all`` for every one;
    none given = all. A UsageError naming the valid ones otherwise."""
    wanted: set[str] = set()
    for name in ([names] if isinstance(names, str) else list(names)):
        if not isinstance(name, str):
            raise UsageError(f"target {name!r}: a target name or a list of them")
        for part in name.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all" and allow_all:
                wanted.update(TARGETS)
            elif part in TARGETS:
                wanted.add(part)
            else:
                raise UsageError(f"unknown target '{part}'; targets: {', '.join(TARGETS)}{', all' if allow_all else ''}")
    return [t for t in TARGETS if t in wanted] or list(TARGETS)


# ---------------------------------------------------------------------------------- kinds


class Bad(ValueError):
    """A value an option cannot take; the text says why (the caller adds the flag or key)."""


class Kind:
    """How one option's values are read and checked.

    ``text`` reads one command-line word; ``value`` reads what a manifest or a Python caller
    gives (text is read as on the command line). Both raise :class:`Bad`. (Kind and Spec are
    plain classes: as frozen dataclasses their generated methods cost 1.1 ms of every start-up.)"""

    __slots__ = ("flag_only", "metavar", "path", "repeat", "text", "value")
    metavar: str
    repeat: bool  # the flag may be given several times (its values are a list)
    flag_only: bool  # a switch: no value on the command line
    text: Callable[[str], Any]
    value: Callable[[Any], Any] | None  # default: text() on str, else as it is
    path: bool  # a manifest value is a path relative to the manifest

    def __init__(self, metavar: str = "VALUE", repeat: bool = False, flag_only: bool = False,
                 text: Callable[[str], Any] = str, value: Callable[[Any], Any] | None = None,
                 path: bool = False) -> None:
        self.metavar, self.repeat, self.flag_only = metavar, repeat, flag_only
        self.text, self.value, self.path = text, value, path

    def from_text(self, words: Any) -> Any:
        if self.repeat:
            return self.from_value(list(words))
        return self.text(words)

    def from_value(self, v: Any) -> Any:
        if self.value is not None:
            return self.value(v)
        return self.text(v) if isinstance(v, str) else v


def _choice(values: tuple[Any, ...]) -> Kind:
    def read(v: Any) -> Any:
        for c in values:
            if v == c and not isinstance(v, bool) or (isinstance(c, int) and isinstance(v, str) and v == str(c)):
                return c
        raise Bad(f"expected one of {', '.join(map(str, values))}")
    return Kind(metavar="|".join(map(str, values)), text=read, value=read)


def _number(whole: bool, check: Callable[[float], str | None]) -> Kind:
    """A number (``whole``: an integer), from text or from Python/TOML, then ``check``ed
    (it returns why a value is refused, or None)."""
    cast, base, what = (int, numbers.Integral, "a whole number") if whole else (float, numbers.Real, "a number")

    def read(v: Any) -> Any:
        try:
            x = cast(v) if isinstance(v, str) else v
        except ValueError:
            raise Bad(f"expected {what}") from None
        if not isinstance(x, base) or isinstance(x, bool):
            raise Bad(f"expected {what}")
        why = check(cast(x))
        if why:
            raise Bad(why)
        return cast(x)
    return Kind(metavar="N" if whole else "X", text=read, value=read)


def _integer(minimum: int) -> Kind:
    return _number(True, lambda n: None if n >= minimum else f"must be at least {minimum}")


def _flag() -> Kind:
    def read(v: Any) -> bool:
        if not isinstance(v, bool):
            raise Bad("expected true or false")
        return v
    return Kind(flag_only=True, text=read, value=read)


def parse_range(text: str) -> tuple[str | None, tuple[float, float]]:
    """``[NAME=]MIN,MAX`` → (name or None, (min, max)), both finite and min < max (Bad otherwise)."""
    name, sep, rng = str(text).rpartition("=")
    if not sep:
        name, rng = "", str(text)
    parts = rng.split(",")
    if len(parts) != 2:
        raise Bad(f"'{text}': expected [NAME=]MIN,MAX, e.g. input=-1,1")
    try:
        lo, hi = float(parts[0]), float(parts[1])
    except ValueError:
        raise Bad(f"'{text}': MIN and MAX must be numbers, e.g. input=-1,1") from None
    return name or None, _pair(lo, hi, text)


def _pair(lo: Any, hi: Any, text: Any) -> tuple[float, float]:
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (lo, hi)):
        raise Bad(f"{text!r}: MIN and MAX must be numbers")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise Bad(f"'{text}': MIN and MAX must be finite")
    if not lo < hi:
        raise Bad(f"'{text}': MIN must be less than MAX")
    return float(lo), float(hi)


def _one_range(v: Any) -> tuple[float, float] | None:
    if v is None:
        return None
    if isinstance(v, str):
        name, rng = parse_range(v)
        if name is not None:
            raise Bad(f"'{v}': expected MIN,MAX")
        return rng
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return _pair(v[0], v[1], v)
    raise Bad(f"{v!r}: expected MIN,MAX")


def _input_ranges(v: Any) -> dict[str | None, tuple[float, float]]:
    """"-1,1" | "input=-1,1" | ["a=0,1", ...] | {name: "-1,1" or [-1, 1] or (-1, 1)}."""
    if isinstance(v, Mapping):
        out: dict[str | None, tuple[float, float]] = {}
        for name, rng in v.items():
            if isinstance(rng, str):
                out[name] = parse_range(rng)[1]
            elif isinstance(rng, (list, tuple)) and len(rng) == 2:
                out[name] = _pair(rng[0], rng[1], rng)
            else:
                raise Bad(f"{name}: {rng!r}: expected MIN,MAX")
        return out
    out = {}
    for text in ([v] if isinstance(v, str) else list(v)):
        name, rng = parse_range(str(text))
        if name in out:
            raise Bad(f"range for {name or 'the input'} given twice")
        out[name] = rng
    return out


def _shape_text(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = str(text).partition("=")
    if not sep or not name:
        raise Bad(f"'{text}': expected NAME=D0,D1,..., e.g. input=1,224,224,3")
    return name, _dims(dims.split(","), text)


def _dims(dims: Any, text: Any) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in dims)
    except (TypeError, ValueError):
        raise Bad(f"'{text}': dimensions must be integers") from None
    if not shape or any(d <= 0 for d in shape):
        raise Bad(f"'{text}': dimensions must be positive")
    return shape


def _input_shapes(v: Any) -> dict[str, tuple[int, ...]]:
    """{name: [1, 28, 28, 1] or "1,28,28,1"} | ["name=1,28,28,1", ...]."""
    if isinstance(v, Mapping):
        return {str(k): _dims(d if not isinstance(d, str) else d.split(","), d) for k, d in v.items()}
    return dict(_shape_text(t) for t in ([v] if isinstance(v, str) else list(v)))


def _names(v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    items = [v] if isinstance(v, str) else list(v)
    out = tuple(n.strip() for item in items for n in str(item).split(",") if n.strip())
    return out or None


def _numbers(kind: type, count: int | None = None) -> Callable[[Any], tuple[Any, ...] | None]:
    def read(v: Any) -> tuple[Any, ...] | None:
        if v is None:
            return None
        items = v.split(",") if isinstance(v, str) else (list(v) if isinstance(v, (list, tuple)) else [v])
        try:
            values = tuple(kind(x) for x in items)
        except (TypeError, ValueError):
            raise Bad(f"'{v}': expected numbers separated by commas") from None
        if count is not None and len(values) != count:
            raise Bad(f"'{v}': expected {count} numbers")
        return values
    return read


def _stages(v: Any) -> tuple[str, ...]:
    out = tuple([v] if isinstance(v, str) else list(v))
    for s in out:
        if s not in STAGES:
            raise Bad(f"'{s}' is not a stage; stages: {', '.join(STAGES)}")
    return out


def _data(v: Any) -> Any:
    """A path (str or PathLike) or, from Python, a mapping of input name to an [N, ...] array."""
    if v is None or isinstance(v, Mapping):
        return v
    if isinstance(v, (str, os.PathLike)):
        return os.fspath(v)
    raise Bad(f"{type(v).__name__}: expected a path or a mapping of input name to samples")


def _path(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (str, os.PathLike)):
        return os.fspath(v)
    raise Bad(f"{v!r}: expected a path")


def _stats_files(v: Any) -> tuple[str, ...]:
    """Files (globs expanded in name order: quoted globs reach us unexpanded)."""
    files: list[str] = []
    for item in ([v] if isinstance(v, (str, os.PathLike)) else list(v)):
        item = _path(item)
        if any(c in item for c in "*?[") and not os.path.exists(item):
            found = sorted(glob.glob(item))
            if not found:
                raise Bad(f"'{item}' matches no file")
            files += found
        else:
            files.append(item)
    return tuple(files)


def _targets(v: Any) -> tuple[str, ...]:
    if not v:
        return ()
    try:
        return tuple(parse_targets(v, allow_all=False))
    except UsageError as exc:
        raise Bad(str(exc)) from None


def _io_types(v: Any) -> dict[str | None, str]:
    """"uint8" | "image=uint8" | ["float32", "image=uint8"] | {name: "uint8"} (None: every tensor)."""
    if isinstance(v, Mapping):
        items = [(str(k) if k is not None else None, t, f"{k}={t}") for k, t in v.items()]
    else:
        items = []
        for text in ([v] if isinstance(v, str) else list(v)):
            name, _, t = str(text).rpartition("=")
            items.append((name or None, t, text))
    out: dict[str | None, str] = {}
    for name, t, text in items:
        if t not in IO_TYPES:
            raise Bad(f"'{text}': expected [NAME=]TYPE, TYPE one of {', '.join(IO_TYPES)}")
        if name in out:
            raise Bad(f"a type for {name or 'every tensor'} given twice")
        out[name] = t
    return out


def _patterns(v: Any) -> tuple[str, ...]:
    """Python regular expressions (one, or a list), each checked to compile."""
    if not isinstance(v, (str, list, tuple)):
        raise Bad("expected a regular expression or a list of them")
    out = tuple([v] if isinstance(v, str) else list(v))
    for p in out:
        if not isinstance(p, str) or not p:
            raise Bad(f"{p!r}: expected a regular expression")
        try:
            re.compile(p)
        except re.error as exc:
            raise Bad(f"'{p}' is not a regular expression ({exc})") from None
    return out


RANGES = Kind(metavar="[NAME=]MIN,MAX", repeat=True, value=_input_ranges)
IO_TYPE_NAMES = Kind(metavar="[NAME=]" + "|".join(IO_TYPES), repeat=True, value=_io_types)
SHAPES = Kind(metavar="NAME=D0,D1,...", repeat=True, value=_input_shapes)
NAMES = Kind(metavar="NAME[,NAME]", repeat=True, value=_names)
RANGE = Kind(metavar="MIN,MAX", text=_one_range, value=_one_range)
DATA = Kind(metavar="PATH", text=_data, value=_data, path=True)
PATH = Kind(metavar="FILE", text=_path, value=_path, path=True)
STATS = Kind(metavar="FILE...", repeat=True, value=_stats_files, path=True)
TARGET_NAMES = Kind(metavar="NAME", repeat=True, value=_targets)
STAGE_NAMES = Kind(metavar="STAGE", repeat=True, value=_stages)
PATTERNS = Kind(metavar="PATTERN", repeat=True, value=_patterns)


def option(default: Any, kind: Kind, help: str, flag: str | None = None, key: str | None = None,
           manifest: bool = True, calibrate: bool = False, show_default: bool = True, in_recipe: bool = False) -> Any:
    """One option: a dataclass field with its flag, key and kind. ``flag`` defaults to the
    field name with dashes; ``key`` (manifest key and API keyword) to the field name;
    ``manifest=False`` keeps it out of manifests (per-run debugging); ``calibrate``: also an
    option of ``qconvert calibrate``; ``in_recipe``: a key of recipe files (it decides precision)."""
    meta = {"kind": kind, "help": help, "flag": flag, "key": key, "manifest": manifest, "calibrate": calibrate,
            "show_default": show_default, "in_recipe": in_recipe}
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class CalibrationOptions:
    """Where the ranges of a float graph's tensors come from (docs/calibration.md)."""

    data: Any = option(
        None, DATA, flag="--calibration-data", key="calibration_data", calibrate=True,
        help="Float graphs: .npz (an array per input), .npy (one input), a directory of them or of images, or a "
             "quoted glob ('shards/*.npz'); samples on axis 0, read a batch at a time. Ranges of tensors without "
             "a FakeQuant come from running the graph on them.")
    samples: int | None = option(
        None, _integer(1), flag="--calibration-samples", key="calibration_samples", calibrate=True,
        help="Use N samples (drawn with --seed when there are more).")
    batch: int = option(1, _integer(1), flag="--calibration-batch", key="calibration_batch", calibrate=True,
                        help="Samples run at once while calibrating.")
    workers: int | None = option(
        None, _integer(1), flag="--calibration-workers", key="calibration_workers", calibrate=True,
        help="Threads running the samples (default: the cores, at most 4); the ranges do not depend on it.")
    engine: str = option(
        "auto", _choice(CALIBRATION_ENGINES), flag="--calibration-engine", key="calibration_engine", calibrate=True,
        help="What runs the float model: litert (LiteRT's XNNPACK kernels, 2-4x faster), numpy (qconvert's "
             "kernels, TFLite's summation order: scales TensorFlow's to the last bit more often), or auto: litert "
             "where LiteRT can run the model, else numpy with a note.")
    method: str = option(
        "minmax", _choice(CALIBRATION_METHODS), flag="--calibration-method", key="calibration_method",
        calibrate=True,
        help="minmax: min and max over all samples (TensorFlow's); percentile: clip at --percentile; entropy: KL "
             "divergence (TensorRT); mse: the clipping with least quantization error.")
    percentile: float = option(
        99.99, _number(False, lambda x: None if 50.0 < x <= 100.0 else "expected a value in (50, 100]"), calibrate=True,
        help="For --calibration-method percentile.")
    seed: int = option(0, _integer(-2**63), calibrate=True, help="Seed for drawing calibration samples.")
    image_size: tuple[int, int] | None = option(
        None, Kind(metavar="H,W", text=_numbers(int, 2), value=_numbers(int, 2)), calibrate=True,
        help="Images as calibration data: their size (default: the input's).")
    mean: tuple[float, ...] = option(
        (0.0,), Kind(metavar="M[,M,M]", text=_numbers(float), value=_numbers(float)), calibrate=True,
        help="Images: subtracted from the pixels (0..255), per channel or one value.")
    std: tuple[float, ...] = option(
        (1.0,), Kind(metavar="S[,S,S]", text=_numbers(float), value=_numbers(float)), calibrate=True,
        help="Images: the pixels minus --mean are divided by this.")
    ranges_file: Any = option(
        None, Kind(metavar="FILE", text=_path, value=lambda v: v if isinstance(v, Mapping) else _path(v), path=True),
        help="JSON {tensor: [min, max]}: ranges by hand; they override calibration (from Python, also a mapping).")
    stats: tuple[str, ...] = option(
        (), STATS,
        help="Statistics files from `qconvert calibrate --save-stats` (shards of the data): merged, in place of "
             "--calibration-data. Globs and several files after one --stats are taken.")
    save_stats: str | None = option(
        None, Kind(metavar="FILE.npz", text=_path, value=_path, path=True), calibrate=True,
        help="Also write this run's calibration statistics (see `qconvert calibrate`).")
    histograms: bool = option(
        False, _flag(), calibrate=True,
        help="Record histograms even for minmax, so that a --save-stats file serves every --calibration-method.")

    @property
    def given(self) -> bool:
        """Whether any source of calibrated ranges was given (data, statistics or a ranges file)."""
        return self.data is not None or bool(self.stats) or self.ranges_file is not None


@dataclass(frozen=True)
class PrecisionOptions:
    """What is stored in how many bits, and what may stay float."""

    activations: str = option(
        "int8", _choice(("int8", "int16", "float")), calibrate=True, in_recipe=True,
        help="Float graphs with --calibration-data: int16 is TensorFlow's 16x8 mode (int16 activations, int8 "
             "weights, int64 biases). float: no calibration, activations stay float32 (TensorFlow's dynamic range: "
             "int8 weights of 1024 elements or more, hybrid ops; with --weights float16, float16 constants).")
    weights: str = option(
        "int8", _choice(("int8", "int4", "float16")), in_recipe=True,
        help="Weights without FakeQuant (float graphs): int8, or int4 per channel for CONV_2D and FULLY_CONNECTED "
             "(INT4 tensors, scale max|w|/7; activations stay int8), or float16 (with --activations float: every "
             "float constant in float16 behind a DEQUANTIZE, TensorFlow's float16 quantization).")
    block_size: int | None = option(
        None, _choice(BLOCK_SIZES), in_recipe=True,
        help="With --weights int4: FULLY_CONNECTED weights in blocks of N inputs with FLOAT16 scales, activations "
             "float (dynamic range; LiteRT's XNNPACK runs it).")
    int4_storage: str | None = option(
        None, _choice(("packed", "int8")), in_recipe=True,
        help="4-bit weights: packed INT4 (TensorFlow's, the default; CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) "
             "or int8 in [-7, 7] for runtimes without INT4 (Vela; the default for such --target).")
    per_tensor_weights: bool = option(
        False, _flag(), in_recipe=True,
        help="One weight scale per tensor for every CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED "
             "(TensorFlow's _experimental_disable_per_channel; for runtimes that take no per-channel weights), "
             "int8 and 16x8. A weight FakeQuant that is per channel is an error.")
    input_type: Mapping[str | None, str] = option(
        {}, IO_TYPE_NAMES,
        help="Type of the model's inputs (NAME= for one input; repeatable): int8 (the default; int16 with "
             "--activations int16), float32 (a QUANTIZE after the input), uint8 (a QUANTIZE from uint8, zero point "
             "+128), int16 (--activations int16 only). The inside of the model does not change.")
    output_type: Mapping[str | None, str] = option(
        {}, IO_TYPE_NAMES,
        help="Type of the model's outputs, as --input-type (float32: a DEQUANTIZE before the output; uint8: a "
             "QUANTIZE to uint8).")
    inference_type: str = option(
        "int8", _choice(("int8", "uint8")), in_recipe=True,
        help="QAT graphs: uint8 makes the whole model uint8 (inputs, activations and weights; int32 biases; op "
             "versions 1), as TensorFlow's frozen-graph converter writes it with inference_type=tf.uint8 "
             "(QUANTIZED_UINT8), the form older Edge TPU and SSD detector flows take. Weight FakeQuants must be "
             "per tensor (LiteRT runs no per-channel uint8 CONV_2D); weights without one are per tensor, "
             "asymmetric.")
    low_bit_activations: str = option(
        "error", _choice(("error", "8bit")), in_recipe=True,
        help="Activation FakeQuants under 8 bits: fail, or quantize their range at 8-bit resolution (a note per "
             "tensor).")
    default_ranges: tuple[float, float] | None = option(
        None, RANGE,
        help="Range for every tensor with none (dummy quantization, for experiments; each use is reported).")
    allow_float: bool = option(
        False, _flag(), in_recipe=True,
        help="Leave ops that cannot be quantized in float (DEQUANTIZE/QUANTIZE around them) instead of failing.")
    keep_float: tuple[str, ...] = option(
        (), PATTERNS, in_recipe=True,
        help="Keep the ops this Python regex finds (re.search) in an output tensor's name or in the op type (e.g. "
             "SOFTMAX) in float32, inside an int8 model (repeatable). A tensor-name match keeps that tensor float: "
             "its producer and every op reading it; DEQUANTIZE/QUANTIZE at the boundary, each reported "
             "(docs/converting.md). A pattern that matches no op is an error.")
    int16: tuple[str, ...] = option(
        (), PATTERNS, flag="--int16", in_recipe=True,
        help="Make the ops this Python regex finds (the --keep-float rule) 16x8 inside an int8 model (repeatable): "
             "int16 activations from their calibrated ranges, int8 weights, int64 biases, as TensorFlow's 16x8 mode "
             "writes each op; QUANTIZE int8<->int16 at the boundary, each reported. Needs --calibration-data.")
    allow_custom_ops: bool = option(
        False, _flag(),
        help="Write ops qconvert does not know (e.g. TFLite_Detection_PostProcess) as TFLite CUSTOM ops: custom code "
             "= the TF op name, options = the node's attributes as a FlexBuffer map; the op runs in float32 "
             "(DEQUANTIZE before it, QUANTIZE after it where a FakeQuant follows), as TensorFlow writes it.")
    recipe: str | None = option(
        None, PATH,
        help="A recipe file (.toml or .json; docs/converting.md, Recipes): the precision options below the table "
             "(keep_float, int16, activations, weights, ...) read from it, `version = 1`; one of the LiteRT "
             "Quantizer's JSON recipes is translated where it maps. A value given beside it (flag, manifest key, "
             "keyword) replaces the recipe's, with a note.")
    recipe_notes: tuple[str, ...] = field(default=(), compare=False, repr=False)  # reading the recipe: for the user

    @property
    def dynamic_range(self) -> bool:
        """Activations stay float (--activations float, or blockwise weights): no ranges, no
        calibration, no int8 activations."""
        return self.block_size is not None or self.activations == "float"

    @property
    def dynamic_range_flag(self) -> str:
        """The flag that made the activations float, for messages."""
        return f"--block-size {self.block_size}" if self.block_size is not None else "--activations float"


@dataclass(frozen=True)
class ConvertOptions:
    """Everything a user chooses about one conversion. Build it with :meth:`of` (flat keys, as
    in a manifest), :meth:`from_cli` or :meth:`from_manifest`; it is checked when built."""

    input_ranges: Mapping[str | None, tuple[float, float]] = option(
        {}, RANGES, flag="--inputs-range", key="inputs_range", calibrate=True,
        help="Float range of an input; NAME may be left out when there is one input. Repeatable.")
    input_shapes: Mapping[str, tuple[int, ...]] = option(
        {}, SHAPES, calibrate=True,
        help="Shape of an input (default: from the placeholder, unknown batch -> 1). Repeatable.")
    inputs: tuple[str, ...] | None = option(None, NAMES, calibrate=True,
                                            help="Input placeholders or internal tensors (default: all placeholders).")
    outputs: tuple[str, ...] | None = option(None, NAMES, calibrate=True, help="Output nodes (default: graph sinks).")
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions)
    precision: PrecisionOptions = field(default_factory=PrecisionOptions)
    targets: tuple[str, ...] = option(
        (), TARGET_NAMES, flag="--target", key="target",
        help="Convert for this runtime (" + ", ".join(TARGETS) + "; repeatable): choices follow it, and `qconvert "
             "check` runs on the file written; exit 1 when a target cannot run it.")
    dump_after: tuple[str, ...] = option(
        (), STAGE_NAMES, manifest=False,
        help="Print the IR after this stage: import or a pipeline stage (docs/architecture.md). Repeatable.")

    def __post_init__(self) -> None:
        _check(self)

    # -- building -------------------------------------------------------------------

    @classmethod
    def of(cls, **values: Any) -> ConvertOptions:
        """From flat keys (``calibration_data=…``, ``inputs_range=…``, as a manifest names them;
        the older Python names ``input_ranges`` and ``targets`` are taken too). Unknown keys and
        bad values are UsageErrors naming the key."""
        return cls().replace(**values)

    def replace(self, **values: Any) -> ConvertOptions:
        """A copy with some options changed (flat keys, as :meth:`of`)."""
        specs = _by_key()
        groups: dict[str, dict[str, Any]] = {"": {}, "calibration": {}, "precision": {}}
        for key, value in values.items():
            spec = specs.get(_ALIASES.get(key, key))
            if spec is None:
                raise UsageError(f"unknown option '{key}'; options: {', '.join(sorted(specs))}")
            groups[spec.group][spec.attr] = spec.read_value(value, f"{spec.key} = {value!r}")
        return _build(self, _with_recipe(groups, lambda s: f"{s.key}={_shown(groups[s.group][s.attr])}"))

    @classmethod
    def from_cli(cls, words: Mapping[str, Any], command: str = "convert") -> ConvertOptions:
        """From click's values, keyed by option key (None or empty = not given)."""
        groups: dict[str, dict[str, Any]] = {"": {}, "calibration": {}, "precision": {}}
        for spec in specs_for(command):
            raw = words.get(spec.key)
            if raw is None or (spec.kind.repeat and not raw) or (spec.kind.flag_only and raw is False):
                continue
            where = spec.flag if spec.kind.repeat or spec.kind.flag_only else f"{spec.flag} {raw}"
            groups[spec.group][spec.attr] = spec.read(lambda: spec.kind.from_text(raw), where)
        return _build(cls(), _with_recipe(groups, lambda s: f"{s.flag} on the command line"))

    @classmethod
    def from_manifest(cls, table: Mapping[str, Any], base: Path, where: str) -> ConvertOptions:
        """From a manifest table (only option keys; the caller removes its own), paths
        relative to ``base``. Unknown keys and bad values are UsageErrors naming ``where`` and the key."""
        return _build(cls(), cls.check_table(table, base, where), where)

    @staticmethod
    def check_table(table: Mapping[str, Any], base: Path, where: str) -> dict[str, dict[str, Any]]:
        """Each value of a manifest table read and checked alone (not the rules between them):
        the values by group and field."""
        specs = {s.key: s for s in manifest_specs()}
        groups: dict[str, dict[str, Any]] = {"": {}, "calibration": {}, "precision": {}}
        for key, value in table.items():
            spec = specs.get(key)
            if spec is None:
                raise UsageError(f"{where}: unknown key {key!r}")
            if spec.kind.path:
                value = _relative(value, base)
            groups[spec.group][spec.attr] = spec.read_value(value, f"{where}: {key} = {value!r}")
        try:
            return _with_recipe(groups, lambda s: f"manifest key {s.key!r}")
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None

    # -- reading --------------------------------------------------------------------

    def flat(self) -> dict[str, Any]:
        """Every option by key (the inverse of :meth:`of`)."""
        return {s.key: s.get(self) for s in SPECS}

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults, by key."""
        base = ConvertOptions()
        return {s.key: s.get(self) for s in SPECS if s.get(self) != s.get(base)}


_ALIASES = {"input_ranges": "inputs_range", "targets": "target"}


def _relative(value: Any, base: Path) -> Any:
    if isinstance(value, list):
        return [_relative(v, base) for v in value]
    return str(base / str(value)) if isinstance(value, str) else value


def _build(start: ConvertOptions, groups: Mapping[str, Mapping[str, Any]], where: str | None = None
           ) -> ConvertOptions:
    try:
        return dataclasses.replace(
            start, **groups[""],
            calibration=dataclasses.replace(start.calibration, **groups["calibration"]),
            precision=dataclasses.replace(start.precision, **groups["precision"]))
    except UsageError as exc:
        if where is None:
            raise
        raise UsageError(f"{where}: {exc}") from None


def boundary_problem(flag: str, name: str | None, t: str, bits: int) -> str | None:
    """Why a model of ``bits``-bit activations cannot have type ``t`` at this boundary (None: it
    can), one line naming the flag: the options check it for --activations int16, the ``inputs``
    stage again for a 16-bit QAT graph (legalize/io_types.py)."""
    where = f"{flag} {name + '=' if name else ''}{t}"
    if t == "int16" and bits != 16:
        return f"{where}: int16 is the boundary of a 16x8 model only; add --activations int16 (or use int8, uint8 or " \
               f"float32)"
    if bits == 16 and (t == "int8" or t == "uint8" and flag == "--output-type"):
        return f"{where}: a 16x8 model gives int16 or float32 (and takes uint8 too); " + (
            "TensorFlow ignores int8 there and writes int16" if t == "int8"
            else "LiteRT's QUANTIZE cannot make uint8 from int16")
    return None


def _check(o: ConvertOptions) -> None:
    """The rules between options (each alone was checked when read)."""
    c, p = o.calibration, o.precision
    if c.stats and c.data is not None:
        raise UsageError("give --calibration-data or --stats, not both (statistics already hold the samples)")
    if c.save_stats is not None and c.data is None:
        raise UsageError("--save-stats records statistics of --calibration-data: give the data")
    has_data = c.data is not None or bool(c.stats)
    if p.activations == "int16" and (not has_data and c.ranges_file is None or p.block_size is not None
                                     or p.default_ranges is not None):
        raise UsageError("--activations int16 is TensorFlow's 16x8 post-training mode: it needs --calibration-data "
                         "(or --ranges-file) and takes neither --block-size nor --default-ranges")
    if p.activations == "int16" and p.weights == "int4":
        raise UsageError("--weights int4 writes int8 activations (LiteRT's INT4 kernels take int8 inputs); "
                         "use --activations int16 with int8 weights")
    if p.per_tensor_weights and p.block_size is not None:
        raise UsageError(f"--per-tensor-weights with --block-size {p.block_size}: blockwise weights have a scale per "
                         f"block; drop one of the two")
    if p.per_tensor_weights and p.weights == "int4":
        raise UsageError("--per-tensor-weights with --weights int4: 4-bit weights are per channel only (TensorFlow has "
                         "no per-tensor INT4 mode to match); use int8 weights with --per-tensor-weights")
    if p.per_tensor_weights and p.activations == "float":
        raise UsageError("--per-tensor-weights with --activations float: dynamic-range weights are per channel, as "
                         "TensorFlow writes them (its hybrid kernels take them so); drop one of the two")
    if p.weights == "float16" and p.activations != "float":
        raise UsageError("--weights float16 keeps the activations float: give --activations float with it")
    if p.activations == "float":
        given = [f for f, on in (("--calibration-data", c.data is not None), ("--stats", bool(c.stats)),
                                 ("--ranges-file", c.ranges_file is not None),
                                 ("--default-ranges", p.default_ranges is not None)) if on]
        if given:
            raise UsageError(f"--activations float keeps activations float (dynamic range, no calibration): drop "
                             f"{given[0]}, or drop --activations float for int8 activations")
        if p.weights == "int4" and p.block_size is None:
            raise UsageError("--activations float with --weights int4 is blockwise: give --block-size N "
                             f"({', '.join(map(str, BLOCK_SIZES))})")
    for flag, types in (("--input-type", p.input_type), ("--output-type", p.output_type)):
        for name, t in types.items():
            where = f"{flag} {name + '=' if name else ''}{t}"
            problem = boundary_problem(flag, name, t, 16) if p.activations == "int16" else None
            if problem:
                raise UsageError(problem)
            if p.dynamic_range and t != "float32":
                raise UsageError(f"{where}: {p.dynamic_range_flag} keeps activations float, so inputs and outputs are "
                                 f"float32; drop {flag}")
    if p.keep_float and (p.dynamic_range or p.activations != "int8" or p.inference_type != "int8"):
        why = (f"{p.dynamic_range_flag} keeps every activation float already" if p.dynamic_range
               else f"--activations {p.activations}: float islands are built inside int8 models only"
               if p.activations != "int8" else "--inference-type uint8: float islands are built inside int8 models only")
        raise UsageError(f"--keep-float with {why}; drop one of the two")
    if p.int16:
        _check_int16(o, has_data)
    if p.inference_type == "uint8":
        _check_uint8(o)
    if p.block_size is not None:
        bad = [t for t in o.targets if t not in BLOCKWISE_TARGETS]
        if bad:
            raise UsageError(f"--block-size with --target {bad[0]}: blockwise INT4 weights run only in LiteRT's "
                             f"XNNPACK (--target litert); drop --block-size (per-channel --weights int4) for {bad[0]}")
        if p.weights != "int4":
            raise UsageError(f"--block-size {p.block_size}: blockwise weights are int4 (--weights int4) in blocks of "
                             f"{', '.join(map(str, BLOCK_SIZES))}")
        if has_data or c.ranges_file is not None:
            raise UsageError("--block-size keeps activations float (dynamic range): drop --calibration-data and "
                             "--ranges-file, or drop --block-size for int8 activations with int4 weights")


def _check_int16(o: ConvertOptions, has_data: bool) -> None:
    """--int16 PATTERN: 16x8 islands in an int8 model calibrated here."""
    c, p = o.calibration, o.precision
    both = [x for x in p.int16 if x in p.keep_float]
    if both:
        raise UsageError(f"--int16 '{both[0]}' and --keep-float '{both[0]}': one precision per pattern; drop one")
    if p.dynamic_range or p.activations != "int8" or p.inference_type != "int8":
        why = (f"{p.dynamic_range_flag} keeps every activation float" if p.dynamic_range
               else f"--activations {p.activations}: int16 islands are built inside int8 models"
               if p.activations != "int8" else "--inference-type uint8: int16 islands are built inside int8 models")
        raise UsageError(f"--int16 with {why}; drop one of the two")
    if not has_data and c.ranges_file is None:
        raise UsageError("--int16 gives int16 tensors the parameters of their calibrated ranges (TensorFlow's 16x8 "
                         "mode): it needs --calibration-data, --stats or --ranges-file")
    if p.weights != "int8":
        raise UsageError(f"--int16 with --weights {p.weights}: a 16x8 op has int8 weights; drop one of the two")


def _check_uint8(o: ConvertOptions) -> None:
    """--inference-type uint8: TensorFlow's QUANTIZED_UINT8 path, which takes QAT graphs only."""
    c, p = o.calibration, o.precision
    given = [f for f, on in (("--calibration-data", c.data is not None), ("--stats", bool(c.stats)),
                             ("--ranges-file", c.ranges_file is not None),
                             ("--default-ranges", p.default_ranges is not None)) if on]
    if given:
        raise UsageError(f"--inference-type uint8 with {given[0]}: a whole-uint8 model is TensorFlow's QAT frozen-graph "
                         f"mode (every range from a FakeQuant); its post-training quantizer writes no uint8 model. Drop "
                         f"{given[0]}, or keep int8 inside with --input-type uint8 --output-type uint8")
    if p.activations != "int8":
        raise UsageError(f"--inference-type uint8 with --activations {p.activations}: a uint8 model has uint8 "
                         f"activations; drop one of the two")
    if p.weights != "int8" or p.block_size is not None:
        flag = f"--block-size {p.block_size}" if p.block_size is not None else f"--weights {p.weights}"
        raise UsageError(f"--inference-type uint8 with {flag}: a uint8 model has 8-bit weights; drop one of the two")
    for flag, types in (("--input-type", p.input_type), ("--output-type", p.output_type)):
        for name, t in types.items():
            if t != "uint8":
                raise UsageError(f"{flag} {name + '=' if name else ''}{t} with --inference-type uint8: the inputs "
                                 f"and outputs of a uint8 model are uint8 (as TensorFlow writes them); drop {flag}, "
                                 f"or use --inference-type int8 for a {t} boundary")


# ---------------------------------------------------------------------------------- the declaration


class Spec:
    """One option as declared: where it lives in :class:`ConvertOptions` and how it is read."""

    __slots__ = ("attr", "calibrate", "default", "flag", "group", "help", "in_recipe", "key", "kind", "manifest",
                 "show_default")
    group: str  # "" (top level), "calibration" or "precision"
    attr: str  # the field name in its group
    key: str  # manifest key and API keyword
    flag: str  # command-line flag
    kind: Kind
    help: str
    default: Any
    manifest: bool
    calibrate: bool
    show_default: bool
    in_recipe: bool

    def __init__(self, group: str, attr: str, key: str, flag: str, kind: Kind, help: str, default: Any,
                 manifest: bool, calibrate: bool, show_default: bool, in_recipe: bool) -> None:
        self.group, self.attr, self.key, self.flag, self.kind, self.help = group, attr, key, flag, kind, help
        self.default, self.manifest, self.calibrate = default, manifest, calibrate
        self.show_default, self.in_recipe = show_default, in_recipe

    def get(self, options: ConvertOptions) -> Any:
        return getattr(getattr(options, self.group) if self.group else options, self.attr)

    def read(self, thunk: Callable[[], Any], where: str) -> Any:
        try:
            return thunk()
        except Bad as exc:
            text = str(exc)
            quoted, sep, rest = text[1:].partition("': ")
            if text.startswith("'") and sep and quoted in where:  # the value is named once
                text = rest
            raise UsageError(f"{where}: {text}") from None

    def read_value(self, value: Any, where: str) -> Any:
        if value is None and self.default is None:  # "not given", from Python
            return None
        return self.read(lambda: self.kind.from_value(value), where)


def _specs() -> tuple[Spec, ...]:
    out = []
    for group, cls in (("", ConvertOptions), ("calibration", CalibrationOptions), ("precision", PrecisionOptions)):
        for f in dataclasses.fields(cls):
            m = f.metadata
            if "kind" not in m:
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append(Spec(group, f.name, m["key"] or f.name, m["flag"] or "--" + f.name.replace("_", "-"),
                            m["kind"], m["help"], default, m["manifest"], m["calibrate"], m["show_default"],
                            m["in_recipe"]))
    return tuple(out)


SPECS: tuple[Spec, ...] = _specs()


def _by_key() -> dict[str, Spec]:
    return {s.key: s for s in SPECS}


def specs_for(command: str) -> list[Spec]:
    """The options a command takes, in declaration order: ``convert`` all but --histograms;
    ``calibrate`` those marked for it; ``tune`` convert's but the precision patterns and recipe (tune
    chooses them), statistics files, targets and dumps."""
    if command == "calibrate":
        return [s for s in SPECS if s.calibrate]
    if command == "tune":  # tune chooses --keep-float/--int16 itself, calibrates once, checks no target
        return [s for s in SPECS if s.key not in ("histograms", "keep_float", "int16", "recipe", "dump_after",
                                                  "save_stats", "stats", "target")]
    return [s for s in SPECS if s.key != "histograms"]


def manifest_specs() -> list[Spec]:
    return [s for s in SPECS if s.manifest]


def recipe_specs() -> list[Spec]:
    """The options a recipe file holds (they decide what precision each op gets)."""
    return [s for s in SPECS if s.in_recipe]


def _with_recipe(groups: dict[str, dict[str, Any]], given: Callable[[Spec], str]) -> dict[str, dict[str, Any]]:
    """``groups`` (values given, by group and field) with the values of the recipe they name under
    them: a value given beside the recipe wins, with a note (``given(spec)`` says where it came
    from). Unknown keys and bad values are UsageErrors naming the recipe and the key."""
    precision = groups["precision"]
    if "recipe" not in precision:
        return groups
    path = precision["recipe"]
    if path is None:
        precision["recipe_notes"] = ()
        return groups
    from qconvert.recipe import load_recipe  # here: it brings tomllib (1.5 ms of every start-up)

    recipe = load_recipe(path)
    where = f"recipe '{path}'"
    specs = {s.key: s for s in recipe_specs()}
    notes = list(recipe.notes)
    for key, value in recipe.values.items():
        spec = specs.get(key)
        if spec is None:
            raise UsageError(f"{where}: unknown key {key!r}; a recipe holds version and "
                             f"{', '.join(sorted(specs))}")
        read = spec.read_value(value, f"{where}: {key} = {value!r}")
        if spec.attr in groups[spec.group]:
            if groups[spec.group][spec.attr] != read:
                notes.append(f"{where}: {given(spec)} replaces the recipe's {key} = {_shown(value)} (a value given "
                             f"beside a recipe wins)")
            continue
        groups[spec.group][spec.attr] = read
    precision["recipe_notes"] = tuple(notes)
    return groups


def _shown(value: Any) -> str:
    return repr(list(value) if isinstance(value, tuple) else value)


def iter_help() -> Iterator[tuple[Spec, str]]:
    """(spec, help with its default) for the docs and the command line."""
    for s in SPECS:
        shown = s.show_default and not (s.default is None or s.default is False or s.default in ((), {}))
        default = ",".join(map(str, s.default)) if isinstance(s.default, tuple) else s.default
        yield s, s.help + (f" [default: {default}]" if shown else "")


def reference() -> str:
    """docs/cli.md's option table: one row per option, with its flag, manifest key, value and default."""
    lines = ["# Conversion options", "",
             "Generated from `qconvert/options.py` (`python -m qconvert.options > docs/cli.md`); a test keeps it "
             "equal. Every option is a command-line flag of `qconvert convert` (those marked * also of "
             "`qconvert calibrate`), a key of a batch manifest's `[defaults]` and `[[model]]` tables (relative "
             "paths are relative to the manifest), and a keyword of `qconvert.convert()` and "
             "`ConvertOptions.of()`.", "",
             "| flag | manifest key / keyword | value | default | what it does |", "|---|---|---|---|---|"]
    for s, text in iter_help():
        value = "(switch)" if s.kind.flag_only else s.kind.metavar + (" (repeatable)" if s.kind.repeat else "")
        default = "" if s.default is None or s.default in ((), {}) else (
            ",".join(map(str, s.default)) if isinstance(s.default, tuple) else str(s.default))
        key = s.key if s.manifest else f"{s.key} (not in manifests)"
        lines.append(f"| `{s.flag}`{' *' if s.calibrate else ''} | `{key}` | `{value}` | {default} | "
                     f"{s.help.replace('|', '/')} |")
    lines += ["", "A recipe file (`--recipe`) holds `version = 1` and these keys, the options that decide what "
              "precision each op gets: " + ", ".join(f"`{s.key}`" for s in recipe_specs()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference())
