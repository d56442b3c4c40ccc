"""Batch conversion: many models, an optional TOML manifest, processes, a JSON report.

Each model is one ``qconvert.api.convert`` call (``_convert_job``, in worker processes of any
start method); manifest keys are the options' keys (``qconvert/options.py``). The report
format is described by ``qconvert/tools/report_schema.json`` and docs/formats.md.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli backport, a dependency there
    import tomli as tomllib  # type: ignore[no-redef]

from qconvert import __version__, api
from qconvert.api import build_record
from qconvert.errors import ConversionError, UsageError
from qconvert.io import write_atomic
from qconvert.options import ConvertOptions, manifest_specs

REPORT_SCHEMA_VERSION = 1
# The manifest's own keys; every other key is an option (qconvert/options.py, docs/cli.md).
_OWN_DEFAULT_KEYS = {"output_dir"}
_OWN_MODEL_KEYS = {"path", "output"}


def _usage(message: str) -> Exception:

    return UsageError(message)


@dataclass
class Job:
    """One model to convert; plain data so that it pickles to a worker."""

    model: str
    output: str
    options: ConvertOptions = field(default_factory=ConvertOptions)

    @property
    def name(self) -> str:
        return Path(self.model).name


# ---------------------------------------------------------------- manifest and model list

def _split(table: dict, own: set[str], where: str) -> tuple[dict, dict]:
    """(the table's own keys, its option keys); unknown keys are a usage error."""
    allowed = own | {s.key for s in manifest_specs()}
    bad = set(table) - allowed
    if bad:
        raise _usage(f"{where}: unknown key {sorted(bad)[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return {k: v for k, v in table.items() if k in own}, {k: v for k, v in table.items() if k not in own}


def load_manifest(path: str | os.PathLike) -> tuple[dict, dict[str, dict]]:
    """(defaults, {resolved model path: settings}): settings hold ``options`` (a
    :class:`ConvertOptions`, the model's keys over the [defaults]) and ``output`` or
    ``output_dir``; UsageError on any problem, naming the key."""

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
    where = f"manifest '{path}' [defaults]"
    own, shared = _split(defaults, _OWN_DEFAULT_KEYS, where)
    ConvertOptions.check_table(shared, base, where)  # each value checked here, where it was written
    settings: dict = {k: str(base / str(v)) for k, v in own.items()}
    models: dict[str, dict] = {}
    entries = doc.get("model", [])
    if not isinstance(entries, list):
        raise _usage(f"manifest '{path}': use [[model]] for model entries")
    for i, entry in enumerate(entries, 1):
        where = f"manifest '{path}', model #{i}"
        if not isinstance(entry, dict):
            raise _usage(f"{where}: must be a table")
        own, options = _split(entry, _OWN_MODEL_KEYS, where)
        if "path" not in own:
            raise _usage(f"{where}: missing 'path'")
        merged = ConvertOptions.from_manifest({**shared, **options}, base, where)
        out = {"options": merged}
        if "output" in own:
            out["output"] = str(base / str(own["output"]))
        models[str((base / str(own["path"])).resolve())] = out
    settings["build"] = lambda: ConvertOptions.from_manifest(shared, base, f"manifest '{path}' [defaults]")
    return settings, models


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
        if "output" in entry:
            output = entry["output"]
        elif "output_dir" in defaults:
            output = str(Path(defaults["output_dir"]) / api.default_output(model).name)
        else:
            output = str(api.default_output(model))
        if "options" not in entry:  # not in the manifest: its [defaults]
            entry = {"options": defaults["build"]() if "build" in defaults else ConvertOptions()}
        jobs.append(Job(model, output, entry["options"]))
    return jobs


# ---------------------------------------------------------------- records

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
    """Worker (module level): convert one job with ``qconvert.api.convert``; write it, or with
    ``check`` compare it with the file there.

    Never raises for a model problem: the record carries the error. With ``check``
    the record has a ``check`` field: "same", "changed" or "missing".
    """
    t0 = time.perf_counter()
    try:
        if not check:
            return api.convert(job.model, job.output, job.options).record  # type: ignore[return-value]
        result = api.convert(job.model, None, job.options.replace(target=[]))
        rec = build_record(job.model, job.output, result.model, result.notes, seconds=time.perf_counter() - t0)
        try:
            old = Path(job.output).read_bytes()
        except OSError:
            old = None
        rec["check"] = "missing" if old is None else ("same" if old == result.model else "changed")
        return rec
    except api.TargetError as exc:  # written, but a target cannot run it
        return exc.result.record  # type: ignore[return-value]
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
