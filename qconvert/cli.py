"""Command line: a thin click layer over ``qconvert.api``.

``qconvert MODEL.pb …`` is ``qconvert convert MODEL.pb …``. Exit codes: 0 done,
1 model or conversion error (one line naming the node, the tensor and the fix),
2 usage error. A traceback appears only with ``--debug``. Heavy modules are
imported inside the commands so that ``--help`` stays fast.
"""

from __future__ import annotations

import errno
import gc
import os
import sys
import time
from typing import Any, Sequence

import click

COMMANDS = ("convert", "calibrate", "tune", "batch", "merge-reports", "dump", "run", "compare", "check")

_PROCESS = False  # main() runs as the process, which ends (os._exit) once the command is done
# one path type for every file argument and option (click.Path's default dir_okay=True): each click.Path()
# asks gettext for its name, 4 file probes, 21 of them 0.3 ms of every start-up
_PATH = click.Path(path_type=str)


def _one_model_process() -> None:
    """A command that converts one model in a process that ends after it needs no cycle collector:
    the conversion already pauses it, and what is left is a full scan of the conversion's objects
    once it ends and scans while ``qconvert.api`` loads, which free nothing the process still needs
    (collector time in the whole command, medians of 7: RepViT_M09 28 -> 2 ms, MobileViT_XXS
    12 -> 2 ms). Not for ``batch`` and ``tune``, which convert many times in one process."""
    if _PROCESS:
        gc.disable()


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


def _parse_shape(text: str) -> tuple[str, list[int]]:
    from qconvert.options import SHAPES, Bad

    try:
        return next(iter(SHAPES.from_value([text]).items()))
    except Bad as exc:
        raise click.BadParameter(str(exc)) from None


def _names(values: Sequence[str]) -> list[str] | None:
    out = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return out or None


def _option_flags(command: str) -> Any:
    """The click options of ``command``, generated from ``qconvert.options`` (declared once there).
    Values reach the command as text, keyed by option key, and are read by
    ``ConvertOptions.from_cli``: the same checks and messages as manifests and the API."""
    from qconvert.options import iter_help, specs_for

    helps = dict((s.key, text) for s, text in iter_help())

    def apply(f: Any) -> Any:
        for spec in reversed(specs_for(command)):
            kind = spec.kind
            if kind.flag_only:
                f = click.option(spec.flag, spec.key, is_flag=True, default=False, help=helps[spec.key])(f)
            else:
                f = click.option(spec.flag, spec.key, multiple=kind.repeat, metavar=kind.metavar,
                                 default=None, help=helps[spec.key])(f)
        return f
    return apply


@click.group(cls=_DefaultToConvert, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="qconvert", message="qconvert %(version)s")
def cli() -> None:
    """Convert TensorFlow graphs (.pb, SavedModel, Keras) and float .tflite files to integer TFLite models.

    \b
    qconvert MODEL.pb --inputs-range input=-1,1      (same as: qconvert convert ...)
    qconvert MODEL.tflite --calibration-data x.npz   (a float .tflite from any producer)
    qconvert calibrate MODEL.pb --calibration-data shard/ --save-stats s.npz
    qconvert batch models/ --manifest models.toml --report report.json [--shard 2/4]
    qconvert merge-reports shard1.json shard2.json -o report.json
    qconvert dump MODEL.tflite
    qconvert run MODEL.tflite --input x.npz
    qconvert check MODEL.tflite --target tflm --target ethos-u55-128
    qconvert compare MODEL.pb MODEL.tflite --data x.npz
    qconvert tune MODEL.pb --calibration-data x.npz --eval-data y.npz --min-snr 30
    """


@cli.command()
@click.argument("model", type=_PATH)
@click.option("-o", "--output", "output", type=_PATH, help="Output .tflite (default: MODEL with .tflite; MODEL_quant.tflite for a .tflite MODEL).")
@_option_flags("convert")
@click.option("--report", "report", metavar="FILE|-", help="Write a JSON report (format: docs/formats.md); - for stdout.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def convert(model: str, output: str | None, report: str | None, debug: bool, **words: Any) -> None:
    """Convert a frozen GraphDef MODEL.pb (QAT, or float with --calibration-data), a SavedModel, a
    Keras file or a float MODEL.tflite to an integer TFLite model. Every option: docs/cli.md."""

    def work() -> None:
        _one_model_process()
        from qconvert import api
        from qconvert.options import ConvertOptions

        options = ConvertOptions.from_cli(words)
        target = output or str(api.default_output(model))
        t0 = time.perf_counter()
        failure = None
        try:
            result = api.convert(model, target, options, progress=_calibration_progress(), debug=debug)
        except api.TargetError as exc:  # written; reported below, then exit 1
            result, failure = exc.result, exc
        except Exception as exc:
            if report:
                from qconvert.tools.batch import write_report

                write_report(report, [api.build_record(model, target, error=exc, seconds=time.perf_counter() - t0)])
            raise
        if report:
            from qconvert.tools.batch import write_report

            write_report(report, [result.record])
        for note in result.notes:
            click.echo(f"qconvert: note: {note}", err=True)
        g = result.graph
        click.echo(f"wrote {target}: {len(g.nodes)} ops, {len(result.model)} bytes, "
                   f"inputs {', '.join(_io(g, n) for n in g.inputs)}; outputs {', '.join(_io(g, n) for n in g.outputs)}",
                   err=report == "-")
        for e in (result.target_check or {}).get("targets", []):
            click.echo(f"{e['target']}: {e['verdict']} ({e['basis']}): {e['summary']}", err=report == "-")
        if failure is not None:
            raise failure

    _guard(work, debug)


@cli.command()
@click.argument("model", type=_PATH)
@_option_flags("calibrate")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def calibrate(model: str, debug: bool, **words: Any) -> None:
    """Run the float graph MODEL.pb on --calibration-data and save its statistics (--save-stats), without converting.

    \b
    Shards of the data calibrate anywhere (CI jobs, Dask workers); their files merge:
      qconvert calibrate m.pb --calibration-data shard0/ --save-stats s0.npz
      qconvert calibrate m.pb --calibration-data shard1/ --save-stats s1.npz
      qconvert convert m.pb --stats s0.npz s1.npz      (= one run over shard0 and shard1)
    Use the same model options (--inputs, --outputs, --input-shapes, --activations) everywhere:
    the file records the graph's fingerprint, and a different graph is refused.
    """

    def work() -> None:
        _one_model_process()
        from qconvert import api
        from qconvert.errors import UsageError
        from qconvert.options import ConvertOptions

        if words.get("calibration_data") is None:
            raise UsageError("calibrate needs --calibration-data")
        if words.get("save_stats") is None:
            raise UsageError("calibrate needs --save-stats FILE.npz (where to write the statistics)")
        options = ConvertOptions.from_cli(words, "calibrate")
        t0 = time.perf_counter()
        stats = api.calibrate_graph(model, options.calibration.data, options, progress=_calibration_progress())
        kind = "min/max and histograms" if stats.hist is not None else "min/max"
        click.echo(f"wrote {options.calibration.save_stats}: {kind} of {len(stats.lo)} tensor(s) over "
                   f"{stats.samples} sample(s) in {time.perf_counter() - t0:.2f} s (graph {stats.fingerprint[:12]})",
                   err=True)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=_PATH)
@click.option("-o", "--output", "output", type=_PATH,
              help="Output .tflite (default: MODEL with .tflite; MODEL_quant.tflite for a .tflite MODEL).")
@click.option("--eval-data", "eval_data", required=True, type=_PATH, metavar="PATH",
              help="Held-out float samples (as --calibration-data) on which the budget is checked; the search "
                   "never sees them.")
@click.option("--min-snr", "min_snr", type=float, metavar="DB",
              help="Budget: output SNR against the float model of at least DB on --eval-data.")
@click.option("--max-drop", "max_drop", type=float, metavar="PCT",
              help="Budget: top-1 accuracy on --eval-data at most PCT points below the float model's (needs "
                   "--labels).")
@click.option("--labels", "labels", type=_PATH, metavar="L.npy",
              help="Class ids of the --eval-data samples, in order (.npy or a one-array .npz), for --max-drop.")
@click.option("--recipe-out", "recipe_out", type=_PATH, metavar="FILE.toml",
              help="Also write the chosen precision as a recipe (keep_float / int16 patterns) for convert --recipe.")
@click.option("--html", "html_path", type=_PATH, metavar="REPORT.html",
              help="Write one self-contained HTML report: the budget, the search's steps, the sensitivity table and "
                   "compare's chart and graph of the tuned file on --eval-data (written when the budget is not met "
                   "too: docs/tune.md).")
@click.option("--model-explorer", "explorer_path", type=_PATH, metavar="FILE.json",
              help="Write each op's SNR in the tuned file as Model Explorer node data (as compare --model-explorer).")
@_option_flags("tune")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def tune(model: str, output: str | None, eval_data: str, min_snr: float | None, max_drop: float | None,
         labels: str | None, recipe_out: str | None, html_path: str | None, explorer_path: str | None, debug: bool,
         **words: Any) -> None:
    """Find the fewest tensors to promote (16x8 where int16 suffices, else float) so that the int8
    model meets an error budget on held-out data; write the model and its recipe (docs/tune.md).

    Calibrates once on --calibration-data (a quarter of it, at most 64 samples, set aside to score
    candidates), ranks every tensor by the output SNR it gives when kept float alone, adds them
    greedily until the budget holds on those samples, then checks it on --eval-data. Exit 0 when met
    (files written), 1 when not (one line: the best found and its cost; nothing written but the
    --html / --model-explorer reports of that best file), 2 usage.
    """

    def work() -> None:
        from qconvert import api
        from qconvert.io import write_atomic
        from qconvert.options import ConvertOptions
        from qconvert.tools import tune as tuner

        options = ConvertOptions.from_cli(words, "tune")
        tuner.check_usage(options, min_snr, max_drop, labels)
        target = output or str(api.default_output(model))
        tuner.check_targets(target, recipe_out, html_path, explorer_path)  # before the search: no late surprise
        result = tuner.tune(model, options, eval_data, min_snr, max_drop, labels,
                            echo=lambda s: click.echo(f"qconvert: tune: {s}", err=True))
        click.echo(tuner.render_table(result), nl=False)
        reports: dict[str, bytes] = {}  # made before anything is written: a failure leaves no file
        if html_path or explorer_path:  # the best file's reports, the budget met or not
            from qconvert.tools import tune_html

            report, info = tune_html.layer_report(result, model, options, target if result.met else None)
            if html_path:
                reports[html_path] = tune_html.render(result, model, report, info).encode("utf-8")
            if explorer_path:
                reports[explorer_path] = tune_html.model_explorer_json(report).encode("utf-8")
        if result.met:
            tuner.write(result, target, recipe_out)
            click.echo(f"wrote {target}" + (f" and {recipe_out}" if recipe_out else ""), err=True)
        for report_path, data in reports.items():
            write_atomic(report_path, data)
        if reports:
            click.echo("wrote " + " and ".join(reports)
                       + ("" if result.met else " (of the best file found; the budget is not met)"), err=True)
        if not result.met:
            click.echo(f"qconvert: error: {result.failure()}", err=True)
            sys.exit(1)

    _guard(work, debug)


@cli.command()
@click.argument("models", nargs=-1, metavar="MODEL|DIR|GLOB...")
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False, path_type=str),
              help="TOML manifest: [defaults] and [[model]] entries; keys are the options' (docs/cli.md).")
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
@click.argument("model", type=_PATH)
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text (shape: docs/formats.md).")
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
@click.argument("model", type=_PATH)
@click.option("--input", "input_path", required=True, type=_PATH, metavar="X.npz",
              help="Input arrays: .npz (one per input, by name) or .npy (one input); an extra leading axis = N samples.")
@click.option("-o", "--output", "output", type=_PATH, metavar="OUT.npz",
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
    """Run a quantized .tflite (int8, uint8, 16x8, and float islands) as TFLite's reference kernels.

    The integer arithmetic is driven by the multipliers, shifts, clamps and tables
    qconvert stores in the file (computed from the file's scales, once, for a file
    another converter wrote); float islands (--keep-float) run LiteRT's reference
    float kernels in their order of summation. Every tensor equals LiteRT's
    BUILTIN_REF bit for bit (FULLY_CONNECTED, which LiteRT 2.3 rounds in double
    precision, from the stored 64-bit factor, emulated with integers; an int8 SUM
    follows LiteRT's optimized kernel, BUILTIN_REF's being wrong: a note says so).
    --runtime tflm and --rounding reproduce other runtimes' arithmetic.
    """
    def work() -> None:
        from qconvert.tools.run import run_command

        notes: list[str] = []
        click.echo(run_command(model, input_path, output, trace, quantize_inputs, integer_fc, runtime, rounding,
                               notes=notes), nl=False)
        for note in notes:
            click.echo(f"qconvert: note: {note}", err=True)

    _guard(work, debug)


@cli.command()
@click.argument("model", type=_PATH)
@click.option("--target", "targets", multiple=True, metavar="NAME",
              help="litert, litert-ref, tflm, ethos-u55-128, ethos-u55-256, ethos-u65-256, ethos-u85-256, or all "
                   "(repeatable; default: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text (shape: docs/formats.md).")
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
@click.argument("model", type=_PATH)
@click.argument("tflite", type=_PATH)
@click.option("--data", "data", required=True, type=_PATH, metavar="PATH",
              help="Float samples: .npz (one array per input), .npy, a directory or a glob of them (as --calibration-data).")
@click.option("--samples", "samples", type=click.IntRange(min=1), metavar="N", help="Use N samples (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for picking --samples.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the table.")
@click.option("--plot", "plot_path", type=_PATH, metavar="REPORT.png",
              help="Write a PNG of the SNR per layer, worst layers in red (needs matplotlib).")
@click.option("--html", "html_path", type=_PATH, metavar="REPORT.html",
              help="Write one self-contained HTML report: the SNR chart, the graph coloured by error and "
                   "marked by precision, the tables (docs/compare.md).")
@click.option("--model-explorer", "explorer_path", type=_PATH, metavar="FILE.json",
              help="Write each op's SNR as Model Explorer node data (keyed by node id = operator index).")
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
            plot_path: str | None, html_path: str | None, explorer_path: str | None, fail_below: float | None, fake_quant: bool, inputs: tuple[str, ...],
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
        if html_path or explorer_path:
            from qconvert.tools import compare_html

            if html_path:
                compare_html.write_html(report, html_path)
            if explorer_path:
                compare_html.write_model_explorer(report, explorer_path)
        click.echo(json.dumps(doc, indent=1) if as_json else cmp.render_text(report), nl=as_json)
        for written in (plot_path, html_path, explorer_path):
            if written and not as_json:
                click.echo(f"wrote {written}")
        if fail_below is not None:
            problem = report.gate(fail_below)
            if problem:
                click.echo(f"qconvert: error: {problem}", err=True)
                sys.exit(1)

    _guard(work, debug)


def _io(graph, name: str) -> str:
    t = graph.tensors[name]
    q = t.quant
    if q is None:
        return f"{name} {t.dtype}{list(t.shape)}" if t.shape is not None else name
    return f"{name} {t.dtype}{list(t.shape)} scale={float(q.scale[0]):.6g} zp={q.zero_point[0]}"


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
        if isinstance(exc, OSError) and exc.errno in _WRITE_FAILURES:  # a full disk is no internal error
            _cannot_write(exc)
            sys.exit(1)
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"qconvert: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", err=True)
        sys.exit(1)


# A write to stdout (or a report) that failed for want of room or a device error: the command's
# output is incomplete, so it fails, in one line on stderr (`qconvert dump m.tflite > /dev/full`).
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})


def _cannot_write(exc: OSError) -> None:
    try:
        os.write(2, f"qconvert: error: cannot write the output: {exc.strerror or exc}\n".encode())
    except OSError:
        pass


def reference() -> str:
    """docs/cli.md: the conversion options (from ``qconvert.options``) and every command's help
    (from the click commands here). ``python -m qconvert.cli --reference > docs/cli.md``; a test
    keeps the file equal to this."""
    from qconvert.options import reference as options_reference

    parts = [options_reference().replace("# Conversion options", "# Command-line reference", 1)
             .replace("(`python -m qconvert.options > docs/cli.md`)", "and the commands' help "
                      "(`python -m qconvert.cli --reference > docs/cli.md`)"), "\n## Commands\n"]
    top = click.Context(cli, info_name="qconvert", max_content_width=100, terminal_width=100, **cli.context_settings)
    for name in COMMANDS:
        command = cli.commands[name]
        with click.Context(command, info_name=name, parent=top) as ctx:
            parts.append(f"\n### qconvert {name}\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "".join(parts)


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

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (malloc.h); elsewhere than glibc, a no-op or absent
        # M_TRIM_THRESHOLD and M_TOP_PAD: the heap's freed top is kept, not given back and faulted in again, and it
        # grows 64 MB at a time (untouched pages cost nothing). RepViT_M09 at 32 px, whole process, 5 runs each:
        # 35,400 -> 31,000 minor page faults, 0.35 -> 0.34 s.
        libc.mallopt(-1, 512 << 20)
        libc.mallopt(-2, 64 << 20)
    except (OSError, AttributeError):
        pass


def _one_blas_thread(args: Sequence[str]) -> None:
    """OpenBLAS starts a thread per core when numpy loads: 50 ms of every short command's
    start on these machines (helper measurement, 31 alternating runs: dump 0.175 -> 0.121 s).
    No command but ``compare`` runs a BLAS product outside the calibration workers, which
    already limit BLAS to one thread each, so the others ask for one thread before numpy
    loads; a value the user set wins, and results do not depend on it (a BLAS product splits
    its output among threads, never a sum)."""
    if "numpy" not in sys.modules and "compare" not in args[:1]:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Called with no ``argv`` it is the process (the ``qconvert`` script,
    ``python -m qconvert``): once the command is done and its output flushed, the process ends
    without tearing the interpreter down module by module (numpy, protobuf and the flatbuffer
    schema's thousands of objects: 30 ms of a 0.30 s conversion, interleaved runs of 7). Files
    are written and closed, worker pools joined, before that. With ``argv`` (a caller in Python,
    the tests) it returns the exit code."""
    if argv is None and sys.argv[1:] == ["--reference"]:  # python -m qconvert.cli --reference > docs/cli.md
        sys.stdout.write(reference())
        return 0
    global _PROCESS
    _PROCESS = argv is None
    code = _main(argv)
    if argv is not None:
        return code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a closed pipe (| head): nothing more to say
            pass
        except OSError as exc:  # a full disk, an I/O error: the output is incomplete, so the command failed
            _cannot_write(exc)
            code = code or 1
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    _one_blas_thread(list(argv) if argv is not None else sys.argv[1:])
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
    except OSError as exc:  # click's own --help/--version text, written before any command runs
        if exc.errno not in _WRITE_FAILURES:
            raise
        _cannot_write(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
