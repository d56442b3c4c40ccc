"""Command line: a thin click layer over ``qconvert.api``.

``qconvert MODEL.pb …`` is ``qconvert convert MODEL.pb …``. Exit codes: 0 done,
1 model or conversion error (one line naming the node, the tensor and the fix),
2 usage error. A traceback appears only with ``--debug``. Heavy modules are
imported inside the commands so that ``--help`` stays fast.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Sequence

import click

COMMANDS = ("convert", "calibrate", "batch", "merge-reports", "dump", "run", "compare", "check")


class _DefaultToConvert(click.Group):
    """A group where a first argument that is not a command means ``convert``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["convert", *args]
        return super().parse_args(ctx, _several_stats(args))


def _several_stats(args: list[str]) -> list[str]:
    """``--stats a.npz b.npz`` as ``--stats a.npz --stats b.npz``: the .npz words after one
    ``--stats`` value (a model is never a .npz)."""
    out: list[str] = []
    taking: bool | str = False
    for a in args:
        if a == "--stats":
            out.append(a)
            taking = "value"
        elif taking == "value":
            out.append(a)
            taking = True
        elif taking is True and not a.startswith("-") and a.endswith(".npz"):
            out += ["--stats", a]
        else:
            out.append(a)
            taking = a.startswith("--stats=")
    return out


class _StageName(click.ParamType):
    """A stage of the pipeline, checked against ``qconvert.converter.pipeline.STAGE_NAMES``
    when the option is given (the pipeline is imported to convert anyway; --help stays light)."""

    name = "stage"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from qconvert.converter.pipeline import STAGE_NAMES

        if value not in STAGE_NAMES:
            self.fail(f"'{value}' is not a stage; stages: {', '.join(STAGE_NAMES)}", param, ctx)
        return str(value)


def _parse_range(text: str) -> tuple[str | None, tuple[float, float]]:
    from qconvert.args import parse_range

    try:
        return parse_range(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _parse_shape(text: str) -> tuple[str, list[int]]:
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"'{text}': expected NAME=D0,D1,..., e.g. input=1,224,224,3")
    try:
        shape = [int(d) for d in dims.split(",")]
    except ValueError:
        raise click.BadParameter(f"'{text}': dimensions must be integers") from None
    if any(d <= 0 for d in shape):
        raise click.BadParameter(f"'{text}': dimensions must be positive")
    return name, shape


def _names(values: Sequence[str]) -> list[str] | None:
    out = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return out or None


def _options(decorators: Sequence[Any]) -> Any:
    """Apply a list of click options (shared by ``convert`` and ``calibrate``) in order."""
    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


_MODEL_OPTIONS = [
    click.option("--inputs-range", "ranges", multiple=True, metavar="[NAME=]MIN,MAX",
                 help="Float range of an input; NAME may be left out when there is one input. Repeatable."),
    click.option("--input-shapes", "shapes", multiple=True, metavar="NAME=D0,D1,...",
                 help="Shape of an input (default: from the placeholder, unknown batch -> 1). Repeatable."),
    click.option("--inputs", "inputs", multiple=True, metavar="NAME[,NAME]", help="Input placeholders (default: all)."),
    click.option("--outputs", "outputs", multiple=True, metavar="NAME[,NAME]",
                 help="Output nodes (default: graph sinks)."),
]
_CALIBRATION_OPTIONS = [
    click.option("--calibration-data", "calibration_data", type=click.Path(path_type=str), metavar="PATH",
                 help="Float graphs: .npz (an array per input), .npy (one input), a directory of them or of "
                      "images, or a quoted glob ('shards/*.npz'); samples on axis 0, read a batch at a time. "
                      "Ranges of tensors without a FakeQuant come from running the graph on them."),
    click.option("--calibration-samples", "calibration_samples", type=click.IntRange(min=1), metavar="N",
                 help="Use N samples (drawn with --seed when there are more)."),
    click.option("--calibration-batch", "calibration_batch", type=click.IntRange(min=1), default=1, show_default=True,
                 metavar="B", help="Samples run at once while calibrating."),
    click.option("--calibration-workers", "calibration_workers", type=click.IntRange(min=1), metavar="N",
                 help="Threads running the samples (default: the cores, at most 4); the ranges do not depend on it."),
    click.option("--calibration-engine", "calibration_engine", type=click.Choice(["numpy", "litert"]),
                 default="numpy", show_default=True,
                 help="What runs the float model: numpy (qconvert's kernels) or litert (LiteRT's XNNPACK "
                      "kernels, about 3x faster; ranges equal within float32 rounding, not bit for bit)."),
    click.option("--calibration-method", "calibration_method",
                 type=click.Choice(["minmax", "percentile", "entropy", "mse"]), default="minmax", show_default=True,
                 help="minmax: min and max over all samples (TensorFlow's); percentile: clip at --percentile; "
                      "entropy: KL divergence (TensorRT); mse: the clipping with least quantization error."),
    click.option("--percentile", "percentile", type=float, default=99.99, show_default=True,
                 help="For --calibration-method percentile."),
    click.option("--seed", "seed", type=int, default=0, show_default=True,
                 help="Seed for drawing calibration samples."),
    click.option("--image-size", "image_size", metavar="H,W",
                 help="Images as calibration data: their size (default: the input's)."),
    click.option("--mean", "mean", metavar="M[,M,M]", default="0", show_default=True,
                 help="Images: subtracted from the pixels (0..255), per channel or one value."),
    click.option("--std", "std", metavar="S[,S,S]", default="1", show_default=True,
                 help="Images: the pixels minus --mean are divided by this."),
]
_ACTIVATIONS_OPTION = [
    click.option("--activations", "activations", type=click.Choice(["int8", "int16"]), default="int8",
                 show_default=True,
                 help="Float graphs with --calibration-data: int16 is TensorFlow's 16x8 mode (int16 activations, "
                      "int8 weights, int64 biases)."),
]


@click.group(cls=_DefaultToConvert, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="qconvert", message="qconvert %(version)s")
def cli() -> None:
    """Convert TensorFlow QAT graphs (.pb) to fully-int8 TFLite models.

    \b
    qconvert MODEL.pb --inputs-range input=-1,1      (same as: qconvert convert ...)
    qconvert calibrate MODEL.pb --calibration-data shard/ --save-stats s.npz
    qconvert batch models/ --manifest models.toml --report report.json [--shard 2/4]
    qconvert merge-reports shard1.json shard2.json -o report.json
    qconvert dump MODEL.tflite
    qconvert run MODEL.tflite --input x.npz
    qconvert check MODEL.tflite --target tflm --target ethos-u55-128
    qconvert compare MODEL.pb MODEL.tflite --data x.npz
    """


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "output", type=click.Path(path_type=str), help="Output .tflite (default: MODEL with .tflite).")
@_options(_MODEL_OPTIONS)
@click.option("--dump-after", "dump_after", multiple=True, type=_StageName(), metavar="STAGE",
              help="Print the IR after this stage: import or a pipeline stage (README: What it does). Repeatable.")
@click.option("--report", "report", metavar="FILE|-", help="Write a JSON report (format: see README); - for stdout.")
@click.option("--default-ranges", "default_ranges", metavar="MIN,MAX",
              help="Range for every tensor with none (dummy quantization, for experiments; each use is reported).")
@click.option("--allow-float", "allow_float", is_flag=True,
              help="Leave ops that cannot be quantized in float (DEQUANTIZE/QUANTIZE around them) instead of failing.")
@_options(_CALIBRATION_OPTIONS)
@click.option("--stats", "stats", multiple=True, type=click.Path(path_type=str), metavar="FILE...",
              help="Statistics files from `qconvert calibrate --save-stats` (shards of the data): merged, in place "
                   "of --calibration-data. Globs and several files after one --stats are taken.")
@click.option("--save-stats", "save_stats", type=click.Path(path_type=str), metavar="FILE.npz",
              help="Also write this run's calibration statistics (see `qconvert calibrate`).")
@click.option("--ranges-file", "ranges_file", type=click.Path(path_type=str), metavar="FILE",
              help="JSON {tensor: [min, max]}: ranges by hand; they override calibration.")
@click.option("--int4-storage", "int4_storage", type=click.Choice(["packed", "int8"]), default=None,
              help="4-bit weights: packed INT4 (TensorFlow's, the default; CONV_2D, DEPTHWISE_CONV_2D, "
                   "FULLY_CONNECTED) or int8 in [-7, 7] for runtimes without INT4 (Vela; the default for such "
                   "--target).")
@click.option("--target", "targets", multiple=True, metavar="NAME",
              help="Convert for this runtime (litert, litert-ref, tflm, ethos-u55-128, ethos-u55-256, ethos-u65-256, "
                   "ethos-u85-256; repeatable): choices follow it, and `qconvert check` runs on the file written; "
                   "exit 1 when a target cannot run it.")
@_options(_ACTIVATIONS_OPTION)
@click.option("--weights", "weights", type=click.Choice(["int8", "int4"]), default="int8", show_default=True,
              help="Weights without FakeQuant (float graphs): int8, or int4 per channel for CONV_2D and "
                   "FULLY_CONNECTED (INT4 tensors, scale max|w|/7; activations stay int8).")
@click.option("--block-size", "block_size", type=click.Choice(["32", "64", "128", "256"]), default=None,
              help="With --weights int4: FULLY_CONNECTED weights in blocks of N inputs with FLOAT16 scales, "
                   "activations float (dynamic range; LiteRT's XNNPACK runs it).")
@click.option("--low-bit-activations", "low_bit_activations", type=click.Choice(["error", "8bit"]),
              default="error", show_default=True,
              help="Activation FakeQuants under 8 bits: fail, or quantize their range at 8-bit resolution "
                   "(a note per tensor).")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def convert(model: str, output: str | None, ranges: tuple[str, ...], shapes: tuple[str, ...],
            inputs: tuple[str, ...], outputs: tuple[str, ...], dump_after: tuple[str, ...], report: str | None,
            default_ranges: str | None, allow_float: bool, calibration_data: str | None,
            calibration_samples: int | None, calibration_batch: int, calibration_method: str, percentile: float,
            seed: int, image_size: str | None, mean: str, std: str,
            ranges_file: str | None, activations: str, weights: str, block_size: str | None,
            int4_storage: str | None, targets: tuple[str, ...], low_bit_activations: str, debug: bool,
            stats: tuple[str, ...], save_stats: str | None, calibration_workers: int | None,
            calibration_engine: str) -> None:
    """Convert a frozen GraphDef MODEL.pb (QAT, or float with --calibration-data) to a fully-int8 TFLite model."""
    defaults = None
    if default_ranges is not None:
        name, defaults = _parse_range(default_ranges)
        if name is not None:
            raise click.BadParameter(f"'{default_ranges}': expected MIN,MAX", param_hint="--default-ranges")
    input_ranges = _input_ranges(ranges)
    input_shapes = dict(_parse_shape(s) for s in shapes)
    size = _numbers(image_size, "--image-size", int, 2) if image_size else None
    means, stds = _numbers(mean, "--mean", float), _numbers(std, "--std", float)

    def work() -> None:
        from qconvert.converter import api
        from qconvert.errors import ConversionError
        from qconvert.io import write_atomic
        from qconvert.tools.targets import cannot_run, conversion_choices, has_4bit_weights

        target = output or str(api.default_output(model))
        t0 = time.perf_counter()
        devices = _targets(targets)
        storage, target_notes = conversion_choices(devices, int4_storage, int(block_size) if block_size else None)
        try:
            result = api.convert_graph(model, input_ranges=input_ranges, input_shapes=input_shapes,
                                       inputs=_names(inputs), outputs=_names(outputs), dump_after=dump_after,
                                       default_ranges=defaults, allow_float=allow_float,
                                       check_each_pass=debug, calibration_data=calibration_data,
                                       calibration_samples=calibration_samples,
                                       calibration_batch=calibration_batch, calibration_workers=calibration_workers,
                                       calibration_engine=calibration_engine,
                                       calibration_method=calibration_method, percentile=percentile, seed=seed,
                                       image_size=size, mean=means, std=stds,
                                       ranges_file=ranges_file, int4_storage=storage,
                                       low_bit_activations=low_bit_activations, weights=weights,
                                       block_size=int(block_size) if block_size else None,
                                       activations=activations, stats=_stats_files(stats),
                                       save_stats=save_stats, progress=_calibration_progress())
            write_atomic(target, result.model)
        except Exception as exc:
            if report:
                from qconvert.tools.batch import build_record, write_report

                write_report(report, [build_record(model, target, error=exc, seconds=time.perf_counter() - t0)])
            raise
        notes = list(result.notes) + (target_notes if has_4bit_weights(result.graph) else [])
        checked = None
        if devices:
            from qconvert.tools.check import check_model

            checked = check_model(target, devices)
        if report:
            from qconvert.tools.batch import build_record, write_report

            record = build_record(model, target, result.model, notes, seconds=time.perf_counter() - t0)
            if checked is not None:
                record["target_check"] = checked
            write_report(report, [record])
        for note in notes:
            click.echo(f"qconvert: note: {note}", err=True)
        g = result.graph
        click.echo(f"wrote {target}: {len(g.nodes)} ops, {len(result.model)} bytes, "
                   f"inputs {', '.join(_io(g, n) for n in g.inputs)}; outputs {', '.join(_io(g, n) for n in g.outputs)}",
                   err=report == "-")
        if checked is not None:
            for e in checked["targets"]:
                click.echo(f"{e['target']}: {e['verdict']} ({e['basis']}): {e['summary']}", err=report == "-")
            failure = cannot_run(checked)
            if failure is not None:
                raise ConversionError(f"wrote {target}, but {failure}")

    _guard(work, debug)


def _stats_files(values: tuple[str, ...]) -> list[str]:
    """``--stats`` values, globs expanded in name order (quoted globs reach us unexpanded)."""
    import glob

    from qconvert.errors import UsageError

    files: list[str] = []
    for v in values:
        if any(c in v for c in "*?[") and not os.path.exists(v):
            found = sorted(glob.glob(v))
            if not found:
                raise UsageError(f"--stats '{v}' matches no file")
            files += found
        else:
            files.append(v)
    return files


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@_options(_MODEL_OPTIONS)
@_options(_CALIBRATION_OPTIONS)
@_options(_ACTIVATIONS_OPTION)
@click.option("--save-stats", "save_stats", required=True, type=click.Path(path_type=str), metavar="FILE.npz",
              help="Where to write the statistics (.npz): per tensor min/max, and fixed-bin histograms for "
                   "the histogram methods (or with --histograms).")
@click.option("--histograms", is_flag=True,
              help="Record histograms even for minmax, so that the file serves every --calibration-method.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def calibrate(model: str, ranges: tuple[str, ...], shapes: tuple[str, ...], inputs: tuple[str, ...],
              outputs: tuple[str, ...], calibration_data: str | None, calibration_samples: int | None,
              calibration_batch: int, calibration_method: str, percentile: float, seed: int, image_size: str | None,
              mean: str, std: str, activations: str, save_stats: str, histograms: bool, debug: bool,
              calibration_workers: int | None, calibration_engine: str) -> None:
    """Run the float graph MODEL.pb on --calibration-data and save its statistics, without converting.

    \b
    Shards of the data calibrate anywhere (CI jobs, Dask workers); their files merge:
      qconvert calibrate m.pb --calibration-data shard0/ --save-stats s0.npz
      qconvert calibrate m.pb --calibration-data shard1/ --save-stats s1.npz
      qconvert convert m.pb --stats s0.npz s1.npz      (= one run over shard0 and shard1)
    Use the same model options (--inputs, --outputs, --input-shapes, --activations) everywhere:
    the file records the graph's fingerprint, and a different graph is refused.
    """
    input_ranges = _input_ranges(ranges)
    input_shapes = dict(_parse_shape(s) for s in shapes)
    size = _numbers(image_size, "--image-size", int, 2) if image_size else None
    means, stds = _numbers(mean, "--mean", float), _numbers(std, "--std", float)

    def work() -> None:
        from qconvert.converter import api
        from qconvert.errors import UsageError

        if calibration_data is None:
            raise UsageError("calibrate needs --calibration-data")
        t0 = time.perf_counter()
        stats = api.calibrate_graph(model, calibration_data, input_ranges=input_ranges, input_shapes=input_shapes,
                                    inputs=_names(inputs), outputs=_names(outputs),
                                    calibration_samples=calibration_samples, calibration_batch=calibration_batch,
                                    calibration_method=calibration_method, percentile=percentile, seed=seed,
                                    image_size=size, mean=means, std=stds, activations=activations,
                                    save_stats=save_stats, histograms=histograms, progress=_calibration_progress(),
                                    calibration_workers=calibration_workers, calibration_engine=calibration_engine)
        kind = "min/max and histograms" if stats.hist is not None else "min/max"
        click.echo(f"wrote {save_stats}: {kind} of {len(stats.lo)} tensor(s) over {stats.samples} sample(s) "
                   f"in {time.perf_counter() - t0:.2f} s (graph {stats.fingerprint[:12]})", err=True)

    _guard(work, debug)


def _input_ranges(ranges: tuple[str, ...]) -> dict[str | None, tuple[float, float]]:
    input_ranges: dict[str | None, tuple[float, float]] = {}
    for text in ranges:
        name, rng = _parse_range(text)
        if name in input_ranges:
            raise click.BadParameter(f"range for {name or 'the input'} given twice", param_hint="--inputs-range")
        input_ranges[name] = rng
    return input_ranges


def _targets(names: tuple[str, ...]) -> list[str]:
    """--target values, checked against the known targets (a usage error otherwise)."""
    if not names:
        return []
    from qconvert.tools.check import parse_targets

    return parse_targets(names)



@cli.command()
@click.argument("models", nargs=-1, metavar="MODEL|DIR|GLOB...")
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False, path_type=str),
              help="TOML manifest: [defaults] and [[model]] entries (see README).")
@click.option("-j", "--jobs", "jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: CPU count; 1 converts in this process).")
@click.option("--report", "report", metavar="FILE|-", help="Write a JSON report; - for stdout.")
@click.option("--check", is_flag=True, help="Convert in memory, compare with the existing outputs, write nothing.")
@click.option("--shard", "shard", metavar="K/N",
              help="Convert only shard K of N of the model list (every N-th model from the K-th): one CI job per "
                   "shard, then `qconvert merge-reports`.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def batch(models: tuple[str, ...], manifest: str | None, jobs: int | None, report: str | None, check: bool,
          shard: str | None, debug: bool) -> None:
    """Convert many models (files, directories of *.pb, globs) in parallel.

    Exit 0 when all converted (or, with --check, all up to date), 1 otherwise.
    """

    def work() -> None:
        from qconvert.tools.batch import batch as run_batch
        from qconvert.tools.batch import parse_shard

        status = run_batch(models, manifest, jobs, report, check, echo=lambda s: click.echo(s, err=True),
                           shard=parse_shard(shard) if shard else None)
        if status:
            sys.exit(status)

    _guard(work, debug)


@cli.command("merge-reports")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...")
@click.option("-o", "--output", "output", default="-", show_default=True, metavar="FILE|-",
              help="The merged report; - for stdout.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def merge_reports(reports: tuple[str, ...], output: str, debug: bool) -> None:
    """Join the JSON reports of `batch --shard K/N` (one per CI job) into one report.

    Exit 0 when every model converted, 1 when any failed or a shard is missing.
    """

    def work() -> None:
        import json

        from qconvert.io import write_atomic
        from qconvert.tools.batch import merge_reports as merge

        doc = merge(reports)
        text = json.dumps(doc, indent=2) + "\n"
        if output == "-":
            click.echo(text, nl=False)
        else:
            write_atomic(output, text.encode("utf-8"))
        s = doc["summary"]
        click.echo(f"merged {len(reports)} report(s): {s['ok']}/{s['total']} ok, {s['failed']} failed", err=True)
        if s["failed"]:
            sys.exit(1)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text (shape: see README).")
@click.option("--ops", "sel_ops", is_flag=True, help="Only the operators (with requant checks) and totals.")
@click.option("--tensors", "sel_tensors", is_flag=True, help="Only the tensors and totals.")
@click.option("--metadata", "sel_metadata", is_flag=True, help="Only the model header and metadata entries.")
@click.option("--tensor", "tensor", metavar="NAME_OR_INDEX", help="One tensor's values, dequantized, with a histogram.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def dump(model: str, as_json: bool, sel_ops: bool, sel_tensors: bool, sel_metadata: bool, tensor: str | None,
         debug: bool) -> None:
    """Show what is in a .tflite model: ops, tensors, quantization, metadata.

    With no selector everything but --tensor is shown; selectors combine.
    """
    sections = [name for name, on in (("ops", sel_ops), ("tensors", sel_tensors), ("metadata", sel_metadata)) if on]

    def work() -> None:
        from qconvert.tools.dump import dump_model

        click.echo(dump_model(model, as_json=as_json, sections=sections, tensor=tensor), nl=False)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=click.Path(path_type=str))
@click.option("--input", "input_path", required=True, type=click.Path(path_type=str), metavar="X.npz",
              help="Input arrays: .npz (one per input, by name) or .npy (one input); an extra leading axis = N samples.")
@click.option("-o", "--output", "output", type=click.Path(path_type=str), metavar="OUT.npz",
              help="Write the outputs (with --trace: every tensor) to this .npz, by tensor name.")
@click.option("--trace", is_flag=True, help="Every intermediate tensor: a table per operator, and into --output.")
@click.option("--quantize-inputs", is_flag=True,
              help="Quantize float input data with the input's scale and zero point (the only float step).")
@click.option("--integer-fc", "integer_fc", is_flag=True,
              help="FULLY_CONNECTED by the 31-bit multiplier (TFLite's classic integer kernel, as microcontroller "
                   "runtimes run it) instead of LiteRT 2.3's double-precision reference arithmetic.")
@click.option("--runtime", type=click.Choice(["litert-ref", "tflm"]), default="litert-ref", show_default=True,
              help="Whose integer arithmetic to reproduce: LiteRT's reference kernels or TFLite Micro's.")
@click.option("--rounding", type=click.Choice(["double", "single", "upward", "tonearest"]), default="double",
              show_default=True,
              help="MultiplyByQuantizedMultiplier's rounding: double (TFLite's default), single "
                   "(TFLITE_SINGLE_ROUNDING, CMSIS-NN; = TVM's UPWARD), upward, tonearest (TVM: ties away from 0).")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def run(model: str, input_path: str, output: str | None, trace: bool, quantize_inputs: bool, integer_fc: bool,
        runtime: str, rounding: str, debug: bool) -> None:
    """Run a quantized .tflite with integers only (int8, uint8, 16x8).

    The arithmetic is TFLite's reference kernels, driven by the multipliers,
    shifts, clamps and tables qconvert stores in the file (computed from the
    file's scales, once, for a file another converter wrote); every tensor equals
    LiteRT's BUILTIN_REF bit for bit (FULLY_CONNECTED, which LiteRT 2.3 rounds in
    double precision, from the stored 64-bit factor, emulated with integers).
    --runtime tflm and --rounding reproduce other runtimes' arithmetic.
    """
    def work() -> None:
        from qconvert.tools.run import run_command

        click.echo(run_command(model, input_path, output, trace, quantize_inputs, integer_fc, runtime, rounding),
                   nl=False)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=click.Path(path_type=str))
@click.option("--target", "targets", multiple=True, metavar="NAME",
              help="litert, litert-ref, tflm, ethos-u55-128, ethos-u55-256, ethos-u65-256, ethos-u85-256, or all "
                   "(repeatable; default: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text (shape: see README).")
@click.option("--inputs", "n_inputs", type=click.IntRange(min=1), default=8, show_default=True, metavar="N",
              help="Random inputs to run (LiteRT, TFLite Micro).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the random inputs.")
@click.option("--static", "static_only", is_flag=True, help="Only the static check of known constraints: no tool runs.")
@click.option("--vela-config", "vela_config", type=click.Path(exists=True, dir_okay=False, path_type=str),
              metavar="FILE", help="Vela configuration file (.ini), passed to vela --config.")
@click.option("--vela-arg", "vela_args", multiple=True, metavar="ARG",
              help="An argument passed to vela as it is, e.g. --vela-arg=--system-config=NAME (repeatable).")
@click.option("--fail-on-cpu", "fail_on_cpu", is_flag=True,
              help="Exit 1 also when an Ethos-U target leaves ops to the CPU.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def check(model: str, targets: tuple[str, ...], as_json: bool, n_inputs: int, seed: int, static_only: bool,
          vela_config: str | None, vela_args: tuple[str, ...], fail_on_cpu: bool, debug: bool) -> None:
    """Will MODEL.tflite run on a target? Why not (op, tensor, constraint), and what it costs there.

    With the target's tool installed (LiteRT; pip install 'qconvert[tflm]' for TFLite Micro,
    'qconvert[vela]' for Ethos-U) the file runs or compiles there; otherwise a static check of
    the target's known constraints. Exit 0 when every target can run it, 1 when one cannot.
    """
    def work() -> None:
        from qconvert.tools.check import check_command

        text, status = check_command(model, targets, as_json, n_inputs, seed, static_only, vela_config, vela_args,
                                     fail_on_cpu)
        click.echo(text, nl=False)
        if status:
            sys.exit(status)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=click.Path(path_type=str))
@click.argument("tflite", type=click.Path(path_type=str))
@click.option("--data", "data", required=True, type=click.Path(path_type=str), metavar="PATH",
              help="Float samples: .npz (one array per input), .npy, or a directory (as --calibration-data).")
@click.option("--samples", "samples", type=click.IntRange(min=1), metavar="N", help="Use N samples (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for picking --samples.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the table.")
@click.option("--plot", "plot_path", type=click.Path(path_type=str), metavar="REPORT.png",
              help="Write a PNG of the SNR per layer, worst layers in red (needs matplotlib).")
@click.option("--fail-below-snr", "fail_below", type=float, metavar="DB",
              help="Exit 1 when any layer's end-to-end SNR is below DB (a CI gate).")
@click.option("--fake-quant", is_flag=True, help="Keep the .pb's FakeQuants in the float reference.")
@click.option("--inputs", "inputs", multiple=True, metavar="NAME[,NAME]", help="As given to convert.")
@click.option("--outputs", "outputs", multiple=True, metavar="NAME[,NAME]", help="As given to convert.")
@click.option("--input-shapes", "shapes", multiple=True, metavar="NAME=D0,D1,...", help="As given to convert.")
@click.option("--runtime", type=click.Choice(["litert-ref", "tflm"]), default="litert-ref", show_default=True,
              help="Whose integer arithmetic runs the .tflite (as qconvert run --runtime).")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def compare(model: str, tflite: str, data: str, samples: int | None, seed: int, as_json: bool,
            plot_path: str | None, fail_below: float | None, fake_quant: bool, inputs: tuple[str, ...],
            outputs: tuple[str, ...], shapes: tuple[str, ...], runtime: str, debug: bool) -> None:
    """Per-layer error of MODEL.tflite against the float MODEL.pb on the same data.

    For every tensor of the int8 model that the float graph has: SNR (dB), cosine
    similarity, maximum absolute error, mean error in units of the tensor's scale,
    and the SNR of the op alone (the float op on the int8 inputs it read), by
    which the worst layers are ranked.
    """
    input_shapes = dict(_parse_shape(s) for s in shapes)

    def work() -> None:
        import json

        from qconvert.tools import compare as cmp

        report = cmp.compare(model, tflite, data, samples=samples, seed=seed, fake_quant=fake_quant,
                             inputs=_names(inputs), outputs=_names(outputs), input_shapes=input_shapes or None,
                             runtime=runtime)
        doc = report.as_dict()
        if plot_path:
            cmp.plot(report, plot_path)
        click.echo(json.dumps(doc, indent=1) if as_json else cmp.render_text(report), nl=as_json)
        if plot_path and not as_json:
            click.echo(f"wrote {plot_path}")
        if fail_below is not None:
            problem = report.gate(fail_below)
            if problem:
                click.echo(f"qconvert: error: {problem}", err=True)
                sys.exit(1)

    _guard(work, debug)


def _io(graph, name: str) -> str:
    t = graph.tensors[name]
    q = t.quant
    return f"{name} {t.dtype}{list(t.shape)} scale={float(q.scale[0]):.6g} zp={q.zero_point[0]}" if q else name


def _numbers(text: str, option: str, kind: type, count: int | None = None) -> Any:
    try:
        values = [kind(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"'{text}': expected numbers separated by commas", param_hint=option) from None
    if count is not None and len(values) != count:
        raise click.BadParameter(f"'{text}': expected {count} numbers", param_hint=option)
    return tuple(values)


def _calibration_progress():  # type: ignore[no-untyped-def]
    """A progress bar with samples/s and ETA on a terminal; in CI (``CI`` set) or when stderr
    is not a terminal, one line per 10 %."""
    from qconvert.calibration.calibrate import Progress

    ci = os.environ.get("CI", "").lower() in ("1", "true")
    return Progress(tty=False if ci else None)


def _guard(work, debug: bool) -> None:
    from qconvert.errors import ConversionError, UsageError

    try:
        work()
    except UsageError as exc:
        click.echo(f"qconvert: usage error: {exc}", err=True)
        sys.exit(2)
    except ConversionError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"qconvert: error: {exc}", err=True)
        sys.exit(1)
    except BrokenPipeError:  # the reader went away (`qconvert dump m.tflite | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except (KeyboardInterrupt, click.exceptions.Exit, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 1
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"qconvert: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", err=True)
        sys.exit(1)


def _reuse_freed_memory() -> None:
    """glibc hands each freed block over 128 KB back to the kernel (its mmap threshold, raised
    only as larger blocks are freed), and the next block of that size faults its pages in
    again. Conversion allocates thousands of such blocks (the cache-sized temporaries of the
    weight kernels, 256 KB each): with the threshold at 32 MB, glibc's largest, they are
    reused instead (Xception's tfmot graph, 20 M weights, interleaved medians of 7: system time
    0.23 -> 0.16 s, wall 0.85 -> 0.72 s; peak RSS 292 -> 304 MB). The command line only: a
    library caller's process keeps its own allocator settings."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (malloc.h); elsewhere than glibc, a no-op or absent
    except (OSError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    _reuse_freed_memory()
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="qconvert", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("qconvert: aborted", err=True)
        return 1
    except click.exceptions.UsageError as exc:
        msg = exc.format_message()
        hint = f" (see: qconvert {exc.ctx.info_name if exc.ctx and exc.ctx.info_name != 'qconvert' else ''} --help)".replace("  ", " ")
        click.echo(f"qconvert: usage error: {msg}{hint}", err=True)
        return 2
    except click.exceptions.ClickException as exc:
        click.echo(f"qconvert: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
