"""Batch conversion: many models, an optional TOML manifest, processes, a JSON report.

Only the standard library is imported at module level: ``_convert_job`` runs in worker
processes (any start method) and imports the converter when it is first called.
The report format is described by ``qconvert/tools/report_schema.json``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import tomllib

from qconvert import __version__
from qconvert.args import parse_range
from qconvert.converter import api
from qconvert.errors import ConversionError, UsageError
from qconvert.io import write_atomic
from qconvert.schema.reader import read_model

REPORT_SCHEMA_VERSION = 1
# Calibration of float graphs (see ``qconvert convert --help``); paths relative to the manifest.
_CALIBRATION_KEYS = {"calibration_data", "calibration_samples", "calibration_batch", "calibration_method",
                     "calibration_engine", "percentile", "seed", "ranges_file"}
# Storage choices beside int8 (issue 17), as the convert options of the same names.
_WIDTH_KEYS = {"activations": ("int8", "int16"), "weights": ("int8", "int4"), "block_size": (32, 64, 128, 256),
               "int4_storage": ("packed", "int8"),
               "low_bit_activations": ("error", "8bit")}
_DEFAULT_KEYS = {"inputs_range", "input_shapes", "inputs", "outputs", "output_dir", "target"} | _CALIBRATION_KEYS \
    | set(_WIDTH_KEYS)
_MODEL_KEYS = {"path", "output", "inputs_range", "input_shapes", "inputs", "outputs", "target"} | _CALIBRATION_KEYS \
    | set(_WIDTH_KEYS)
_NODE_RE = re.compile(r"node '([^']+)'")


def _usage(message: str) -> Exception:

    return UsageError(message)


@dataclass
class Job:
    """One model to convert; plain data so that it pickles to a worker."""

    model: str
    output: str
    input_ranges: dict = field(default_factory=dict)  # {name or None: (lo, hi)}
    input_shapes: dict = field(default_factory=dict)  # {name: [d0, ...]}
    inputs: list | None = None
    outputs: list | None = None
    calibration: dict = field(default_factory=dict)  # keyword arguments of api.convert_graph
    targets: list = field(default_factory=list)  # `target` key: conversion choices, and check after writing

    @property
    def name(self) -> str:
        return Path(self.model).name


# ---------------------------------------------------------------- manifest and model list

def _parse_range(text: str, where: str) -> tuple[str | None, tuple[float, float]]:

    try:
        return parse_range(text)
    except ValueError as exc:
        raise _usage(f"{where}: {exc}") from None


def _ranges(value: Any, where: str) -> dict:
    """"-1,1" | "input=-1,1" | ["a=0,1", ...] | {name = "-1,1" or [-1, 1]}."""
    if isinstance(value, dict):
        out = {}
        for name, rng in value.items():
            text = ",".join(str(v) for v in rng) if isinstance(rng, list) else str(rng)
            out[name] = _parse_range(text, where)[1]
        return out
    items = value if isinstance(value, list) else [value]
    return dict(_parse_range(str(v), where) for v in items)


def _shapes(value: Any, where: str) -> dict:
    """{name = [1, 28, 28, 1] or "1,28,28,1"} | ["name=1,28,28,1", ...]."""
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        pairs = [str(v).partition("=")[::2] for v in (value if isinstance(value, list) else [value])]
    out = {}
    for name, dims in pairs:
        try:
            shape = [int(d) for d in (dims if isinstance(dims, list) else str(dims).split(","))]
        except ValueError:
            shape = []
        if not name or not shape or any(d <= 0 for d in shape):
            raise _usage(f"{where}: bad input_shapes entry {name!r}: expected NAME = [D0, D1, ...] of positive ints")
        out[name] = shape
    return out


def _names(value: Any) -> list[str] | None:
    items = value if isinstance(value, list) else [value]
    out = [n.strip() for v in items for n in str(v).split(",") if n.strip()]
    return out or None


def _settings(table: dict, base: Path, where: str) -> dict:
    out: dict[str, Any] = {}
    if "inputs_range" in table:
        out["input_ranges"] = _ranges(table["inputs_range"], where)
    if "input_shapes" in table:
        out["input_shapes"] = _shapes(table["input_shapes"], where)
    for key in ("inputs", "outputs"):
        if key in table:
            out[key] = _names(table[key])
    for key in ("output", "output_dir"):
        if key in table:
            out[key] = str(base / str(table[key]))
    if "target" in table:
        from qconvert.tools.check import parse_targets

        names = table["target"] if isinstance(table["target"], list) else [table["target"]]
        if not names or not all(isinstance(n, str) for n in names):
            raise _usage(f"{where}: target = {table['target']!r}: a target name or a list of them")
        try:
            out["targets"] = parse_targets(names)
        except UsageError as exc:
            raise _usage(f"{where}: {exc}") from None
    calibration = {}
    for key, kind in (("calibration_samples", int), ("calibration_batch", int), ("seed", int),
                      ("percentile", (int, float)), ("calibration_method", str), ("calibration_engine", str)):
        if key in table:
            value = table[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise _usage(f"{where}: {key} = {value!r} has the wrong type")
            calibration[key] = value
    if calibration.get("calibration_method", "minmax") not in ("minmax", "percentile", "entropy", "mse"):
        raise _usage(f"{where}: calibration_method {calibration['calibration_method']!r}: "
                     "expected minmax, percentile, entropy or mse")
    if calibration.get("calibration_engine", "numpy") not in api.ENGINES:
        raise _usage(f"{where}: calibration_engine {calibration['calibration_engine']!r}: "
                     f"expected {' or '.join(api.ENGINES)}")
    for key in ("calibration_data", "ranges_file"):
        if key in table:
            calibration[key] = str(base / str(table[key]))
    for key, allowed in _WIDTH_KEYS.items():
        if key in table:
            if table[key] not in allowed or isinstance(table[key], bool):
                raise _usage(f"{where}: {key} = {table[key]!r}: expected one of {', '.join(map(str, allowed))}")
            calibration[key] = table[key]
    if calibration:
        out["calibration"] = calibration
    return out


def load_manifest(path: str | os.PathLike) -> tuple[dict, dict[str, dict]]:
    """(defaults, {resolved model path: settings}); UsageError on any problem."""

    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _usage(f"cannot read manifest '{path}': {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _usage(f"manifest '{path}' is not valid TOML: {exc}") from None
    base = path.resolve().parent
    unknown = set(doc) - {"defaults", "model"}
    if unknown:
        raise _usage(f"manifest '{path}': unknown key {sorted(unknown)[0]!r} (allowed: [defaults], [[model]])")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise _usage(f"manifest '{path}': [defaults] must be a table")
    bad = set(defaults) - _DEFAULT_KEYS
    if bad:
        raise _usage(f"manifest '{path}': unknown key {sorted(bad)[0]!r} in [defaults] "
                     f"(allowed: {', '.join(sorted(_DEFAULT_KEYS))})")
    models: dict[str, dict] = {}
    entries = doc.get("model", [])
    if not isinstance(entries, list):
        raise _usage(f"manifest '{path}': use [[model]] for model entries")
    for i, entry in enumerate(entries, 1):
        where = f"manifest '{path}', model #{i}"
        if not isinstance(entry, dict):
            raise _usage(f"{where}: must be a table")
        bad = set(entry) - _MODEL_KEYS
        if bad:
            raise _usage(f"{where}: unknown key {sorted(bad)[0]!r} (allowed: {', '.join(sorted(_MODEL_KEYS))})")
        if "path" not in entry:
            raise _usage(f"{where}: missing 'path'")
        models[str((base / str(entry["path"])).resolve())] = _settings(entry, base, where)
    return _settings(defaults, base, f"manifest '{path}' [defaults]"), models


def collect_models(args: Sequence[str]) -> list[str]:
    """Files, directories (their *.pb, sorted) and globs, in order, without duplicates."""
    found: list[str] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            matches = sorted(str(m) for m in p.glob("*.pb") if m.is_file())
        elif p.is_file():
            matches = [arg]
        else:
            matches = sorted(m for m in glob.glob(arg, recursive=True) if Path(m).is_file())
        if not matches:
            raise _usage(f"no models found for '{arg}'")
        found.extend(matches)
    seen: set[str] = set()
    unique = []
    for m in found:
        key = str(Path(m).resolve())
        if key not in seen:
            seen.add(key)
            unique.append(m)
    return unique


def plan(args: Sequence[str], manifest: str | None = None) -> list[Job]:
    defaults, entries = load_manifest(manifest) if manifest else ({}, {})
    models = collect_models(args) if args else list(entries)
    if not models:
        raise _usage("no models given (pass .pb files, directories or globs, or a manifest with [[model]] entries)")
    jobs = []
    for model in models:
        entry = entries.get(str(Path(model).resolve()), {})
        s = {**defaults, **entry}
        s["calibration"] = {**defaults.get("calibration", {}), **entry.get("calibration", {})}
        if "output" in s:
            output = s["output"]
        elif "output_dir" in s:
            output = str(Path(s["output_dir"]) / Path(model).with_suffix(".tflite").name)
        else:
            output = str(Path(model).with_suffix(".tflite"))
        jobs.append(Job(model, output, dict(s.get("input_ranges", {})), dict(s.get("input_shapes", {})),
                        s.get("inputs"), s.get("outputs"), dict(s.get("calibration", {})), list(s.get("targets", []))))
    return jobs


# ---------------------------------------------------------------- records

def _io_records(info, indices) -> list[dict]:
    out = []
    for i in indices:
        t = info.tensors[i]
        out.append({"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                    "scale": float(t.scale[0]) if t.scale else None,
                    "zero_point": int(t.zero_point[0]) if t.zero_point else None})
    return out


def build_record(model: str, output: str, data: bytes | None = None, notes: Sequence[str] = (),
                 error: BaseException | str | None = None, seconds: float = 0.0) -> dict:
    """One report record: the same for ``convert --report`` and ``batch``."""
    rec: dict[str, Any] = {"model": str(model), "output": str(output), "status": "ok" if error is None else "failed",
                           "error": None, "node": None, "inputs": [], "outputs": [], "op_histogram": {},
                           "float_ops": 0, "bytes": None, "sha256": None, "seconds": round(seconds, 3),
                           "notes": list(notes)}
    if error is not None:
        msg = str(error) if isinstance(error, (str, ConversionError, UsageError)) else f"{type(error).__name__}: {error}"
        rec["error"] = msg
        m = _NODE_RE.search(msg)
        rec["node"] = m.group(1) if m else None
        return rec

    info = read_model(data)
    hist: dict[str, int] = {}
    float_ops = 0
    for op in info.operators:
        hist[op.builtin] = hist.get(op.builtin, 0) + 1
        if any(0 <= i < len(info.tensors) and info.tensors[i].dtype == "float32" for i in [*op.inputs, *op.outputs]):
            float_ops += 1
    rec.update(inputs=_io_records(info, info.inputs), outputs=_io_records(info, info.outputs),
               op_histogram=dict(sorted(hist.items())), float_ops=float_ops, bytes=len(data),
               sha256=hashlib.sha256(data).hexdigest())
    return rec


def report_document(records: list[dict], shard: dict | None = None) -> dict:
    ok = sum(r["status"] == "ok" for r in records)
    doc = {"schema_version": REPORT_SCHEMA_VERSION, "qconvert_version": __version__, "models": records,
           "summary": {"total": len(records), "ok": ok, "failed": len(records) - ok}}
    if shard is not None:
        doc["shard"] = shard
    return doc


def write_report(target: str, records: list[dict], shard: dict | None = None) -> None:
    text = json.dumps(report_document(records, shard), indent=2) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(target, text.encode("utf-8"))


# ---------------------------------------------------------------- conversion

def _convert_job(job: Job, check: bool) -> dict:
    """Worker (module level, lazy imports): convert one job; write it, or with ``check`` compare it.

    Never raises for a model problem: the record carries the error. With ``check``
    the record has a ``check`` field: "same", "changed" or "missing".
    """
    t0 = time.perf_counter()
    try:
        options = dict(job.calibration)
        notes: list[str] = []
        if job.targets:
            from qconvert.tools.targets import conversion_choices

            options["int4_storage"], notes = conversion_choices(job.targets, options.get("int4_storage"),
                                                                options.get("block_size"))
        result = api.convert_graph(job.model, input_ranges=job.input_ranges, input_shapes=job.input_shapes,
                                   inputs=job.inputs, outputs=job.outputs, **options)
        seconds = time.perf_counter() - t0
        if notes:
            from qconvert.tools.targets import has_4bit_weights

            notes = notes if has_4bit_weights(result.graph) else []
        rec = build_record(job.model, job.output, result.model, list(result.notes) + notes, seconds=seconds)
        if check:
            try:
                old = Path(job.output).read_bytes()
            except OSError:
                old = None
            rec["check"] = "missing" if old is None else ("same" if old == result.model else "changed")
        else:
            write_atomic(job.output, result.model)
            if job.targets:  # the file as written, on each target (`qconvert check`)
                from qconvert.tools.check import check_model
                from qconvert.tools.targets import cannot_run

                rec["target_check"] = checked = check_model(job.output, job.targets)
                failure = cannot_run(checked)
                if failure is not None:
                    rec["status"], rec["error"] = "failed", f"wrote {job.output}, but {failure}"
        return rec
    except Exception as exc:  # noqa: BLE001 - a failing model never stops the others
        return build_record(job.model, job.output, error=exc, seconds=time.perf_counter() - t0)


class _Progress:
    def __init__(self, total: int, stream=None) -> None:
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and os.environ.get("CI", "").lower() not in ("true", "1")

    def __call__(self, job: Job, rec: dict) -> None:
        self.done += 1
        if self.tty:
            self.stream.write(f"\r\x1b[K[{self.done}/{self.total}] {job.name}")
            if self.done == self.total:
                self.stream.write("\n")
            if rec["status"] != "ok":  # failures stay visible
                self.stream.write(f"\r\x1b[KFAILED {job.name}: {rec['error']}\n")
        elif rec["status"] == "ok":
            self.stream.write(f"ok {job.name} -> {job.output} ({rec['seconds']:.2f} s)\n")
        else:
            self.stream.write(f"FAILED {job.name}: {rec['error']}\n")
        self.stream.flush()


def run_jobs(jobs: list[Job], n_jobs: int | None = None, check: bool = False,
             progress: Callable[[Job, dict], None] | None = None) -> list[dict]:
    """Convert all jobs; records come back in the order of ``jobs`` whatever the completion order."""
    n_jobs = max(1, min(n_jobs or os.cpu_count() or 1, len(jobs)))
    records: list[dict | None] = [None] * len(jobs)
    if n_jobs == 1:
        for i, job in enumerate(jobs):
            records[i] = _convert_job(job, check)
            if progress:
                progress(job, records[i])
        return records  # type: ignore[return-value]

    with ProcessPoolExecutor(max_workers=n_jobs) as pool:
        futures = {pool.submit(_convert_job, job, check): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                records[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - e.g. a worker killed by the OS
                records[i] = build_record(jobs[i].model, jobs[i].output, error=f"worker failed: {exc!r}")
            if progress:
                progress(jobs[i], records[i])
    return records  # type: ignore[return-value]


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` (1 <= K <= N) for ``--shard``."""
    k, sep, n = text.partition("/")
    try:
        index, count = int(k), int(n)
    except ValueError:
        index = count = 0
    if not sep or not 1 <= index <= count:
        raise _usage(f"--shard '{text}': expected K/N with 1 <= K <= N, e.g. 2/4")
    return index, count


def shard_jobs(jobs: list[Job], index: int, count: int) -> list[Job]:
    """Shard K of N: the jobs at positions K-1, K-1+N, ... of the plan (files and directories
    in the order given, a directory's models sorted by name, or the manifest's order). Every
    machine computes the same plan, so the N shards cover every model exactly once; taking
    every N-th spreads a directory's large and small models over the shards."""
    return jobs[index - 1::count]


def merge_reports(paths: Sequence[str]) -> dict:
    """One report from several (``batch --shard K/N --report`` on N machines): the models of
    all, the summary recounted. Refused: another schema version, a model in two reports, and,
    for shard reports, a missing, repeated or inconsistent shard."""
    docs = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConversionError(f"cannot read report '{p}': {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConversionError(f"report '{p}' is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
            raise ConversionError(f"report '{p}' is not a qconvert report (no 'models' list)")
        if doc.get("schema_version") != REPORT_SCHEMA_VERSION:
            raise ConversionError(f"report '{p}' has schema_version {doc.get('schema_version')!r}; this qconvert "
                                  f"merges version {REPORT_SCHEMA_VERSION}")
        docs.append((p, doc))
    shards = [d.get("shard") for _, d in docs]
    merged_shard = None
    if any(s is not None for s in shards):
        if any(not isinstance(s, dict) or not isinstance(s.get("index"), int) for s in shards):
            raise ConversionError("merge-reports: mix of shard reports and other reports; merge the shards of one "
                                  "`batch --shard K/N` run")
        counts = {s["count"] for s in shards}
        totals = {s["models_total"] for s in shards}
        if len(counts) != 1 or len(totals) != 1:
            raise ConversionError(f"merge-reports: the reports come from different shardings ({sorted(counts)} shards, "
                                  f"{sorted(totals)} models in all)")
        count, total = counts.pop(), totals.pop()
        seen = sorted(s["index"] for s in shards)
        missing = sorted(set(range(1, count + 1)) - set(seen))
        repeated = sorted({k for k in seen if seen.count(k) > 1})
        if missing or repeated:
            what = f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} missing" if missing \
                else f"shard(s) {', '.join(f'{k}/{count}' for k in repeated)} given twice"
            raise ConversionError(f"merge-reports: {what}")
        merged_shard = {"index": None, "count": count, "models_total": total}
    records, where = [], {}
    for p, doc in docs:
        for rec in doc["models"]:
            key = (rec.get("model"), rec.get("output"))
            if key in where:
                raise ConversionError(f"merge-reports: model '{key[0]}' is in '{where[key]}' and in '{p}'")
            where[key] = p
            records.append(rec)
    if merged_shard is not None and len(records) != merged_shard["models_total"]:
        raise ConversionError(f"merge-reports: {len(records)} models in the reports, but the shards were cut from "
                              f"{merged_shard['models_total']}")
    return report_document(records, merged_shard)


def batch(args: Sequence[str], manifest: str | None = None, n_jobs: int | None = None,
          report: str | None = None, check: bool = False, echo: Callable[[str], None] | None = None,
          shard: tuple[int, int] | None = None) -> int:
    """The ``qconvert batch`` command; returns the exit status (0 all ok, 1 any failure or change).
    ``shard`` (K, N): convert only shard K of N (see :func:`shard_jobs`)."""
    echo = echo or (lambda s: print(s, file=sys.stderr))
    jobs = plan(args, manifest)
    shard_info = None
    if shard is not None:
        shard_info = {"index": shard[0], "count": shard[1], "models_total": len(jobs)}
        jobs = shard_jobs(jobs, *shard)
    records = run_jobs(jobs, n_jobs, check, _Progress(len(jobs)))
    failed = [r for r in records if r["status"] != "ok"]
    stale = [r for r in records if r.get("check") in ("changed", "missing")]
    if report:
        write_report(report, records, shard_info)
    for r in stale:
        echo(f"{'would change' if r['check'] == 'changed' else 'missing'}: {Path(r['model']).name} -> {r['output']}")
    verb = "checked" if check else "converted"
    tail = f", {len(stale)} out of date" if check else ""
    part = f" (shard {shard[0]}/{shard[1]} of {shard_info['models_total']} models)" if shard and shard_info else ""
    echo(f"{verb} {len(records) - len(failed)}/{len(records)}{part}, {len(failed)} failed{tail}")
    return 1 if failed or stale else 0
